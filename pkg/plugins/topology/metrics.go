package topology

import (
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics on the scheduler's /metrics endpoint.
var (
	domainsChosen = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "berth_topology",
		Name:           "domains_chosen_total",
		Help:           "Domains chosen for a group's attempt, by the tier's name (\"anywhere\" when a soft group fit no domain).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"tier"})
	groupsRefused = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "berth_topology",
		Name:           "groups_refused_total",
		Help:           "Scheduling attempts refused because no allowed domain could hold the group, by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
)

func init() {
	legacyregistry.MustRegister(domainsChosen, groupsRefused)
}

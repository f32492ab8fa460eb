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
	subgroupDomainsChosen = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "berth_topology",
		Name:           "subgroup_domains_chosen_total",
		Help:           "Domains chosen for the subgroups (role replicas) with a network topology of their own when their group's domain is chosen, by the tier's name and result: in_tier, or above_tier for a soft subgroup no domain of its tier could hold.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"tier", "result"})
	groupsRefused = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "berth_topology",
		Name:           "groups_refused_total",
		Help:           "Scheduling attempts refused because no allowed domain could hold the group, by reason: no_domain, no_subgroup_domain (no domain of a subgroup's tier could hold it), spread, invalid.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
)

func init() {
	legacyregistry.MustRegister(domainsChosen, subgroupDomainsChosen, groupsRefused)
}

// countSubgroupDomain counts one subgroup's domain in subgroup_domains_chosen_total.
func countSubgroupDomain(ch subgroupChoice) {
	result := "in_tier"
	if !ch.inTier {
		result = "above_tier"
	}
	subgroupDomainsChosen.WithLabelValues(ch.tier, result).Inc()
}

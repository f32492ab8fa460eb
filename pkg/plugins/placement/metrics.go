package placement

import (
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics on the scheduler's /metrics endpoint.
var (
	plansMade = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "berth_placement",
		Name:           "plans_total",
		Help:           "Whole-group plans by result: planned (every pod of the group's minimum has a node), refused (the minimum does not fit the free capacity), stale (a plan that no longer held, made again).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	backtracks = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "berth_placement",
		Name:           "dra_backtracks_total",
		Help:           "Searches over other nodes and devices for a group with DRA claims whose first choice did not fit, by result: found (another allocation places the group's minimum), exhausted (none within the search's budget).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	allocationChecks = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "berth_placement",
		Name:           "dra_allocation_checks_total",
		Help:           "Bound pods whose claims' allocation was compared with the devices their group's plan chose, by result: agree, disagree (kube-scheduler's DynamicResources plugin allocated other devices than the plan).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	reservationsMade = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "berth_placement",
		Name:           "reservations_total",
		Help:           "Times capacity started to be kept for a new oldest blocked group.",
		StabilityLevel: metrics.ALPHA,
	})
)

func init() {
	legacyregistry.MustRegister(plansMade, reservationsMade, backtracks, allocationChecks)
}

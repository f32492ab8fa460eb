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
	reservationsMade = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "berth_placement",
		Name:           "reservations_total",
		Help:           "Times capacity started to be kept for a new oldest blocked group.",
		StabilityLevel: metrics.ALPHA,
	})
)

func init() {
	legacyregistry.MustRegister(plansMade, reservationsMade)
}

package gang

import (
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Metrics on the scheduler's /metrics endpoint.
var (
	gangsScheduled = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "berth_gang",
		Name:           "groups_released_total",
		Help:           "PodGroups whose minimum was placed and whose held pods were released to bind.",
		StabilityLevel: metrics.ALPHA,
	})
	gangsRejected = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "berth_gang",
		Name:           "groups_rejected_total",
		Help:           "Attempts to place a PodGroup that gave back what they held, by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	fastPath = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "berth_gang",
		Name:           "fast_path_total",
		Help:           "Gang pods sent straight to the node their group's plan chose (hit), and plans found stale on the way, made again around what the group holds (stale).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
)

func init() {
	legacyregistry.MustRegister(gangsScheduled, gangsRejected, fastPath)
}

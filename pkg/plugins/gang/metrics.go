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
	preemptions = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "berth_gang",
		Name:           "preemptions_total",
		Help:           "Preemption attempts for groups without a plan, by result: preempted (victims chosen and evicted), infeasible (no eviction of lower-priority groups makes room), forbidden (only evictions a PodDisruptionBudget forbids would).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	victimsEvicted = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "berth_gang",
		Name:           "preemption_victims_total",
		Help:           "What preemption evicted, by kind: group (every pod of a lower-priority group) or pod (a lone pod).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
)

func init() {
	legacyregistry.MustRegister(gangsScheduled, gangsRejected, fastPath, preemptions, victimsEvicted)
}

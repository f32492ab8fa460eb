package gang

import (
	"context"
	"sort"
	"sync"

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
	earlyReleases = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "berth_gang",
		Name:           "early_permits_total",
		Help:           "Gang pods let through Permit ahead of their group because a sibling not yet placed shares one of their ResourceClaims; each waits in PreBind (its claim's allocation written) until the group is allowed or rejected.",
		StabilityLevel: metrics.ALPHA,
	})

	// Read at scrape time from the running plugins (see stateCollector).
	trackedDesc = metrics.NewDesc("berth_gang_tracked_entries",
		"Entries the gang plugin and its placement model remember, by cache: groups for group_state (wait deadline, backoff, requirement), status_decisions (latest verdict for the PodGroup's status), podgroup_conversions, plans (plans in force: attempts, nominations, the reservation), plan_capacity (what each plan keeps per node), held_pods (groups with pods held), blocked and excluded_nodes; pods for preemption_victims and expected_devices (placed with DRA devices PostBind has yet to check); nodes for kept_nodes. Each is bounded by the groups, pods or nodes that exist: a group's entries go once its pods and PodGroup are gone.",
		[]string{"cache"}, nil, metrics.ALPHA, "")
	waitingDesc = metrics.NewDesc("berth_gang_waiting_pods",
		"Gang pods held now, waiting for the rest of their group's minimum: in Permit, or in PreBind for a pod let through ahead with a shared ResourceClaim.",
		nil, nil, metrics.ALPHA, "")
)

func init() {
	legacyregistry.MustRegister(gangsScheduled, gangsRejected, fastPath, preemptions, victimsEvicted, earlyReleases)
	legacyregistry.CustomMustRegister(&stateCollector{})
}

// running are the plugins of the schedulers running in this process (one per profile; a
// test may run several schedulers one after another), each until its context ends.
var running = struct {
	sync.Mutex
	gangs map[*Gang]bool
}{gangs: map[*Gang]bool{}}

func track(ctx context.Context, g *Gang) {
	running.Lock()
	running.gangs[g] = true
	running.Unlock()
	go func() {
		<-ctx.Done()
		running.Lock()
		delete(running.gangs, g)
		running.Unlock()
	}()
}

// stateCollector reports the running plugins' cache sizes and waiting pods, summed, when
// scraped: gauges set on every change would cost the hot path and could go stale.
type stateCollector struct{ metrics.BaseStableCollector }

func (c *stateCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- trackedDesc
	ch <- waitingDesc
}

func (c *stateCollector) CollectWithStability(ch chan<- metrics.Metric) {
	running.Lock()
	gangs := make([]*Gang, 0, len(running.gangs))
	for g := range running.gangs {
		gangs = append(gangs, g)
	}
	running.Unlock()
	sizes := map[string]int{}
	waiting := 0
	for _, g := range gangs {
		for cache, n := range g.Tracked() {
			sizes[cache] += n
		}
		waiting += g.waitingPods()
	}
	if len(gangs) == 0 {
		return
	}
	caches := make([]string, 0, len(sizes))
	for cache := range sizes {
		caches = append(caches, cache)
	}
	sort.Strings(caches)
	for _, cache := range caches {
		ch <- metrics.NewLazyConstMetric(trackedDesc, metrics.GaugeValue, float64(sizes[cache]), cache)
	}
	ch <- metrics.NewLazyConstMetric(waitingDesc, metrics.GaugeValue, float64(waiting))
}

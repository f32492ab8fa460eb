package gangapi

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coschedulingv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/pkg/sim"
)

// seedOf is the run's seed: BERTH_SEED when set, else the clock; logged either way.
func seedOf(t *testing.T) int64 {
	seed := time.Now().UnixNano()
	if s := os.Getenv("BERTH_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		seed = v
	}
	t.Logf("seed=%d (rerun with BERTH_SEED=%d)", seed, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with seed=%d", seed)
		}
	})
	return seed
}

// A seeded stream of gangs in all three APIs, about twice what two pools hold (one tainted,
// in two leaves; one not), arriving during the run, some asking for one leaf. A watch over
// the whole run sees no gang of any API partly bound; each API's PodGroup status says which
// gangs were placed and why the others wait; then placed gangs are deleted one at a time
// until every gang, whatever its API, has been placed.
func TestEveryGangAPIIsAllOrNothingUnderContention(t *testing.T) {
	seed := seedOf(t)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	w := newWorld(t)
	a := w.newPool("a", true, 3, 3)
	b := w.newPool("b", false, 4)
	w.startScheduler()
	w.waitReady(b)
	gw := w.watch()

	var gangs []*gang
	for _, p := range []*pool{a, b} {
		capacity := int64(len(p.nodes)) * 8
		for asked := int64(0); asked < 2*capacity; {
			g := &gang{api: apis[rng.IntN(len(apis))], name: fmt.Sprintf("g%d", len(gangs)), pool: p,
				pods: 1 + rng.IntN(4), gpus: []int64{2, 4, 8}[rng.IntN(3)]}
			g.min = 1 + rng.IntN(g.pods)
			if g.api == cosched || rng.IntN(2) == 0 {
				g.min = g.pods
			}
			g.leaf = g.api != cosched && p == a && rng.IntN(4) == 0 && int64(g.pods)*g.gpus <= 24
			gangs = append(gangs, g)
			asked += int64(g.pods) * g.gpus
		}
	}
	// At least one gang asks for one leaf, whatever the seed: the leaf check below must
	// have something to check.
	leafy := 0
	for _, g := range gangs {
		if g.leaf {
			leafy++
		}
	}
	for _, g := range gangs {
		if leafy == 0 && g.api != cosched && g.pool == a && int64(g.pods)*g.gpus <= 24 {
			g.leaf, leafy = true, 1
		}
	}
	require.Positive(t, leafy, "seed=%d: the stream has no gang that can ask for one leaf", seed)
	rng.Shuffle(len(gangs), func(i, j int) { gangs[i], gangs[j] = gangs[j], gangs[i] })
	for _, g := range gangs {
		t.Logf("seed=%d: %s leaf=%v", seed, g, g.leaf)
		gw.register(g)
		w.create(g)
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
	}

	// Let the stream settle: placed gangs stop changing.
	last, stable := "", time.Now()
	w.eventually("the placement settles", 60*time.Second, func() bool {
		var placed []string
		for _, g := range gangs {
			if gw.hasReached(g.name) {
				placed = append(placed, g.name)
			}
		}
		now := fmt.Sprint(placed)
		if now != last {
			last, stable = now, time.Now()
		}
		return time.Since(stable) > 3*time.Second
	})
	gw.requireNoViolations(t, seed)
	// Each API's status, for a placed gang and for a waiting one.
	for _, g := range gangs {
		placed := gw.hasReached(g.name)
		w.eventually(fmt.Sprintf("%s's status says placed=%v", g, placed), 20*time.Second, func() bool {
			says, decided := w.statusSaysPlaced(g)
			return decided && says == placed
		})
	}

	// Drain: delete the placed gangs one at a time until every gang has been placed.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var waiting []*gang
		var placed []*gang
		for _, g := range gangs {
			switch {
			case !gw.hasReached(g.name):
				waiting = append(waiting, g)
			case w.watchBound(g) > 0:
				placed = append(placed, g)
			}
		}
		if len(waiting) == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "seed=%d: %d gangs never placed while the others were deleted, e.g. %s", seed, len(waiting), waiting[0])
		if len(placed) > 0 {
			sort.Slice(placed, func(i, j int) bool { return placed[i].name < placed[j].name })
			victim := placed[rng.IntN(len(placed))]
			gw.retire(victim)
			w.remove(victim)
		}
		time.Sleep(1500 * time.Millisecond)
		gw.requireNoViolations(t, seed)
	}
	gw.requireNoViolations(t, seed)
	// Every gang has been placed by now, so every leaf gang is checked, those placed during
	// the drain too: all the nodes its pods were ever bound on are in one leaf.
	for _, g := range gangs {
		if g.leaf {
			w.requireOneLeaf(g, gw.nodes(g.name))
		}
	}
}

// requireOneLeaf asserts a leaf-constrained gang's pods share one leaf.
func (w *world) requireOneLeaf(g *gang, nodes []string) {
	w.t.Helper()
	require.NotEmpty(w.t, nodes, "%s asked for one leaf and was never seen bound", g)
	leaves := map[string]bool{}
	for _, n := range nodes {
		node, err := w.kube.CoreV1().Nodes().Get(w.ctx, n, metav1.GetOptions{})
		require.NoError(w.t, err)
		leaves[node.Labels[leafLabel]] = true
	}
	require.Len(w.t, leaves, 1, "%s asked for one leaf and got %v", g, leaves)
}

// statusSaysPlaced reads the gang's PodGroup in its own API: whether its status says the
// minimum was placed, or that it waits (with a reason where the API has room for one);
// decided is false while the status says neither.
func (w *world) statusSaysPlaced(g *gang) (placed, decided bool) {
	switch g.api {
	case volcano:
		pg, err := w.vc.SchedulingV1beta1().PodGroups(w.ns).Get(w.ctx, g.name, metav1.GetOptions{})
		require.NoError(w.t, err)
		if pg.Status.Phase == volcanov1beta1.PodGroupRunning {
			return true, true
		}
		for _, c := range pg.Status.Conditions {
			if c.Type == volcanov1beta1.PodGroupUnschedulableType && c.Status == corev1.ConditionTrue && c.Message != "" {
				return false, true
			}
		}
	case cosched:
		pg, err := w.cc.SchedulingV1alpha1().PodGroups(w.ns).Get(w.ctx, g.name, metav1.GetOptions{})
		require.NoError(w.t, err)
		switch pg.Status.Phase {
		case coschedulingv1alpha1.PodGroupScheduling, coschedulingv1alpha1.PodGroupRunning:
			return true, true
		case coschedulingv1alpha1.PodGroupPending:
			return false, true
		}
	case workload:
		pg, err := w.kube.SchedulingV1beta1().PodGroups(w.ns).Get(w.ctx, g.name, metav1.GetOptions{})
		require.NoError(w.t, err)
		if c := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled); c != nil {
			if c.Status == metav1.ConditionTrue {
				return true, true
			}
			if c.Reason == schedulingv1beta1.PodGroupReasonUnschedulable && c.Message != "" {
				return false, true
			}
		}
	}
	return false, false
}

// Gangs of different APIs preempt each other by priority, whole: a native gang of high
// priority on a pool full of a coscheduling gang and a native gang of low priority evicts
// exactly one of them, all of its pods.
func TestPreemptionAcrossGangAPIs(t *testing.T) {
	w := newWorld(t)
	p := w.newPool("p", false, 4)
	for name, value := range map[string]int32{"low": 100, "high": 1000} {
		pc := w.ns + "-" + name
		_, err := w.kube.SchedulingV1().PriorityClasses().Create(w.ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: pc}, Value: value}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = w.kube.SchedulingV1().PriorityClasses().Delete(w.ctx, pc, metav1.DeleteOptions{}) })
	}
	kubelet := sim.NewKubelet(w.kube, 50*time.Millisecond)
	go kubelet.Run(w.ctx)
	w.startScheduler()
	w.waitReady(p)
	gw := w.watch()

	lowC := &gang{api: cosched, name: "low-cosched", pool: p, pods: 2, min: 2, gpus: 8, priority: w.ns + "-low"}
	lowW := &gang{api: workload, name: "low-workload", pool: p, pods: 2, min: 2, gpus: 8, priority: w.ns + "-low"}
	for _, g := range []*gang{lowC, lowW} {
		gw.register(g)
		w.create(g)
	}
	w.eventually("both low gangs are bound", 60*time.Second, func() bool { return w.watchBound(lowC) == 2 && w.watchBound(lowW) == 2 })

	high := &gang{api: workload, name: "high", pool: p, pods: 2, min: 2, gpus: 8, priority: w.ns + "-high"}
	gw.register(high)
	w.create(high)
	w.eventually("the high gang is bound", 60*time.Second, func() bool { return w.watchBound(high) == 2 })
	c, wl := w.watchBound(lowC), w.watchBound(lowW)
	require.True(t, c == 0 && wl == 2 || c == 2 && wl == 0, "exactly one low gang is evicted, whole: coscheduling %d bound, workload %d bound", c, wl)
	if wl == 0 {
		w.eventually("the native victim's PodGroup has DisruptionTarget", 20*time.Second, func() bool {
			pg, err := w.kube.SchedulingV1beta1().PodGroups(w.ns).Get(w.ctx, lowW.name, metav1.GetOptions{})
			require.NoError(t, err)
			return meta.IsStatusConditionTrue(pg.Status.Conditions, schedulingv1beta1.DisruptionTarget)
		})
	}
	gw.requireNoViolations(t, 0)
}

// kube-scheduler's topology constraint names a node label key; berth-scheduler reads it as the
// label tier with that key, a hard constraint: each of two native gangs of three 4-GPU pods
// lands in one leaf of two nodes, although kube-scheduler's spreading score alone would spread
// its pods over both leaves.
func TestNativeTopologyKeyKeepsAGangInOneDomain(t *testing.T) {
	w := newWorld(t)
	p := w.newPool("t", false, 2, 2)
	w.startScheduler()
	w.waitReady(p)
	gw := w.watch()
	for i := 0; i < 2; i++ {
		g := &gang{api: workload, name: fmt.Sprintf("leafy-%d", i), pool: p, pods: 3, min: 3, gpus: 4, leaf: true}
		gw.register(g)
		w.create(g)
		w.eventually(g.name+" is bound", 60*time.Second, func() bool { return w.watchBound(g) == 3 })
		w.requireOneLeaf(g, gw.nodes(g.name))
	}
	gw.requireNoViolations(t, 0)
}

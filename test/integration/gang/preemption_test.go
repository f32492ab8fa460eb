package gang

// The preemption tests fill GPU nodes with lower-priority gangs and send higher-priority
// gangs at them. A simulated kubelet runs the pods and finishes their deletion, so victims
// really leave. Two watches run for the whole test: the gang watch (no group partly bound
// beyond a moment) and the eviction watch (a group losing pods loses every pod it had, each
// marked with the DisruptionTarget condition first).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/pkg/sim"
)

const leafLabel = "network.berth.sh/leaf"

// preemptWorld is a world with priority classes, a kubelet and both watches.
type preemptWorld struct {
	*world
	gw    *gangWatch
	ev    *evictionWatch
	prio  map[string]string // level -> PriorityClass name
	specs map[string]*gangSpec
}

func newPreemptWorld(t *testing.T, seed int64) *preemptWorld {
	w := newWorld(t)
	pw := &preemptWorld{world: w, prio: map[string]string{}, specs: map[string]*gangSpec{}}
	for level, value := range map[string]int32{"low": 100, "mid": 500, "high": 1000} {
		name := w.ns + "-" + level
		_, err := w.kube.SchedulingV1().PriorityClasses().Create(w.ctx, &schedulingv1.PriorityClass{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{})
		require.NoError(t, err)
		pw.prio[level] = name
		t.Cleanup(func() {
			_ = w.kube.SchedulingV1().PriorityClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	kubelet := sim.NewKubelet(w.kube, 50*time.Millisecond)
	go kubelet.Run(w.ctx)
	pw.gw = w.watchGangs(seed)
	pw.ev = w.watchEvictions()
	w.startScheduler(30, 1)
	return pw
}

// node adds an 8-GPU node with its own pool label (so a gang can be pinned to it) in leaf.
func (pw *preemptWorld) node(name, leaf string) string {
	labels := map[string]string{poolLabel: name}
	if leaf != "" {
		labels[leafLabel] = leaf
	}
	return pw.addNodeWith(name, 8, "64", labels, nil)
}

// anywhere selects every node of the world.
func (pw *preemptWorld) anywhere() map[string]string {
	return map[string]string{"berth.test/owner": pw.ns}
}

// gang creates a gang of pods single pods of gpus GPUs each, all in its minimum, at the
// priority level; onPodGroup puts the class on the PodGroup only (its pods carry none).
func (pw *preemptWorld) gang(name string, sel map[string]string, level string, onPodGroup bool, pods int, gpus int64, topo *volcanov1beta1.NetworkTopologySpec) {
	pw.t.Helper()
	r := role{name: "engine", replicas: pods, gpus: gpus, cpu: "1"}
	if !onPodGroup {
		r.priorityClass = pw.prio[level]
	}
	spec := newGangSpec(name, &gpuPool{name: name, selector: sel}, nil, r)
	pw.specs[name] = spec
	pw.gw.register(spec)
	opts := gangOpts{topology: topo}
	if onPodGroup {
		opts.priorityClass = pw.prio[level]
	}
	pw.createGangWith(name, nil, opts, spec.roles...)
}

func (pw *preemptWorld) waitBound(within time.Duration, groups ...string) {
	pw.t.Helper()
	for _, g := range groups {
		want := pw.specs[g].pods
		pw.eventually(fmt.Sprintf("all %d pods of %s are bound", want, g), within, func() bool {
			n, _ := pw.bound(g)
			return n == want
		})
	}
}

// nodesOf lists the nodes the group's pods are bound to.
func (pw *preemptWorld) nodesOf(group string) []string {
	pods, err := pw.kube.CoreV1().Pods(pw.ns).List(pw.ctx, metav1.ListOptions{LabelSelector: labelGroup + "=" + group})
	require.NoError(pw.t, err)
	var out []string
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			out = append(out, strings.TrimPrefix(p.Spec.NodeName, pw.ns+"-"))
		}
	}
	sort.Strings(out)
	return out
}

// check asserts both watches' guarantees.
func (pw *preemptWorld) check() {
	pw.t.Helper()
	pw.gw.requireNoViolations(pw.t)
	pw.ev.requireWhole(pw.t, 30*time.Second)
}

// evictionWatch records, per group, which bound pods were evicted and which pods the group
// had bound when its first pod was evicted: a group that loses any pod must lose all of
// those. It also records whether each evicted pod was marked as preempted first.
type evictionWatch struct {
	mu      sync.Mutex
	live    map[string]map[types.UID]string // group -> bound, not terminating pods
	atFirst map[string]map[types.UID]string // group -> live pods at its first eviction
	evicted map[string]map[types.UID]bool
	marked  map[types.UID]bool
	order   []string
	// boundOn lists, per node, every group that ever had a pod bound there.
	boundOn map[string]map[string]bool
}

func (w *world) watchEvictions() *evictionWatch {
	w.t.Helper()
	ew := &evictionWatch{live: map[string]map[types.UID]string{}, atFirst: map[string]map[types.UID]string{},
		evicted: map[string]map[types.UID]bool{}, marked: map[types.UID]bool{}, boundOn: map[string]map[string]bool{}}
	_, stop := w.watchPods(ew.observe)
	w.t.Cleanup(stop)
	return ew
}

func (ew *evictionWatch) observe(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	group := p.Annotations[groupNameKey]
	if group == "" {
		return
	}
	ew.mu.Lock()
	defer ew.mu.Unlock()
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == corev1.PodReasonPreemptionByScheduler {
			ew.marked[p.UID] = true
		}
	}
	if ew.live[group] == nil {
		ew.live[group] = map[types.UID]string{}
	}
	_, wasLive := ew.live[group][p.UID]
	switch {
	case (deleted || p.DeletionTimestamp != nil) && wasLive:
		if ew.atFirst[group] == nil {
			snap := map[types.UID]string{}
			for uid, name := range ew.live[group] {
				snap[uid] = name
			}
			ew.atFirst[group] = snap
			ew.evicted[group] = map[types.UID]bool{}
			ew.order = append(ew.order, group)
		}
		ew.evicted[group][p.UID] = true
		delete(ew.live[group], p.UID)
	case !deleted && p.DeletionTimestamp == nil && p.Spec.NodeName != "":
		ew.live[group][p.UID] = p.Name
		if ew.boundOn[p.Spec.NodeName] == nil {
			ew.boundOn[p.Spec.NodeName] = map[string]bool{}
		}
		ew.boundOn[p.Spec.NodeName][group] = true
	}
}

// everBoundOn reports whether any pod of the group was ever bound on the node.
func (ew *evictionWatch) everBoundOn(node, group string) bool {
	ew.mu.Lock()
	defer ew.mu.Unlock()
	return ew.boundOn[node][group]
}

// groups lists the groups that lost pods, in the order their first pod went.
func (ew *evictionWatch) groups() []string {
	ew.mu.Lock()
	defer ew.mu.Unlock()
	return append([]string(nil), ew.order...)
}

// requireWhole waits until every group that lost a pod has lost every pod it had bound
// then, and checks each was marked as preempted.
func (ew *evictionWatch) requireWhole(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var partial, unmarked []string
		ew.mu.Lock()
		for _, g := range ew.order {
			var kept []string
			for uid, name := range ew.atFirst[g] {
				if !ew.evicted[g][uid] {
					kept = append(kept, name)
				}
				if ew.evicted[g][uid] && !ew.marked[uid] {
					unmarked = append(unmarked, name)
				}
			}
			if len(kept) > 0 {
				sort.Strings(kept)
				partial = append(partial, fmt.Sprintf("group %s lost %d pods but kept %v", g, len(ew.evicted[g]), kept))
			}
		}
		ew.mu.Unlock()
		if len(partial) == 0 {
			sort.Strings(unmarked)
			require.Empty(t, unmarked, "evicted pods without the DisruptionTarget condition (reason PreemptionByScheduler)")
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a group was partly evicted:\n  %s", strings.Join(partial, "\n  "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func hardLeaf() *volcanov1beta1.NetworkTopologySpec {
	return &volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierName: "leaf"}
}

// Whole gangs go, the lowest priority first, then the fewest. n1 runs one low gang of two
// pods, n2 two small low gangs, n3 and n4 a mid gang of two pods each. A high gang of one
// 8-GPU pod (priority on its PodGroup only) evicts n1's gang alone; a second of two 8-GPU
// pods then evicts both small low gangs and exactly one mid gang, each whole.
func TestPreemptionEvictsWholeGangsLowestThenFewest(t *testing.T) {
	pw := newPreemptWorld(t, 0)
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		pw.node(n, "")
	}
	on := func(n string) map[string]string { return map[string]string{poolLabel: n} }
	pw.gang("low-big", on("n1"), "low", false, 2, 4, nil)
	pw.gang("low-a", on("n2"), "low", false, 1, 4, nil)
	pw.gang("low-b", on("n2"), "low", true, 1, 4, nil)
	pw.gang("mid-1", on("n3"), "mid", false, 2, 4, nil)
	pw.gang("mid-2", on("n4"), "mid", false, 2, 4, nil)
	pw.waitBound(60*time.Second, "low-big", "low-a", "low-b", "mid-1", "mid-2")

	pw.gang("high-1", pw.anywhere(), "high", true, 1, 8, nil)
	pw.waitBound(60*time.Second, "high-1")
	require.Equal(t, []string{"n1"}, pw.nodesOf("high-1"))
	require.Equal(t, []string{"low-big"}, pw.ev.groups(), "high-1 needs one node: only the lowest, fewest victim goes")
	pw.eventually("low-big's PodGroup says it was preempted", 20*time.Second, func() bool {
		return strings.Contains(unschedulableMessage(pw.podGroup("low-big")), "preempted by gang "+pw.ns+"/high-1")
	})
	pw.eventually("high-1's PodGroup has a Preempting event", 20*time.Second, func() bool {
		evs, err := pw.kube.EventsV1().Events(pw.ns).List(pw.ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, e := range evs.Items {
			if e.Regarding.Name == "high-1" && e.Reason == "Preempting" && strings.Contains(e.Note, "low-big") {
				return true
			}
		}
		return false
	})

	pw.gang("high-2", pw.anywhere(), "high", false, 2, 8, nil)
	pw.waitBound(60*time.Second, "high-2")
	got := pw.ev.groups()[1:]
	sort.Strings(got)
	require.Len(t, got, 3, "high-2 needs two nodes: both small low gangs and one mid gang; evicted %v", got)
	require.Equal(t, []string{"low-a", "low-b"}, got[:2])
	require.Contains(t, []string{"mid-1", "mid-2"}, got[2])
	pw.check()
}

// With a hard leaf constraint the preemptor's room is one leaf: its two 8-GPU pods land in
// one leaf, and the two gangs evicted are that leaf's, even though the two low gangs in
// different leaves would have been cheaper without the constraint.
func TestPreemptionStaysInsideTheTopologyDomain(t *testing.T) {
	pw := newPreemptWorld(t, 0)
	pw.node("n1", "leaf-a")
	pw.node("n2", "leaf-a")
	pw.node("n3", "leaf-b")
	pw.node("n4", "leaf-b")
	on := func(n string) map[string]string { return map[string]string{poolLabel: n} }
	pw.gang("low-1", on("n1"), "low", false, 1, 8, nil)
	pw.gang("mid-1", on("n2"), "mid", false, 1, 8, nil)
	pw.gang("mid-2", on("n3"), "mid", false, 1, 8, nil)
	pw.gang("low-2", on("n4"), "low", false, 1, 8, nil)
	pw.waitBound(60*time.Second, "low-1", "mid-1", "mid-2", "low-2")

	pw.gang("high", pw.anywhere(), "high", false, 2, 8, hardLeaf())
	pw.waitBound(60*time.Second, "high")
	nodes := pw.nodesOf("high")
	evicted := pw.ev.groups()
	sort.Strings(evicted)
	byLeaf := map[string][]string{"leaf-a": {"low-1", "mid-1"}, "leaf-b": {"low-2", "mid-2"}}
	leafOf := map[string]string{"n1": "leaf-a", "n2": "leaf-a", "n3": "leaf-b", "n4": "leaf-b"}
	require.Len(t, nodes, 2)
	require.Equal(t, leafOf[nodes[0]], leafOf[nodes[1]], "high's pods are split across leaves: %v", nodes)
	require.Equal(t, byLeaf[leafOf[nodes[0]]], evicted, "only the gangs of high's leaf go")
	pw.check()
}

// A disruption budget forbids evicting the only gang that would make room: nothing is
// evicted and the preemptor's PodGroup says which budget. A second preemptor that fits by
// evicting an unprotected gang of higher priority does so, leaving the protected one.
func TestPreemptionRespectsDisruptionBudgets(t *testing.T) {
	pw := newPreemptWorld(t, 0)
	for _, n := range []string{"n1", "n2"} {
		pw.addNodeWith(n, 8, "64", map[string]string{poolLabel: "guarded"}, nil)
	}
	pw.node("n3", "")
	pw.gang("low-guarded", map[string]string{poolLabel: "guarded"}, "low", false, 2, 8, nil)
	pw.gang("mid", map[string]string{poolLabel: "n3"}, "mid", false, 1, 8, nil)
	pw.waitBound(60*time.Second, "low-guarded", "mid")
	_, err := pw.kube.PolicyV1().PodDisruptionBudgets(pw.ns).Create(pw.ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guard"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{labelGroup: "low-guarded"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	// The budget counts ready pods: wait until the kubelet reports both.
	pw.eventually("low-guarded's pods are ready", 30*time.Second, func() bool {
		pods, err := pw.kube.CoreV1().Pods(pw.ns).List(pw.ctx, metav1.ListOptions{LabelSelector: labelGroup + "=low-guarded"})
		require.NoError(t, err)
		ready := 0
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == 2
	})

	preemptedBefore, _ := counterValue(t, "berth_gang_preemptions_total", map[string]string{"result": "preempted"})
	pw.gang("high-wide", pw.anywhere(), "high", false, 2, 8, nil)
	// The scheduler has tried high-wide and decided (the PodGroup names the budget); a
	// preemption is counted when decided, before its evictions go out.
	pw.eventually("high-wide's PodGroup names the budget", 30*time.Second, func() bool {
		return strings.Contains(unschedulableMessage(pw.podGroup("high-wide")), "PodDisruptionBudget "+pw.ns+"/guard")
	})
	preemptedAfter, _ := counterValue(t, "berth_gang_preemptions_total", map[string]string{"result": "preempted"})
	require.Equal(t, preemptedBefore, preemptedAfter, "berth_gang_preemptions_total{result=preempted} grew for high-wide")
	require.Empty(t, pw.ev.groups(), "nothing is evicted for high-wide")
	forbidden, found := counterValue(t, "berth_gang_preemptions_total", map[string]string{"result": "forbidden"})
	require.True(t, found && forbidden > 0, "berth_gang_preemptions_total{result=forbidden} counts the refusal")

	pw.gang("high-one", pw.anywhere(), "high", false, 1, 8, nil)
	pw.waitBound(60*time.Second, "high-one")
	require.Equal(t, []string{"n3"}, pw.nodesOf("high-one"))
	require.Equal(t, []string{"mid"}, pw.ev.groups(), "the budget keeps low-guarded; mid goes instead")
	n, _ := pw.bound("low-guarded")
	require.Equal(t, 2, n)
	pw.check()
}

// A seeded stream: a main pool of two leaves and a side pool, filled with low gangs of
// random shapes (priority on pods or on the PodGroup); high gangs arrive, some with a hard
// leaf constraint, while more low gangs keep arriving. Every preemptor is bound; every
// victim was bound before it came and lost all of its pods; nothing on the side pool is
// touched; and when the victims come back (as a controller recreates them), they evict
// nothing in turn, since every other gang is of their own priority: no cascade.
// BERTH_SEED=<n> replays a stream.
func TestPreemptionRandomStreamNoCascade(t *testing.T) {
	seed, notes := contentionSeed(t)
	pw := newPreemptWorld(t, seed)
	pw.gw.notes = notes
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	main := &gpuPool{name: "main", selector: map[string]string{poolLabel: "main"}}
	side := &gpuPool{name: "side", selector: map[string]string{poolLabel: "side"}}
	leafOf := map[string]string{}
	for i := 0; i < 8; i++ {
		leaf := fmt.Sprintf("leaf-%d", i/4)
		n := pw.addNodeWith(fmt.Sprintf("m%d", i), 8, "64", map[string]string{poolLabel: "main", leafLabel: leaf}, nil)
		leafOf[n] = leaf
	}
	for i := 0; i < 4; i++ {
		pw.addNodeWith(fmt.Sprintf("s%d", i), 8, "64", map[string]string{poolLabel: "side"}, nil)
	}

	// Fill each pool with random low gangs, largest pods first so they pack exactly.
	fill := func(p *gpuPool, gpus int64, prefix string) []string {
		var sizes []int64
		for left := gpus; left > 0; {
			s := []int64{8, 4, 2}[rng.IntN(3)]
			if s > left {
				continue
			}
			sizes = append(sizes, s)
			left -= s
		}
		sort.Slice(sizes, func(i, j int) bool { return sizes[i] > sizes[j] })
		var names []string
		for i := 0; i < len(sizes); {
			n := 1 + rng.IntN(3) // pods of one size per gang
			for n > 1 && (i+n > len(sizes) || sizes[i+n-1] != sizes[i]) {
				n--
			}
			name := fmt.Sprintf("%s-%d", prefix, len(names))
			pw.gang(name, p.selector, "low", rng.IntN(2) == 0, n, sizes[i], nil)
			names = append(names, name)
			i += n
			time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
		}
		return names
	}
	mainGangs := fill(main, 64, "low-m")
	sideGangs := fill(side, 32, "low-s")
	pw.waitBound(90*time.Second, append(append([]string{}, mainGangs...), sideGangs...)...)
	t.Logf("seed=%d: %d low gangs fill the main pool, %d the side pool", seed, len(mainGangs), len(sideGangs))

	// Preemptors arrive one by one, each with low gangs arriving right behind it.
	preemptorNodes := map[string][]string{} // late gang -> nodes of the preemptor it followed
	preemptors := 1 + rng.IntN(2)
	for i := 0; i < preemptors; i++ {
		name := fmt.Sprintf("high-%d", i)
		pods := 1 + rng.IntN(2)
		var topo *volcanov1beta1.NetworkTopologySpec
		if rng.IntN(2) == 0 {
			topo = hardLeaf()
		}
		pw.gang(name, main.selector, "high", rng.IntN(2) == 0, pods, 8, topo)
		var late []string
		for j := 0; j < 2; j++ {
			l := fmt.Sprintf("late-%d-%d", i, j)
			pw.gang(l, main.selector, "low", false, 1, 8, nil)
			late = append(late, l)
		}
		pw.waitBound(90*time.Second, name)
		nodes := pw.nodesOf(name)
		for _, l := range late {
			for _, n := range nodes {
				preemptorNodes[l] = append(preemptorNodes[l], pw.ns+"-"+n)
			}
		}
		t.Logf("seed=%d: %s (%d x 8 GPUs, leaf constraint %v) bound on %v", seed, name, pods, topo != nil, nodes)
		if topo != nil {
			for _, n := range nodes {
				require.Equal(t, leafOf[pw.ns+"-"+nodes[0]], leafOf[pw.ns+"-"+n], "%s split across leaves", name)
			}
		}
	}
	pw.check()
	evicted := pw.ev.groups()
	t.Logf("seed=%d: evicted %v", seed, evicted)
	require.NotEmpty(t, evicted)
	for _, g := range evicted {
		require.False(t, strings.HasPrefix(g, "low-s"), "%s on the side pool was evicted; no preemptor may use that pool", g)
	}
	// A preemptor takes whole nodes: a gang arriving right behind it that was ever bound
	// on one of them took the room kept for it.
	for l, nodes := range preemptorNodes {
		for _, n := range nodes {
			require.False(t, pw.ev.everBoundOn(n, l), "late gang %s was bound on %s, room a preemptor's eviction made for itself", l, n)
		}
	}

	// The victims come back; with nothing of lower priority left to evict they wait, and
	// no further gang is evicted. Proof that they were looked at, not just not got to yet:
	// berth-scheduler tried every pod of each and refused it (or bound it). Preemption is
	// decided in PostFilter, before that refusal is written, and counted there at once (the
	// evictions follow in the background), so berth_gang_preemptions_total{result=preempted}
	// standing still since the victims came back is no preemption by any of them.
	preemptedBefore, _ := counterValue(t, "berth_gang_preemptions_total", map[string]string{"result": "preempted"})
	for _, g := range evicted {
		pw.recreate(g)
	}
	for _, g := range evicted {
		pw.tried(g, 60*time.Second)
	}
	preemptedAfter, _ := counterValue(t, "berth_gang_preemptions_total", map[string]string{"result": "preempted"})
	require.Equal(t, preemptedBefore, preemptedAfter, "berth_gang_preemptions_total{result=preempted} grew once the victims were back: a victim preempted in turn")
	require.Equal(t, evicted, pw.ev.groups(), "no further gang is evicted once the victims are back")
	for i := 0; i < preemptors; i++ {
		n, _ := pw.bound(fmt.Sprintf("high-%d", i))
		require.Equal(t, pw.specs[fmt.Sprintf("high-%d", i)].pods, n)
	}
	pw.check()
}

// recreate creates the group's pods again, as the controller that owns them would.
func (pw *preemptWorld) recreate(group string) {
	pw.t.Helper()
	pw.eventually("the victim's pods are gone", 30*time.Second, func() bool {
		pods, err := pw.kube.CoreV1().Pods(pw.ns).List(pw.ctx, metav1.ListOptions{LabelSelector: labelGroup + "=" + group})
		require.NoError(pw.t, err)
		return len(pods.Items) == 0
	})
	s := pw.specs[group]
	for _, r := range s.roles {
		for j := 0; j < r.replicas; j++ {
			task := fmt.Sprintf("%s-%d", r.name, j)
			for k := 0; k <= r.workers; k++ {
				_, err := pw.kube.CoreV1().Pods(pw.ns).Create(pw.ctx, pw.gangPod(group, r, task, k), metav1.CreateOptions{})
				require.NoError(pw.t, err)
			}
		}
	}
}

// A pod without a group is a victim on its own, as in kube-scheduler's preemption, even when
// another scheduler placed it: a high gang of one 8-GPU pod evicts the lone pod filling n1
// (priority 0) rather than the mid-priority gang filling n2, marking it first.
func TestPreemptionEvictsALonePodOnItsOwn(t *testing.T) {
	pw := newPreemptWorld(t, 0)
	n1 := pw.node("n1", "")
	pw.node("n2", "")
	pw.createBoundPod("lone", n1, 8)
	pw.gang("mid", map[string]string{poolLabel: "n2"}, "mid", false, 2, 4, nil)
	pw.waitBound(60*time.Second, "mid")

	pw.gang("high", pw.anywhere(), "high", false, 1, 8, nil)
	pw.waitBound(60*time.Second, "high")
	require.Equal(t, []string{"n1"}, pw.nodesOf("high"))
	_, err := pw.kube.CoreV1().Pods(pw.ns).Get(pw.ctx, "lone", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the lone pod was evicted: %v", err)
	pw.eventually("the lone pod has a Preempted event", 20*time.Second, func() bool {
		evs, err := pw.kube.EventsV1().Events(pw.ns).List(pw.ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, e := range evs.Items {
			if e.Regarding.Name == "lone" && e.Reason == "Preempted" && strings.Contains(e.Note, "high") {
				return true
			}
		}
		return false
	})
	require.Empty(t, pw.ev.groups(), "no gang was evicted")
	pw.check()
}

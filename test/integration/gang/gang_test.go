package gang

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// quiet is how long a test watches that nothing binds that must not, once the scheduler has
// tried and refused the pods (world.refused).
const quiet = 3 * time.Second

// A 1P2D group binds all or nothing. With room for the prefill and one decode replica only,
// nothing binds and the PodGroup says which role is short and of what; a new node makes the
// whole group bind.
func TestPrefillDecodeGroupBindsAllOrNothing(t *testing.T) {
	w := newWorld(t)
	w.startScheduler(10, 1)
	w.addNode("gpu-a", 8, "64")
	w.addNode("gpu-b", 4, "64")
	w.createGang("qwen-0", nil,
		role{name: "prefill", replicas: 1, gpus: 4},
		role{name: "decode", replicas: 2, gpus: 8},
	)

	want := "decode needs 2 complete replicas, 1 fits: 0/2 nodes its pods may use have 8 free nvidia.com/gpu"
	w.eventually("the PodGroup explains why it is pending", 15*time.Second, func() bool {
		return strings.HasPrefix(unschedulableMessage(w.podGroup("qwen-0")), want)
	})
	w.refused("qwen-0", "", 15*time.Second)
	w.consistently("no pod of the group binds", quiet, func() bool { n, _ := w.bound("qwen-0"); return n == 0 })
	assert.Equal(t, volcanov1beta1.PodGroupPending, w.podGroup("qwen-0").Status.Phase)

	w.addNode("gpu-c", 8, "64")
	w.eventually("the whole group binds", 20*time.Second, func() bool { n, _ := w.bound("qwen-0"); return n == 3 })
	w.eventually("the PodGroup reports Running", 10*time.Second, func() bool {
		pg := w.podGroup("qwen-0")
		return pg.Status.Phase == volcanov1beta1.PodGroupRunning && unschedulableMessage(pg) == ""
	})
}

// A role replica of an entry and 3 workers is placed whole: never its entry without all its
// workers, also for replicas beyond the gang minimum.
func TestRoleReplicaWithWorkersIsNeverSplit(t *testing.T) {
	w := newWorld(t)
	w.startScheduler(10, 1)
	for i := 0; i < 6; i++ {
		w.addNode(fmt.Sprintf("gpu-%d", i), 8, "64")
	}
	// Minimum: 1 replica of 4 pods. The second replica fits only 2 of its 4 pods.
	w.createGang("tp-0", map[string]int{"server": 1}, role{name: "server", replicas: 2, workers: 3, gpus: 8})

	w.eventually("the minimum replica binds whole", 20*time.Second, func() bool {
		_, byTask := w.bound("tp-0")
		return byTask["server-0"] == 4
	})
	w.refused("tp-0", "server-1", 30*time.Second)
	w.consistently("the second replica binds no pod while it cannot bind all four", quiet, func() bool {
		_, byTask := w.bound("tp-0")
		return byTask["server-1"] == 0 && byTask["server-0"] == 4
	})

	w.addNode("gpu-6", 8, "64")
	w.addNode("gpu-7", 8, "64")
	w.eventually("the second replica binds whole once it fits", 20*time.Second, func() bool {
		_, byTask := w.bound("tp-0")
		return byTask["server-1"] == 4
	})
}

// Two gangs that each fit alone but not together: exactly one binds, the other binds
// nothing, and binds once the first is deleted.
func TestCompetingGangsNeverDeadlock(t *testing.T) {
	w := newWorld(t)
	w.startScheduler(5, 1)
	for i := 0; i < 4; i++ {
		w.addNode(fmt.Sprintf("gpu-%d", i), 8, "64")
	}
	w.createGang("a", nil, role{name: "server", replicas: 3, gpus: 8})
	w.createGang("b", nil, role{name: "server", replicas: 3, gpus: 8})

	var winner, loser string
	w.eventually("one gang binds fully", 30*time.Second, func() bool {
		a, _ := w.bound("a")
		b, _ := w.bound("b")
		switch {
		case a == 3 && b == 0:
			winner, loser = "a", "b"
		case b == 3 && a == 0:
			winner, loser = "b", "a"
		}
		return winner != ""
	})
	w.refused(loser, "", 30*time.Second)
	w.consistently("the other gang binds nothing", quiet, func() bool {
		n, _ := w.bound(loser)
		m, _ := w.bound(winner)
		return n == 0 && m == 3
	})
	assert.Contains(t, unschedulableMessage(w.podGroup(loser)), "server needs 3 complete replicas, 1 fits")

	w.deleteGroupPods(winner)
	w.eventually("the other gang binds once the first is gone", 30*time.Second, func() bool { n, _ := w.bound(loser); return n == 3 })
}

// 20 gangs race for a cluster that fits 10: 10 bind fully, the others bind nothing. A watch
// over the whole run sees every bind and deletion: no bound pod is ever deleted or marked for
// deletion (the test deletes nothing until it ends, so a gang losing a pod is the scheduler
// evicting it), no pod binds once 10 gangs fill the cluster (that would overcommit a node or
// leave a group partly bound), and in the end every group has 0 or 3 pods bound.
func TestTwentyGangsRaceForTen(t *testing.T) {
	w := newWorld(t)
	for i := 0; i < 10; i++ {
		w.addNode(fmt.Sprintf("cpu-%d", i), 0, "3") // 3 pods of 1 CPU each
	}
	rw := &raceWatch{size: 3, fill: 10, bound: map[string]map[types.UID]string{}, complete: map[string]bool{}}
	// Registered before the watch, so it runs after the watch has stopped, at the end of
	// the test: what the watch saw after the check below fails the test too.
	t.Cleanup(func() { rw.checkLate(t) })
	follow := w.followPods(rw.observe)

	for i := 0; i < 20; i++ {
		w.createGang(fmt.Sprintf("g%02d", i), nil, role{name: "server", replicas: 3, cpu: "1"})
	}
	w.startScheduler(5, 1)

	count := func() (full, empty, partial int) {
		for i := 0; i < 20; i++ {
			switch n, _ := w.bound(fmt.Sprintf("g%02d", i)); n {
			case 3:
				full++
			case 0:
				empty++
			default:
				partial++
			}
		}
		return
	}
	w.eventually("10 gangs bind fully", 60*time.Second, func() bool { full, _, _ := count(); return full == 10 })
	for i := 0; i < 20; i++ {
		if n, _ := w.bound(fmt.Sprintf("g%02d", i)); n == 0 {
			w.refused(fmt.Sprintf("g%02d", i), "", 30*time.Second)
		}
	}
	w.consistently("10 gangs stay fully bound and 10 bind nothing", quiet, func() bool {
		full, empty, partial := count()
		return full == 10 && empty == 10 && partial == 0
	})
	follow.sync()
	rw.check(t)
}

// raceWatch follows the pods of TestTwentyGangsRaceForTen. A group is complete once all its
// size pods are bound; the race has settled once fill groups are complete, when the cluster
// is full and nothing else can bind.
type raceWatch struct {
	size, fill int

	mu         sync.Mutex
	bound      map[string]map[types.UID]string // group -> bound pod -> name
	complete   map[string]bool
	settled    bool
	binds      int
	violations []string
	reported   int // violations check has reported
}

func (rw *raceWatch) observe(typ watch.EventType, p *corev1.Pod) {
	g := p.Labels[labelGroup]
	if g == "" {
		return
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.bound[g] == nil {
		rw.bound[g] = map[types.UID]string{}
	}
	_, wasBound := rw.bound[g][p.UID]
	switch {
	case typ == watch.Deleted || p.DeletionTimestamp != nil:
		what := "deleted"
		if typ != watch.Deleted {
			what = "marked for deletion"
		}
		if wasBound {
			rw.violations = append(rw.violations, fmt.Sprintf("bound pod %s of group %s (%d/%d bound, complete: %v) was %s while the test deleted nothing",
				p.Name, g, len(rw.bound[g]), rw.size, rw.complete[g], what))
			delete(rw.bound[g], p.UID)
		} else if typ == watch.Deleted {
			rw.violations = append(rw.violations, fmt.Sprintf("pod %s of group %s was deleted while the test deleted nothing", p.Name, g))
		}
	case p.Spec.NodeName != "" && !wasBound:
		rw.bound[g][p.UID] = p.Name
		rw.binds++
		if rw.settled {
			rw.violations = append(rw.violations, fmt.Sprintf("pod %s of group %s bound on %s after %d groups filled the cluster (group now %d/%d bound)",
				p.Name, g, p.Spec.NodeName, rw.fill, len(rw.bound[g]), rw.size))
		}
		if len(rw.bound[g]) == rw.size {
			rw.complete[g] = true
			rw.settled = rw.settled || len(rw.complete) == rw.fill
		}
	}
}

// check fails the test for every violation seen, for a race the watch did not see settle,
// and for a group partly bound at the end.
func (rw *raceWatch) check(t *testing.T) {
	t.Helper()
	rw.mu.Lock()
	defer rw.mu.Unlock()
	require.True(t, rw.settled, "the watch saw %d binds and %d complete groups; it must see the %d groups that filled the cluster bind", rw.binds, len(rw.complete), rw.fill)
	assert.Equal(t, rw.fill*rw.size, rw.binds, "binds the watch saw")
	rw.reported = len(rw.violations)
	if len(rw.violations) > 0 {
		t.Errorf("a gang lost a bound pod, or a pod bound after the cluster was full:\n  %s", strings.Join(rw.violations, "\n  "))
	}
	for g, pods := range rw.bound {
		if n := len(pods); n != 0 && n != rw.size {
			t.Errorf("group %s ends with %d of its %d pods bound; a group binds 0 or all", g, n, rw.size)
		}
	}
}

// checkLate fails the test for violations seen after check.
func (rw *raceWatch) checkLate(t *testing.T) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if late := rw.violations[rw.reported:]; len(late) > 0 {
		t.Errorf("after the race was checked, until the test ended:\n  %s", strings.Join(late, "\n  "))
	}
}

// Pods of the default scheduler on the same nodes count: a gang never overcommits a node,
// and berth-scheduler never touches a pod that names another scheduler. A watch over the
// whole test records every bind; the gang's first window ends only once berth-scheduler has
// tried the gang and refused it for want of GPUs, so "nothing bound" means it looked.
func TestDefaultSchedulerPodsAreRespected(t *testing.T) {
	w := newWorld(t)
	w.startScheduler(5, 1)
	w.addNode("gpu-a", 8, "64")
	node := w.ns + "-gpu-a"

	var mu sync.Mutex
	var binds []string // "pod@node", in the order the watch saw them
	boundOn := map[string]string{}
	follow := w.followPods(func(_ watch.EventType, p *corev1.Pod) {
		mu.Lock()
		defer mu.Unlock()
		if p.Spec.NodeName != "" && boundOn[p.Name] == "" {
			boundOn[p.Name] = p.Spec.NodeName
			binds = append(binds, p.Name+"@"+strings.TrimPrefix(p.Spec.NodeName, w.ns+"-"))
		}
	})
	bindsSeen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(binds)
	}

	// Bound by the default scheduler earlier: 6 of the 8 GPUs are taken.
	taken := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "training"},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "trainer",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{gpu: resource.MustParse("6")}, Limits: corev1.ResourceList{gpu: resource.MustParse("6")}}}}},
	}
	_, err := w.kube.CoreV1().Pods(w.ns).Create(w.ctx, taken, metav1.CreateOptions{})
	require.NoError(t, err)
	// Pending for the default scheduler (which does not run here): berth must leave it alone.
	other := taken.DeepCopy()
	other.Name, other.Spec.NodeName, other.Spec.SchedulerName = "notebook", "", corev1.DefaultSchedulerName
	_, err = w.kube.CoreV1().Pods(w.ns).Create(w.ctx, other, metav1.CreateOptions{})
	require.NoError(t, err)

	w.createGang("llm-0", nil, role{name: "server", replicas: 1, gpus: 4})
	// The refusal berth-scheduler records on the pod (PodScheduled=False, Unschedulable)
	// and on the PodGroup (why, in GPUs) shows it tried the gang against gpu-a.
	w.eventually("berth-scheduler has tried llm-0 and refused it for want of GPUs", 20*time.Second, func() bool {
		p, err := w.kube.CoreV1().Pods(w.ns).Get(w.ctx, "llm-0-server-0-0", metav1.GetOptions{})
		require.NoError(t, err)
		require.Empty(t, p.Spec.NodeName, "the gang bound while gpu-a, with 2 GPUs free, was the only node: it overcommitted the node")
		refused := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				refused = true
			}
		}
		return refused && strings.Contains(unschedulableMessage(w.podGroup("llm-0")), "free "+string(gpu))
	})

	w.addNode("gpu-b", 8, "64")
	w.eventually("the gang binds on the new node", 20*time.Second, func() bool { n, _ := w.bound("llm-0"); return n == 1 })
	follow.sync()
	// Had the gang bound on gpu-a (overcommitting it) while it was refused, or anywhere
	// before gpu-b came, it would show here, in the order the binds happened.
	require.Equal(t, []string{"training@gpu-a", "llm-0-server-0-0@gpu-b"}, bindsSeen(),
		"every bind of the test; the notebook pod names another scheduler and must never bind")
}

// The scheduler restarted while a gang waits in Permit: nothing of the gang was bound, and
// after the restart the gang completes whole. That the gang's pods were held in Permit when
// the scheduler stopped, and were held again by the new one, is read off
// berth_gang_waiting_pods (the framework's waiting pods; no earlier scheduler of this
// process counts, each stops counting when it stops); a watch over the whole test sees
// that no pod of the gang binds before the last one is ungated.
func TestSchedulerRestartWhileGangWaitsInPermit(t *testing.T) {
	w := newWorld(t)
	stop := w.startScheduler(120, 1)
	for i := 0; i < 3; i++ {
		w.addNode(fmt.Sprintf("gpu-%d", i), 8, "64")
	}
	// In the watch's order, which is the apiserver's: a pod of the gang bound before the
	// third pod's gate was removed was bound while the gang was incomplete.
	var mu sync.Mutex
	ungated := false
	early := map[string]string{}
	follow := w.followPods(func(_ watch.EventType, p *corev1.Pod) {
		if p.Labels[labelGroup] != "held" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if p.Name == "held-server-2-0" && len(p.Spec.SchedulingGates) == 0 {
			ungated = true
		}
		if p.Spec.NodeName != "" && !ungated {
			early[p.Name] = p.Spec.NodeName
		}
	})
	// The third pod exists but is gated, so the first two are placed and held in Permit.
	w.gated = map[string]bool{"held-server-2-0": true}
	w.createGang("held", nil, role{name: "server", replicas: 3, gpus: 8})

	w.eventually("both ungated pods wait in Permit", 30*time.Second, func() bool { return waitingPods(t) == 2 })
	stop()
	n, _ := w.bound("held")
	require.Zero(t, n, "a held pod was bound when the scheduler stopped")
	// Then only the new scheduler's holds count.
	w.eventually("the stopped scheduler no longer reports waiting pods", 10*time.Second, func() bool { return waitingPods(t) == -1 })

	w.startScheduler(120, 1)
	// The new scheduler knows nothing of the old one's holds: it must place and hold the
	// two pods again, not bind them.
	w.eventually("the restarted scheduler holds both ungated pods in Permit again", 30*time.Second, func() bool { return waitingPods(t) == 2 })
	n, _ = w.bound("held")
	require.Zero(t, n, "a held pod was bound after the restart")
	w.ungate("held-server-2-0")
	w.eventually("the gang completes whole after the restart", 30*time.Second, func() bool { n, _ := w.bound("held"); return n == 3 })
	follow.sync()
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, early, "pods of the gang bound (pod: node) while its third pod was gated")
}

// A gang that cannot complete holds capacity only until its wait timeout: then every held
// sibling is released, the PodGroup says why, and another gang can use the nodes.
func TestWaitTimeoutReleasesHeldCapacity(t *testing.T) {
	w := newWorld(t)
	w.startScheduler(2, 5) // hold for 2s, then back off for 5s
	for i := 0; i < 3; i++ {
		w.addNode(fmt.Sprintf("gpu-%d", i), 8, "64")
	}
	// "stuck" needs 3 nodes but its third pod is gated: two pods are held in Permit.
	w.gated = map[string]bool{"stuck-server-2-0": true}
	w.createGang("stuck", nil, role{name: "server", replicas: 3, gpus: 8})

	w.eventually("the PodGroup reports the timeout", 15*time.Second, func() bool {
		pg := w.podGroup("stuck")
		for _, c := range pg.Status.Conditions {
			if c.Type == volcanov1beta1.PodGroupUnschedulableType && c.Reason == "WaitTimeout" {
				return true
			}
		}
		return false
	})
	n, _ := w.bound("stuck")
	require.Zero(t, n)

	// While "stuck" backs off, a 3-node gang gets the capacity it had held.
	w.createGang("next", nil, role{name: "server", replicas: 3, gpus: 8})
	w.eventually("another gang binds on the released nodes", 15*time.Second, func() bool { n, _ := w.bound("next"); return n == 3 })
	n, _ = w.bound("stuck")
	assert.Zero(t, n)
}

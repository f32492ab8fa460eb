package gang

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// quiet is how long a test watches that nothing binds that must not.
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
	w.consistently("the other gang binds nothing", quiet, func() bool {
		n, _ := w.bound(loser)
		m, _ := w.bound(winner)
		return n == 0 && m == 3
	})
	assert.Contains(t, unschedulableMessage(w.podGroup(loser)), "server needs 3 complete replicas, 1 fits")

	w.deleteGroupPods(winner)
	w.eventually("the other gang binds once the first is gone", 30*time.Second, func() bool { n, _ := w.bound(loser); return n == 3 })
}

// 20 gangs race for a cluster that fits 10: 10 bind fully, the others bind nothing, and a
// watch over the whole run never sees a bound pod of a group that does not complete, nor a
// group's bound count go down.
func TestTwentyGangsRaceForTen(t *testing.T) {
	w := newWorld(t)
	for i := 0; i < 10; i++ {
		w.addNode(fmt.Sprintf("cpu-%d", i), 0, "3") // 3 pods of 1 CPU each
	}
	watcher, err := w.kube.CoreV1().Pods(w.ns).Watch(w.ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var mu sync.Mutex
	bound := map[string]map[string]bool{} // group -> pods seen bound
	var regressions []string
	go func() {
		for ev := range watcher.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			g := p.Labels[labelGroup]
			mu.Lock()
			if bound[g] == nil {
				bound[g] = map[string]bool{}
			}
			if p.Spec.NodeName != "" {
				bound[g][p.Name] = true
			} else if bound[g][p.Name] {
				regressions = append(regressions, p.Name)
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(watcher.Stop)

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
	w.consistently("10 gangs stay fully bound and 10 bind nothing", quiet, func() bool {
		full, empty, partial := count()
		return full == 10 && empty == 10 && partial == 0
	})

	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, regressions, "a bound pod was seen unbound")
	for g, pods := range bound {
		if n := len(pods); n != 0 && n != 3 {
			t.Errorf("the watch saw %d pods of group %s bound; a group binds 0 or 3", n, g)
		}
	}
}

// Pods of the default scheduler on the same nodes count: a gang never overcommits a node,
// and berth-scheduler never touches a pod that names another scheduler.
func TestDefaultSchedulerPodsAreRespected(t *testing.T) {
	w := newWorld(t)
	w.startScheduler(5, 1)
	w.addNode("gpu-a", 8, "64")
	node := w.ns + "-gpu-a"

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
	w.consistently("the gang does not overcommit the node", quiet, func() bool { n, _ := w.bound("llm-0"); return n == 0 })

	w.addNode("gpu-b", 8, "64")
	w.eventually("the gang binds on the new node", 20*time.Second, func() bool { n, _ := w.bound("llm-0"); return n == 1 })
	p, err := w.kube.CoreV1().Pods(w.ns).Get(w.ctx, "llm-0-server-0-0", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, w.ns+"-gpu-b", p.Spec.NodeName)
	p, err = w.kube.CoreV1().Pods(w.ns).Get(w.ctx, "notebook", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, p.Spec.NodeName, "berth-scheduler bound a pod of the default scheduler")
}

// The scheduler restarted while a gang waits in Permit: nothing of the gang was bound, and
// after the restart the gang completes whole.
func TestSchedulerRestartWhileGangWaitsInPermit(t *testing.T) {
	w := newWorld(t)
	stop := w.startScheduler(120, 1)
	for i := 0; i < 3; i++ {
		w.addNode(fmt.Sprintf("gpu-%d", i), 8, "64")
	}
	// The third pod exists but is gated, so the first two are placed and held in Permit.
	w.gated = map[string]bool{"held-server-2-0": true}
	w.createGang("held", nil, role{name: "server", replicas: 3, gpus: 8})

	// Held pods are visible as the scheduler's waiting pods only; give it time to hold them.
	w.consistently("nothing binds while the gang is incomplete", quiet, func() bool { n, _ := w.bound("held"); return n == 0 })
	stop()
	n, _ := w.bound("held")
	require.Zero(t, n, "a held pod was bound when the scheduler stopped")

	w.startScheduler(120, 1)
	w.consistently("nothing binds after the restart while the gang is incomplete", quiet, func() bool { n, _ := w.bound("held"); return n == 0 })
	gated, err := w.kube.CoreV1().Pods(w.ns).Get(w.ctx, "held-server-2-0", metav1.GetOptions{})
	require.NoError(t, err)
	gated.Spec.SchedulingGates = nil
	_, err = w.kube.CoreV1().Pods(w.ns).Update(w.ctx, gated, metav1.UpdateOptions{})
	require.NoError(t, err)
	w.eventually("the gang completes whole after the restart", 30*time.Second, func() bool { n, _ := w.bound("held"); return n == 3 })
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

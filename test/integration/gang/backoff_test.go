package gang

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// A gang released at its wait timeout backs off, and is tried again when the backoff ends
// on its own: no node, pod or PodGroup change is needed to wake it. The gang's last pod
// arrives while it backs off; the attempt that pod starts is turned away ("backing off"),
// and nothing changes in the cluster afterwards, so the gang binds whole only if the end of
// the backoff brings it back. (TestWaitTimeoutReleasesHeldCapacity shows what it held is
// free for others meanwhile.)
func TestReleasedGangIsRetriedWhenItsBackoffEnds(t *testing.T) {
	w := newWorld(t)
	// Hold for 2s; back off for 10s, long enough that the test acts well inside the backoff
	// even on a loaded machine; how long the backoff lasted is checked with a wide margin.
	w.startScheduler(2, 10)
	for i := 0; i < 3; i++ {
		w.addNode(fmt.Sprintf("gpu-%d", i), 8, "64")
	}
	// The third pod is gated: the first two are placed and held in Permit until the wait
	// timeout releases them.
	const last = "late-server-2-0"
	w.gated = map[string]bool{last: true}
	w.createGang("late", nil, role{name: "server", replicas: 3, gpus: 8})

	w.eventually("the PodGroup reports the wait timeout", 20*time.Second, func() bool {
		return unschedulableReason(w.podGroup("late")) == "WaitTimeout"
	})
	n, _ := w.bound("late")
	require.Zero(t, n, "a pod of an incomplete gang was bound")
	// The backoff began when the gang was released: at the condition's transition (written a
	// moment after, at one-second resolution).
	var released time.Time
	for _, c := range w.podGroup("late").Status.Conditions {
		if c.Type == volcanov1beta1.PodGroupUnschedulableType && c.Status == corev1.ConditionTrue {
			released = c.LastTransitionTime.Time
		}
	}
	require.False(t, released.IsZero(), "the WaitTimeout condition has no transition time")

	// The gang is complete now, but backing off: the pod's own attempt is refused.
	ungate(w, last)
	w.eventually("the last pod's attempt is refused while the gang backs off", 20*time.Second, func() bool {
		return strings.Contains(scheduledMessage(w, last), "is backing off")
	})
	n, _ = w.bound("late")
	require.Zero(t, n, "the gang bound during its backoff")

	// Nothing else happens in the cluster: the end of the backoff alone retries the gang.
	w.eventually("the gang binds whole once its backoff ends", 60*time.Second, func() bool { n, _ := w.bound("late"); return n == 3 })
	// And not before it ends, nor long after: the 10 s backoff, less 2 s for the status
	// write and the timestamp's resolution; at most 15 s late on a loaded machine.
	lasted := time.Since(released)
	t.Logf("the gang bound %s after its release (backoff 10s)", lasted.Round(10*time.Millisecond))
	require.GreaterOrEqual(t, lasted, 8*time.Second, "the gang bound before its 10s backoff ended")
	require.LessOrEqual(t, lasted, 25*time.Second, "the gang bound long after its 10s backoff ended")
	w.eventually("the PodGroup reports Running with no refusal", 15*time.Second, func() bool {
		pg := w.podGroup("late")
		return pg.Status.Phase == volcanov1beta1.PodGroupRunning && unschedulableMessage(pg) == ""
	})
}

// unschedulableReason is the reason of the PodGroup's Unschedulable condition while it is
// True: what `kubectl describe podgroup` shows for a pending gang.
func unschedulableReason(pg *volcanov1beta1.PodGroup) string {
	for _, c := range pg.Status.Conditions {
		if c.Type == volcanov1beta1.PodGroupUnschedulableType && c.Status == corev1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

// ungate removes a pod's scheduling gates, as the controller that set them would.
func ungate(w *world, name string) {
	w.t.Helper()
	p, err := w.kube.CoreV1().Pods(w.ns).Get(w.ctx, name, metav1.GetOptions{})
	require.NoError(w.t, err)
	p.Spec.SchedulingGates = nil
	_, err = w.kube.CoreV1().Pods(w.ns).Update(w.ctx, p, metav1.UpdateOptions{})
	require.NoError(w.t, err)
}

// scheduledMessage is the message of a pod's PodScheduled condition: why the scheduler
// last refused it.
func scheduledMessage(w *world, name string) string {
	p, err := w.kube.CoreV1().Pods(w.ns).Get(w.ctx, name, metav1.GetOptions{})
	require.NoError(w.t, err)
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Message
		}
	}
	return ""
}

// A refused gang is retried, when each backoff ends and when capacity is freed, through one
// pod, not all of them: on a slow scheduler (thousands of nodes, or this suite under the race
// detector) a few large refused groups retried pod by pod filled every scheduling cycle, and
// younger groups that fit were never tried. Here an 8-pod gang that cannot fit backs off
// every 2 s while pods come and go beside it; the scheduler's attempts over that time are
// about one per backoff, a group that fits is placed meanwhile, and once capacity arrives
// the refused gang's siblings follow its probe and the whole gang binds.
func TestRefusedGangIsRetriedThroughOnePod(t *testing.T) {
	w := newWorld(t)
	w.startScheduler(30, 2)
	for i := 0; i < 2; i++ {
		w.addNode(fmt.Sprintf("gpu-%d", i), 8, "64")
	}
	w.createGang("big", nil, role{name: "server", replicas: 8, gpus: 8})
	w.eventually("the 8-node gang is refused", 30*time.Second, func() bool {
		return unschedulableReason(w.podGroup("big")) == "NotEnoughResources"
	})

	const window = 8 * time.Second
	before := scheduleAttempts("unschedulable")
	start := time.Now()
	// Pods come and go beside the refused gang: each deletion is freed capacity, an event
	// that retried every refused pod before.
	for i := 0; time.Since(start) < window; i++ {
		name := fmt.Sprintf("small-%d", i)
		w.createGang(name, nil, role{name: "server", replicas: 1, gpus: 8})
		w.eventually("a gang that fits ("+name+") binds beside the refused one", 20*time.Second, func() bool {
			n, _ := w.bound(name)
			return n == 1
		})
		w.deleteGroupPods(name)
	}
	elapsed := time.Since(start)
	attempts := scheduleAttempts("unschedulable") - before
	// One probe per 2 s backoff, and a few for the probe's own retries on freed capacity;
	// pod by pod it was 8 per backoff and 8 per deletion.
	bound := 2*elapsed.Seconds()/2 + 6
	t.Logf("refused attempts in %s: %g (bound %.0f)", elapsed.Round(time.Millisecond), attempts, bound)
	require.LessOrEqual(t, attempts, bound, "the refused gang was retried pod by pod:%s", schedulerQueueSummary())

	for i := 2; i < 8; i++ {
		w.addNode(fmt.Sprintf("gpu-%d", i), 8, "64")
	}
	w.eventually("the refused gang binds whole once it fits: its siblings follow the probe", 60*time.Second, func() bool {
		n, _ := w.bound("big")
		return n == 8
	})
}

// scheduleAttempts is kube-scheduler's count of scheduling attempts with the result, over
// every profile.
func scheduleAttempts(result string) float64 {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range families {
		if mf.GetName() != "scheduler_schedule_attempts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

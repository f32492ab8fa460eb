package gang

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/pkg/plugins/placement"
)

// Reserve remembers the pod as held by its group until it is seen bound or released; its
// plan stops keeping room for it, since the scheduler's cache now counts it.
func (g *Gang) Reserve(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	key := placement.GroupKey(pod)
	if key == "" {
		return nil
	}
	g.model.Reserve(pod, nodeName)
	return nil
}

// PostBind checks that kube-scheduler's DynamicResources plugin allocated the pod's claims
// the devices its group's plan chose: the plan is only right if the two agree. A
// disagreement is a Warning event on the pod and counts in
// berth_placement_dra_allocation_checks_total{result="disagree"}.
func (g *Gang) PostBind(ctx context.Context, _ fwk.CycleState, pod *corev1.Pod, nodeName string) {
	checked, agree, msg := g.model.CheckAllocation(pod)
	if checked && !agree {
		klog.FromContext(ctx).Info("DRA allocation differs from the group's plan", "pod", klog.KObj(pod), "node", nodeName, "detail", msg)
		g.handle.EventRecorder().Eventf(pod, nil, corev1.EventTypeWarning, reasonAllocationDiffers, "Scheduling", "DRA allocation differs from the group's plan: %s", msg)
	}
}

// Unreserve runs when a held pod is rejected (timeout, a sibling's failure) or fails to
// bind. A group that has not reached its minimum releases every sibling with it.
func (g *Gang) Unreserve(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ string) {
	key := placement.GroupKey(pod)
	if key == "" {
		return
	}
	g.model.Unreserve(pod)
	// Read only: a pod released because it was deleted must not bring back the state of a
	// group that is gone.
	g.mu.Lock()
	st := g.states[key]
	timedOut := st != nil && !st.deadline.IsZero() && !time.Now().Before(st.deadline)
	released := st != nil && st.released
	g.mu.Unlock()
	if released {
		return
	}

	pg, req, err := g.podGroup(pod)
	if err != nil || req.Check(g.placedPods(key, nil)).OK {
		return
	}
	if timedOut {
		g.rejectGroup(pg, key, reasonTimeout, fmt.Sprintf("the group's minimum was not placed within %s", g.args.waitTimeout(pg)))
		return
	}
	g.rejectGroup(pg, key, reasonNotEnoughResources, fmt.Sprintf("pod %s was released", pod.Name))
}

// Permit holds the pod until the group's minimum is placed, then lets every held sibling
// go. A pod holding a ResourceClaim a sibling not yet placed names too waits in PreBind
// instead (see sharedclaim.go).
func (g *Gang) Permit(_ context.Context, state fwk.CycleState, pod *corev1.Pod, _ string) (*fwk.Status, time.Duration) {
	key := placement.GroupKey(pod)
	if key == "" {
		return nil, 0
	}
	pg, req, err := g.podGroup(pod)
	if err != nil {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("PodGroup %s: %v", key, err)), 0
	}
	if v := req.Check(g.placedPods(key, pod)); v.OK {
		g.allowGroup(pg, key)
		return nil, 0
	}
	now := time.Now()
	timeout := g.args.waitTimeout(pg)
	g.mu.Lock()
	st := g.stateLocked(key)
	if st.deadline.IsZero() || now.After(st.deadline) {
		st.deadline = now.Add(timeout)
		st.released = false
		d := st.deadline
		time.AfterFunc(timeout, func() { g.assemblyTimedOut(pod, key, d) })
	}
	deadline := st.deadline
	g.mu.Unlock()
	if claims := g.sharedClaimsAhead(key, pod); len(claims) > 0 {
		g.permitEarly(state, pod, key, claims, deadline)
		return nil, 0
	}
	// The framework's own timer is a backstop: assemblyTimedOut rejects the group first.
	wait := deadline.Sub(now) + permitTimerSlack
	return fwk.NewStatus(fwk.Wait, fmt.Sprintf("waiting for gang %s", key)), wait
}

// permitTimerSlack is how long after the group's deadline the framework's own Permit timer
// would reject a held pod, had assemblyTimedOut not released it.
const permitTimerSlack = 5 * time.Second

// assemblyTimedOut rejects the group whose assembly began with deadline d, if that
// assembly is still under way (neither allowed nor rejected since) and short of its
// minimum.
func (g *Gang) assemblyTimedOut(pod *corev1.Pod, key string, d time.Time) {
	g.mu.Lock()
	st := g.states[key]
	current := st != nil && st.deadline.Equal(d)
	g.mu.Unlock()
	if !current {
		return
	}
	pg, req, err := g.podGroup(pod)
	if err != nil || req.Check(g.placedPods(key, nil)).OK {
		return
	}
	g.rejectGroup(pg, key, reasonTimeout, fmt.Sprintf("the group's minimum was not placed within %s", g.args.waitTimeout(pg)))
}

// allowGroup releases every held sibling to bind.
func (g *Gang) allowGroup(pg *volcanov1beta1.PodGroup, key string) {
	g.mu.Lock()
	st := g.stateLocked(key)
	st.deadline = time.Time{}
	st.endEarlyLocked(true, "")
	st.released = false
	g.mu.Unlock()
	g.releaseMu.Lock()
	g.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if placement.GroupKey(wp.GetPod()) == key {
			wp.Allow(Name)
		}
	})
	g.releaseMu.Unlock()
	g.status.scheduled(pg)
	gangsScheduled.Inc()
	// Pods beyond the minimum waited for this moment; they go now.
	g.activate(key)
}

// rejectGroup releases every held sibling, drops the group's plan, starts the backoff and
// records why.
func (g *Gang) rejectGroup(pg *volcanov1beta1.PodGroup, key, reason, msg string) {
	backoff := g.args.backoff()
	g.model.Drop(key)
	g.mu.Lock()
	st := g.stateLocked(key)
	st.deadline = time.Time{}
	st.endEarlyLocked(false, msg)
	st.released = true
	alreadyBackingOff := time.Now().Before(st.backoffUntil)
	if !alreadyBackingOff {
		st.backoffUntil = time.Now().Add(backoff)
	}
	g.mu.Unlock()
	g.releaseMu.Lock()
	g.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if placement.GroupKey(wp.GetPod()) == key {
			wp.Reject(Name, fmt.Sprintf("gang %s released: %s", key, msg))
		}
	})
	g.releaseMu.Unlock()
	if alreadyBackingOff {
		return
	}
	gangsRejected.WithLabelValues(reason).Inc()
	g.status.unschedulable(pg, reason, msg)
	if backoff > 0 {
		time.AfterFunc(backoff, func() { g.activateProbe(key) })
	}
}

// activateProbe retries a refused group whose backoff has ended through one pod, the one
// its queue order would try first; PreFilter lets the siblings follow once that pod gets a
// plan (releaseProbe).
func (g *Gang) activateProbe(key string) {
	_, pending := g.model.Split(key, g.groupPods(key))
	if len(pending) == 0 {
		return
	}
	first := pending[0]
	for _, p := range pending[1:] {
		if placement.QueueLess(p, first) {
			first = p
		}
	}
	g.mu.Lock()
	st := g.states[key]
	if st == nil {
		g.mu.Unlock()
		return
	}
	st.probe = first.UID
	g.mu.Unlock()
	g.handle.Activate(klog.Background(), map[string]*corev1.Pod{first.Namespace + "/" + first.Name: first})
}

// releaseProbe ends a group's probing once its pod has a plan: the group's other pending
// pods are put back in the queue to follow it. It reports whether the group was probing.
func (g *Gang) releaseProbe(key string, pod *corev1.Pod) bool {
	g.mu.Lock()
	st := g.states[key]
	probing := st != nil && st.probe != ""
	if probing {
		st.probe = ""
	}
	g.mu.Unlock()
	if !probing {
		return false
	}
	_, pending := g.model.Split(key, g.groupPods(key))
	pods := make(map[string]*corev1.Pod, len(pending))
	for _, p := range pending {
		if p.UID != pod.UID {
			pods[p.Namespace+"/"+p.Name] = p
		}
	}
	if len(pods) > 0 {
		g.handle.Activate(klog.Background(), pods)
	}
	return true
}

// probeGone picks another probe when the deleted pod was its group's: without one, the
// siblings would wait for the scheduler's periodic flush. A group still backing off gets
// its probe when the backoff ends.
func (g *Gang) probeGone(pod *corev1.Pod) {
	key := placement.GroupKey(pod)
	if key == "" {
		return
	}
	g.mu.Lock()
	st := g.states[key]
	was := st != nil && st.probe == pod.UID
	backingOff := was && time.Now().Before(st.backoffUntil)
	if was {
		st.probe = ""
	}
	g.mu.Unlock()
	if was && !backingOff {
		g.activateProbe(key)
	}
}

// mayRetry is the queueing hint for freed or added capacity: a pod of a group that is
// backing off is not retried (the backoff's end retries it), nor is a sibling of a group's
// probe (it follows the probe's plan).
func (g *Gang) mayRetry(_ klog.Logger, pod *corev1.Pod, _, _ any) (fwk.QueueingHint, error) {
	key := placement.GroupKey(pod)
	if key == "" {
		return fwk.Queue, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.states[key]
	switch {
	case st == nil:
		return fwk.Queue, nil
	case time.Now().Before(st.backoffUntil):
		return fwk.QueueSkip, nil
	case st.probe != "" && st.probe != pod.UID:
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// activateIfComplete re-queues a group's held-back pods once the pod just added makes the
// group large enough to meet its minimum.
func (g *Gang) activateIfComplete(pod *corev1.Pod) {
	key := placement.GroupKey(pod)
	if key == "" {
		return
	}
	_, req, err := g.podGroup(pod)
	if err != nil {
		return
	}
	if req.Enough(g.groupPods(key)).OK {
		g.activate(key)
	}
}

// activate puts the group's pending pods back in the active queue; pods held in Permit
// are in flight, not in a queue, and are left alone.
func (g *Gang) activate(key string) {
	_, pending := g.model.Split(key, g.groupPods(key))
	pods := make(map[string]*corev1.Pod, len(pending))
	for _, p := range pending {
		pods[p.Namespace+"/"+p.Name] = p
	}
	if len(pods) > 0 {
		g.handle.Activate(klog.Background(), pods)
	}
}

package gang

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/berth-sh/berth/pkg/plugins/placement"
)

// A ResourceClaim shared by several pods of one group (resourceClaimName, not a template)
// cannot be assembled in Permit. kube-scheduler's DynamicResources plugin keeps the
// claim's allocation in memory from the first pod's Reserve until that pod's PreBind
// writes it, and refuses every other pod that names the claim meanwhile ("in the process
// of being allocated"). The first pod waits in Permit for its siblings, so they never
// come: the group times out. Upstream shares such pending allocations only inside the
// GenericWorkload pod-group cycle (kubernetes/kubernetes#137932), which Volcano and
// scheduler-plugins PodGroups do not use.
//
// So the pod that reserves a shared claim while a sibling naming it is not yet placed is
// let through Permit ahead of its group: DynamicResources' PreBind writes the claim's
// allocation, and then the pod waits in this plugin's PreBind, which runs after it, until
// the group is allowed (it binds with its siblings) or rejected (it is unreserved like a
// pod held in Permit, and DynamicResources takes it off the claim). What reaches the API
// early is the claim's allocation, never a binding: the group still binds all or nothing.

// earlyRelease is one assembly's pods let through Permit ahead of their group.
type earlyRelease struct {
	done    chan struct{} // closed when the group is allowed or rejected
	allowed bool
	msg     string          // why it was rejected
	claims  map[string]bool // namespace/name of the shared claims the early pods hold
	pods    int
}

// earlyStateKey is the CycleState key Permit leaves for PreBind.
const earlyStateKey fwk.StateKey = Name + "/early"

type earlyState struct {
	key      string
	release  *earlyRelease
	deadline time.Time
}

func (s *earlyState) Clone() fwk.StateData { return s }

// sharedClaimsAhead lists the pod's claims (by name) that a sibling of its group names too
// while that sibling is not yet placed: the claims it would block if it waited in Permit.
func (g *Gang) sharedClaimsAhead(key string, pod *corev1.Pod) []string {
	mine := map[string]bool{}
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil {
			mine[*rc.ResourceClaimName] = true
		}
	}
	if len(mine) == 0 {
		return nil
	}
	_, pending := g.model.Split(key, g.groupPods(key))
	shared := map[string]bool{}
	for _, p := range pending {
		if p.UID == pod.UID || p.Spec.NodeName != "" {
			continue
		}
		for _, rc := range p.Spec.ResourceClaims {
			if rc.ResourceClaimName != nil && mine[*rc.ResourceClaimName] {
				shared[pod.Namespace+"/"+*rc.ResourceClaimName] = true
			}
		}
	}
	return placement.SortedKeys(shared)
}

// permitEarly lets the pod through Permit ahead of its group, to wait in PreBind.
func (g *Gang) permitEarly(state fwk.CycleState, pod *corev1.Pod, key string, claims []string, deadline time.Time) {
	g.mu.Lock()
	st := g.stateLocked(key)
	if st.early == nil {
		st.early = &earlyRelease{done: make(chan struct{}), claims: map[string]bool{}}
	}
	e := st.early
	for _, c := range claims {
		e.claims[c] = true
	}
	e.pods++
	g.mu.Unlock()
	state.Write(earlyStateKey, &earlyState{key: key, release: e, deadline: deadline})
	earlyReleases.Inc()
}

// endEarly tells the group's pods waiting in PreBind how the assembly ended. Called with
// g.mu held.
func (st *groupState) endEarlyLocked(allowed bool, msg string) {
	if st.early == nil {
		return
	}
	st.early.allowed, st.early.msg = allowed, msg
	close(st.early.done)
	st.early = nil
}

// claimAhead names the claim of pod that a sibling let through ahead is having allocated,
// or "" if none: the pod's refusal by DynamicResources is then expected and short, and no
// reason to release the group.
func (g *Gang) claimAhead(key string, pod *corev1.Pod) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.states[key]
	if st == nil || st.early == nil {
		return ""
	}
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil && st.early.claims[pod.Namespace+"/"+*rc.ResourceClaimName] {
			return *rc.ResourceClaimName
		}
	}
	return ""
}

// earlyPods counts the pods waiting in PreBind for their group.
func (g *Gang) earlyPods() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, st := range g.states {
		if st.early != nil {
			n += st.early.pods
		}
	}
	return n
}

// PreBindPreFlight: only pods let through Permit ahead of their group have anything to
// wait for here.
func (g *Gang) PreBindPreFlight(_ context.Context, state fwk.CycleState, _ *corev1.Pod, _ string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	if _, err := state.Read(earlyStateKey); err != nil {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	return &fwk.PreBindPreFlightResult{AllowParallel: false}, nil
}

// PreBind holds a pod let through Permit ahead of its group until the group is allowed.
// It runs after DynamicResources' PreBind (multiPoint plugins follow the defaults), so the
// shared claim's allocation is written by now: the siblings that name it can be tried.
func (g *Gang) PreBind(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ string) *fwk.Status {
	data, err := state.Read(earlyStateKey)
	if err != nil {
		return nil
	}
	s := data.(*earlyState)
	g.activate(s.key)
	timer := time.NewTimer(time.Until(s.deadline))
	defer timer.Stop()
	select {
	case <-s.release.done:
	case <-timer.C:
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s: the group's minimum was not placed in time (pod %s waited in PreBind, its shared claim allocated ahead)", s.key, pod.Name))
	case <-ctx.Done():
		return fwk.AsStatus(ctx.Err())
	}
	// endEarlyLocked wrote the verdict before closing done: reading it needs no lock.
	if !s.release.allowed {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s released: %s", s.key, s.release.msg))
	}
	klog.FromContext(ctx).V(4).Info("Pod let through ahead of its gang binds with it", "pod", klog.KObj(pod), "group", s.key)
	return nil
}

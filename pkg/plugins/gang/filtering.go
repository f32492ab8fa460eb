package gang

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/berth-sh/berth/pkg/plugins/placement"
)

// preFilterStateKey carries the pod's planned node from PreFilter to PostFilter.
const preFilterStateKey fwk.StateKey = "PreFilter" + Name

type preFilterState struct {
	key     string // the pod's group, "" for a pod without one
	planned string // the node the group's plan chose for the pod, "" for the full pass
	req     placement.Resources
	// refused: PreFilter itself refused the pod and already did what the refusal needs;
	// PostFilter must not release the group for it.
	refused bool
	// unplanned: PreFilter found no plan for the group, for this reason. PostFilter tries
	// preemption and, when that does not help, releases the group with the reason.
	unplanned string
	// devices checks the pod's DRA claims against devices other groups' plans keep (nil:
	// the pod has no claims, or no plan keeps anything).
	devices *placement.DeviceCheck
}

// Clone returns the state itself: it is never modified after PreFilter.
func (s *preFilterState) Clone() fwk.StateData { return s }

func readPreFilterState(state fwk.CycleState) (*preFilterState, error) {
	data, err := state.Read(preFilterStateKey)
	if err != nil {
		return nil, fmt.Errorf("reading %q from cycle state: %w", preFilterStateKey, err)
	}
	s, ok := data.(*preFilterState)
	if !ok {
		return nil, fmt.Errorf("%q has type %T", preFilterStateKey, data)
	}
	return s, nil
}

// PreFilter plans the pod's group before it holds anything and sends the pod to its planned
// node: a group whose minimum has no plan is refused at once, with the reason, and holds
// nothing. Pods without a group pass, but when plans keep capacity anywhere Filter keeps
// them off it.
func (g *Gang) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	r, st := g.preFilter(ctx, state, pod, nodes)
	if st.Code() == fwk.Unschedulable && placement.GroupKey(pod) != "" {
		state.Write(placement.GroupRefusedKey, placement.GroupRefused{})
	}
	return r, st
}

func (g *Gang) preFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	key := placement.GroupKey(pod)
	if key == "" {
		if !g.model.Keeping() {
			return nil, fwk.NewStatus(fwk.Skip)
		}
		state.Write(preFilterStateKey, &preFilterState{req: placement.PodRequests(pod), devices: g.model.DeviceCheck(pod)})
		return nil, nil
	}
	logger := klog.FromContext(ctx).WithValues("ExtensionPoint", "PreFilter", "plugin", Name, "group", key)
	state.Write(preFilterStateKey, &preFilterState{key: key, refused: true})
	pg, req, err := g.podGroup(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("PodGroup %s: %v", key, err))
	}
	now := time.Now()
	g.mu.Lock()
	backoff := g.stateLocked(key).backoffUntil
	g.mu.Unlock()
	if now.Before(backoff) {
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s is backing off for %s after it could not be placed", key, backoff.Sub(now).Round(time.Millisecond)))
	}
	out, err := g.model.PlanFor(pod, pg, req, g.args.waitTimeout(pg))
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	if out.Stale {
		fastPath.WithLabelValues("stale").Inc()
	}
	if out.Waiting {
		// A preemption made room; its victims are still leaving.
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s: %s", key, out.Refusal))
	}
	if out.Plan == nil {
		logger.V(4).Info("Group has no plan", "reason", out.Refusal)
		state.Write(preFilterStateKey, &preFilterState{key: key, refused: true, unplanned: out.Refusal})
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s cannot be placed: %s", key, out.Refusal))
	}
	if pg.Spec.MinResources != nil && out.NewAttempt {
		// Volcano's pre-check, once per attempt (not per pod): the declared minimum must
		// fit the cluster's free total, even when the pods ask for less.
		if msg := checkMinResources(*pg.Spec.MinResources, g.model.Pool(key)); msg != "" {
			g.rejectGroup(pg, key, reasonNotEnoughResources, msg)
			return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s cannot be placed: %s", key, msg))
		}
	}
	if g.releaseProbe(key, pod) {
		logger.V(4).Info("Refused group planned again: its other pods follow", "pod", pod.Name)
	}
	node := out.Node(pod)
	if node == "" && !out.MinPlaced {
		// A pod beyond the minimum waits until the minimum is placed: held now, it would
		// take capacity the plan did not give it and could leave a replica half held.
		// Releasing the group puts it back in the queue.
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s: pod %s is beyond the group's minimum; it waits until the minimum is placed", key, pod.Name))
	}
	s := &preFilterState{key: key, req: placement.PodRequests(pod)}
	if g.model.Keeping() {
		s.devices = g.model.DeviceCheck(pod)
	}
	state.Write(preFilterStateKey, s)
	if node != "" && placement.Narrowable(pod) {
		// The fast path: the plan has already judged every node for this pod.
		s.planned = node
		fastPath.WithLabelValues("hit").Inc()
		return &fwk.PreFilterResult{NodeNames: sets.New(node)}, nil
	}
	return nil, nil
}

// PreFilterExtensions is not needed: the plugin does not track per-node state in a cycle.
func (g *Gang) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter keeps a pod off capacity that other groups' plans keep: the free capacity less
// what they keep must hold it. A pod sent down the fast path goes to its planned node
// only: kube-scheduler tries a pod's nominated node (left in its status by an earlier
// attempt that waited in Permit) through Filter alone, before PreFilter's node list, and
// the plan, not an old attempt, says where the group's pods go.
func (g *Gang) Filter(_ context.Context, state fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	s, err := readPreFilterState(state)
	if err != nil {
		return fwk.AsStatus(err)
	}
	node := ni.Node()
	if s.planned != "" && node.Name != s.planned {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("the group's plan puts the pod on node %s", s.planned))
	}
	kept := g.model.KeptOn(node.Name, s.key)
	if kept == nil {
		return nil
	}
	free := placement.FreeOf(ni)
	for name, v := range s.req {
		if v > 0 && kept[name] > 0 && free[name]-kept[name] < v {
			return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("%s on this node is kept for a planned group", name))
		}
	}
	if s.devices != nil && !s.devices.FitsAround(node, kept) {
		return fwk.NewStatus(fwk.Unschedulable, "the DRA devices the pod's claims could use on this node are kept for a planned group")
	}
	return nil
}

// PostFilter runs when a pod fits no node it was allowed. A group PreFilter found no plan
// for first tries preemption: evicting whole lower-priority groups (see preempt); when
// that does not help it is released with the reason. A pod sent to its planned node
// found the plan stale: the plan is dropped and the pod retried at once, when the group is
// planned again around what it holds. Otherwise, unless the group's minimum is already
// bound, the pods it holds in Permit can never be joined by this one: release them now
// rather than at the timeout, so the capacity goes to a group that can complete.
func (g *Gang) PostFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	key := placement.GroupKey(pod)
	if key == "" {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	pg, req, err := g.podGroup(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	if req.Check(g.placedPods(key, nil)).OK {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	s, err := readPreFilterState(state)
	if err == nil && s.unplanned != "" {
		preempting, why := g.preempt(ctx, pod, pg, req, key)
		if preempting {
			return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s: %s", key, why))
		}
		msg := s.unplanned
		if why != "" {
			msg += "; " + why
		}
		g.rejectGroup(pg, key, reasonNotEnoughResources, msg)
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s cannot be placed: %s", key, msg))
	}
	if err == nil && s.refused {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	if err == nil && s.planned != "" {
		if n := g.victimsLeaving(key); n > 0 {
			// A preemptor sent to the node its victims are leaving: their pods (or, with
			// DRA, their claims' devices) are still there. The plan stands; the group is
			// tried again as each victim leaves.
			return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s: planned node %s has room once %d pods preempted for it have left (with their devices)", key, s.planned, n))
		}
		fastPath.WithLabelValues("stale").Inc()
		back := g.model.Exclude(key, s.planned)
		g.model.Drop(key)
		time.AfterFunc(100*time.Millisecond, func() { g.activate(key) })
		// No cluster event says the node is back in the group's plans: a group that could
		// not be planned without it would wait beside its free capacity for the queue's
		// periodic flush (minutes), so it is tried again when the exclusion ends.
		time.AfterFunc(time.Until(back)+50*time.Millisecond, func() { g.activate(key) })
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s: planned node %s no longer takes pod %s; planning again", key, s.planned, pod.Name))
	}
	if c := g.claimAhead(key, pod); c != "" {
		// DynamicResources refuses the pod while a sibling let through ahead has the claim
		// they share allocated; that sibling's PreBind tries the group again once it is.
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s: claim %s, shared with a sibling let through ahead, is being allocated", key, c))
	}
	msg := fmt.Sprintf("pod %s fits no node", pod.Name)
	if m := refusal(g.handle, statuses); m != "" {
		// A PreFilter refusal (for example the topology plugin's "no leaf can hold the
		// group") applies to every node and says more than "fits no node".
		msg = m
	}
	g.rejectGroup(pg, key, reasonNotEnoughResources, msg)
	return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s released: %s", key, msg))
}

// refusal returns the message a PreFilter plugin refused the pod with, read off any node's
// status (a PreFilter refusal is recorded for all of them), or "" when nodes were refused
// one by one in Filter.
func refusal(handle fwk.Handle, statuses fwk.NodeToStatusReader) string {
	infos, err := handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil || len(infos) == 0 || infos[0].Node() == nil {
		return ""
	}
	st := statuses.Get(infos[0].Node().Name)
	if st == nil || st.Plugin() == "" || st.Plugin() == Name {
		return ""
	}
	if len(infos) > 1 && infos[1].Node() != nil {
		// Filter refusals differ per node; a PreFilter refusal is the same for all.
		if other := statuses.Get(infos[1].Node().Name); other == nil || other.Message() != st.Message() {
			return ""
		}
	}
	return st.Message()
}

// checkMinResources is Volcano's minResources pre-check: the free capacity, summed over
// nodes, must cover what the PodGroup says its minimum needs. It catches a PodGroup whose
// declared minimum is larger than its pods ask for. It returns "" when it fits.
func checkMinResources(minResources corev1.ResourceList, pool *placement.Pool) string {
	if len(minResources) == 0 {
		return ""
	}
	free := placement.Resources{}
	for _, n := range pool.Nodes() {
		for name, v := range pool.Free(n) {
			if v > 0 {
				free[name] += v
			}
		}
	}
	names := make(map[string]bool, len(minResources))
	for name := range minResources {
		names[string(name)] = true
	}
	for _, name := range placement.SortedKeys(names) {
		rn := corev1.ResourceName(name)
		want := placement.QuantityValue(rn, minResources[rn])
		if free[rn] < want {
			return fmt.Sprintf("the group's minResources ask for %s %s, %s free in the cluster",
				placement.FormatAmount(rn, want), rn, placement.FormatAmount(rn, free[rn]))
		}
	}
	return ""
}

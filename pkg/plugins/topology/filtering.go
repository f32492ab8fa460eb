package topology

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/plugins/placement"
)

// stateKey is where PreFilter leaves the pod's cycleState.
const stateKey fwk.StateKey = "PreFilter" + Name

// cycleState carries the pod's target from PreFilter to Score.
type cycleState struct {
	fabric *fabric.Fabric
	target *placement.Target // the pod's subgroup's domain, else its group's
	domain *placement.Target // the group's domain; nil: anywhere
	anchor string            // a node of the target, to find the target's domains at higher tiers
	key    string            // the group
}

// Clone returns the state itself: it is never modified after PreFilter.
func (c *cycleState) Clone() fwk.StateData { return c }

func readCycleState(state fwk.CycleState) (*cycleState, error) {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil, fmt.Errorf("reading %q from cycle state: %w", stateKey, err)
	}
	s, ok := data.(*cycleState)
	if !ok {
		return nil, fmt.Errorf("%q has type %T", stateKey, data)
	}
	return s, nil
}

// PreFilter confines the pod to its group's domain, which the placement model chose for
// the whole group (through ChooseDomain) when it planned the group, or to its role
// replica's domain inside it; Filter holds it there.
func (t *Topology) PreFilter(_ context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	key := placement.GroupKey(pod)
	if key == "" || placement.Refused(state) {
		// The gang plugin has refused the group in this cycle, with the reason.
		return nil, fwk.NewStatus(fwk.Skip)
	}
	pg, err := t.podGroups.Get(pod)
	if err != nil || asksForNothing(pod, pg) {
		return nil, fwk.NewStatus(fwk.Skip) // the gang plugin explains a missing PodGroup
	}
	req, err := placement.NewRequirement(pg)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	// The gang plugin planned the group earlier in this cycle; this returns that plan, and
	// plans only when the profile has no gang plugin.
	out, err := t.model.PlanFor(pod, pg, req, defaultPlanTTL)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	if out.Plan == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s: %s", key, out.Refusal))
	}
	tgt, why := targetOf(pod, pg, req, out.Plan)
	if why != "" {
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s: %s", key, why))
	}
	if tgt == nil {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	f, err := t.currentFabric()
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	cs := &cycleState{fabric: f, target: tgt, domain: out.Plan.Domain, key: key}
	if len(tgt.List) > 0 {
		cs.anchor = tgt.List[0]
	}
	state.Write(stateKey, cs)
	// Hard constraints confine the pod to its target. Soft ones steer it there the same way
	// while the plan says the group fits: kube-scheduler scores only a sample of the nodes
	// in a large cluster, and a preference the sample misses is no preference. If the pod
	// still fails there, PostFilter gives the domain up and the next attempt looks elsewhere.
	return &fwk.PreFilterResult{NodeNames: tgt.Nodes.Clone()}, nil
}

// Filter keeps the pod inside its target on every path to a node. PreFilter's node list is
// not one: kube-scheduler first tries a pod's nominated node on its own, through Filter
// alone, and a pod that waited in Permit on an attempt that was then given up keeps that
// node in status.nominatedNodeName. Without this check the pod's next attempt could land
// on it, in another domain than the rest of its group or role replica.
func (t *Topology) Filter(_ context.Context, state fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	cs, err := readCycleState(state)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if !cs.target.Nodes.Has(ni.Node().Name) {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("node is outside %s, where the pod's group places it", cs.target.Name))
	}
	return nil
}

// targetOf is where the plan confines the pod: its subgroup's domain when the subgroup
// has a network topology of its own, else the group's domain (nil: anywhere). The subgroup
// is found by its key, so a pod recreated after the plan was made joins its replica's
// domain. A pod of such a subgroup that the plan gave no domain is refused with why: let
// anywhere into the group's domain, it could split its replica across the subgroup's tier.
func targetOf(pod *corev1.Pod, pg *volcanov1beta1.PodGroup, req *placement.Requirement, p *placement.Plan) (tgt *placement.Target, why string) {
	unit, rule := req.UnitOf(pod)
	if rule < 0 || rule >= len(pg.Spec.SubGroupPolicy) || pg.Spec.SubGroupPolicy[rule].NetworkTopology == nil {
		return p.Domain, ""
	}
	if sub := p.Sub[unit]; sub != nil {
		return sub, ""
	}
	return nil, fmt.Sprintf("the role replica of pod %s has no domain of its tier planned yet", pod.Name)
}

// defaultPlanTTL bounds a plan the topology plugin makes itself (without the gang plugin).
const defaultPlanTTL = time.Minute

// PostFilter runs when the pod fit no node it was allowed: the group's next attempt tries
// another domain first (and, in soft mode, anywhere once no domain is left).
func (t *Topology) PostFilter(_ context.Context, state fwk.CycleState, _ *corev1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	cs, err := readCycleState(state)
	if err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	// The group's domain is given up, not a subgroup's: the next attempt chooses the
	// group's domain again, and its subgroups' domains inside it.
	t.mu.Lock()
	if cs.domain != nil && cs.domain.Tier > 0 && t.args.retryOtherDomain() > 0 {
		t.stateLocked(cs.key).avoid[cs.domain.Name] = time.Now().Add(t.args.retryOtherDomain())
	}
	t.mu.Unlock()
	t.model.Drop(cs.key)
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

// PreFilterExtensions is not needed: the plugin keeps no per-node state in a cycle.
func (t *Topology) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

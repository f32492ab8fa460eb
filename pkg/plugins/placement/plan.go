package placement

import (
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// Target is where a group (or subgroup) is meant to go: a network domain, a spread domain
// or, with nothing else, a set of nodes.
type Target struct {
	Name  string // for messages and events: "leaf-3", "zone-a"
	Tier  int    // the domain's tier, 0 for a spread domain
	Nodes sets.Set[string]
	List  []string // Nodes, sorted: the order the simulation tries them in
}

// NewTarget builds a target over nodes (sorted in place).
func NewTarget(name string, tier int, nodes []string) *Target {
	sort.Strings(nodes)
	return &Target{Name: name, Tier: tier, Nodes: sets.New(nodes...), List: nodes}
}

// Plan is where a group's pods go: every pod the group's minimum still needs (or, once the
// minimum is placed, the extra pods that fit) has a node, and the group a domain when it
// asked for one. Until its pods are placed, what a plan keeps on its nodes counts as used
// for every other group.
type Plan struct {
	Group string
	// Domain is the network or spread domain the group was planned in; nil: anywhere.
	Domain *Target
	// Sub are the domains of subgroups with a network topology of their own, by unit key.
	Sub map[string]*Target
	// Nodes are the planned nodes of pods not yet placed, by pod UID.
	Nodes map[types.UID]string
	// Reservation marks a plan that cannot be placed yet: the capacity kept for the oldest
	// blocked group while what runs on its nodes finishes.
	Reservation bool
	// Nominated marks a preemptor's plan: its nodes are freed by evicting lower-priority
	// groups, and the group waits for them rather than planning again (see Nominate).
	Nominated bool

	requests map[types.UID]Resources
	// devices are the DRA devices each planned pod's claims get (see AllocateDevices).
	devices map[types.UID][]structured.DeviceID
	expires time.Time // zero: never
}

// assignDevices records the pod's devices: the plan keeps each as one unit of its own
// resource (DeviceKey), so no other group's plan or pod takes it.
func (p *Plan) assignDevices(uid types.UID, ids []structured.DeviceID) {
	if len(ids) == 0 {
		return
	}
	if p.devices == nil {
		p.devices = map[types.UID][]structured.DeviceID{}
	}
	p.devices[uid] = ids
	req := make(Resources, len(p.requests[uid])+len(ids))
	for k, v := range p.requests[uid] {
		req[k] = v
	}
	for _, id := range ids {
		req[DeviceKey(id)] = 1
	}
	p.requests[uid] = req
}

// AllocateDevices gives every planned pod with DRA claims the devices kube-scheduler's
// DynamicResources plugin will allocate it: pods in the order the queue hands them out,
// each on its planned node, around what earlier ones took (the plugin allocates one pod at
// a time, first fit, in that order). It returns a refusal when that order does not fit the
// plan (a simulation that placed units in another order can plan what first fit never
// allocates).
func AllocateDevices(pool *Pool, p *Plan, pods []*corev1.Pod) string {
	if pool.devices() == nil || len(p.Nodes) == 0 {
		return ""
	}
	var planned []*corev1.Pod
	for _, pod := range pods {
		if _, ok := p.Nodes[pod.UID]; ok && HasClaims(pod) {
			planned = append(planned, pod)
		}
	}
	sort.SliceStable(planned, func(i, j int) bool { return QueueLess(planned[i], planned[j]) })
	sim := pool.Simulate()
	for _, pod := range planned {
		node := p.Nodes[pod.UID]
		got, ok := sim.fitDevices(pod, node)
		if !ok {
			if err := sim.ClaimError(); err != nil {
				return fmt.Sprintf("pod %s: %v", pod.Name, err)
			}
			return fmt.Sprintf("pod %s: its claims do not fit node %s after the devices its group's earlier pods take there", pod.Name, node)
		}
		sim.takeDevices(pod, node, got)
		p.assignDevices(pod.UID, got.devices)
	}
	return ""
}

// Assign records that the pod goes to node.
func (p *Plan) Assign(pod *corev1.Pod, req Resources, node string) {
	if p.Nodes == nil {
		p.Nodes, p.requests = map[types.UID]string{}, map[types.UID]Resources{}
	}
	p.Nodes[pod.UID] = node
	p.requests[pod.UID] = req
}

// Kept sums what the plan keeps per node.
func (p *Plan) Kept() map[string]Resources {
	out := map[string]Resources{}
	for uid, node := range p.Nodes {
		r := out[node]
		if r == nil {
			r = Resources{}
			out[node] = r
		}
		addTo(r, p.requests[uid], 1)
	}
	return out
}

// PlacedPod is a pod bound, or held by the scheduler, on a node.
type PlacedPod struct {
	Pod  *corev1.Pod
	Node string
}

// PendingUnit is a unit with pods still to place.
type PendingUnit struct {
	Key      string
	Rule     int // the unit's subGroupPolicy entry, or -1
	Role     string
	Required bool
	Pods     []*corev1.Pod // the pods to place
	Requests []Resources
	Along    []string // nodes of the unit's pods already placed
}

// Request is one planning: the group, what it still needs, and the capacity.
type Request struct {
	Pod      *corev1.Pod // the pod being scheduled
	PodGroup *volcanov1beta1.PodGroup
	Units    []PendingUnit
	Placed   []PlacedPod
	Pool     *Pool
	// Reserving: planning capacity to keep for the group, not a placement it can start.
	Reserving bool
	// Base, when set, is where the planning starts instead of the pool's free capacity: a
	// simulation that already holds other would-be groups (counting what fits, pkg/capacity).
	Base *Simulation
}

// Start is an empty simulation on the pool, or a copy of Base.
func (r *Request) Start() *Simulation {
	if r.Base != nil {
		return r.Base.Clone()
	}
	return r.Pool.Simulate()
}

// DomainChooser plans a group inside the network or spread domain it asks for (the
// topology plugin). The plan it returns carries the pods' nodes, or none, meaning "place
// the units anywhere".
type DomainChooser interface {
	// ChooseDomain returns applies=false for a group that asks for no domain, and a nil
	// plan with a message when no domain can hold the group.
	ChooseDomain(r *Request) (p *Plan, applies bool, msg string, err error)
}

// PlaceAnywhere places the units over every node of the pool, as many as fit, each whole
// or not at all; stop ends early once it says the group has enough. It returns the plan and
// the first required unit that did not fit. When a required unit does not fit and the
// group's pods use DRA claims, the first choice of devices may be what failed (a pod that
// could use any GPU took the only one another pod's selector matches), so the required
// units are searched again, backtracking over nodes, before the group is refused.
func PlaceAnywhere(r *Request, stop func(chosen []*corev1.Pod) bool) (*Plan, *PendingUnit, *Simulation) {
	p, miss, sim := placeUnits(r, r.Start(), r.Units, stop)
	if miss == nil || !unitsHaveClaims(r.Units) || sim.ClaimError() != nil {
		return p, miss, sim
	}
	var required []*PendingUnit
	for i := range r.Units {
		if r.Units[i].Required {
			required = append(required, &r.Units[i])
		}
	}
	bt := &backtracker{nodes: r.Pool.Nodes(), budget: backtrackBudget}
	found, ok := bt.search(r.Start(), required)
	backtracks.WithLabelValues(map[bool]string{true: "found", false: "exhausted"}[ok]).Inc()
	if !ok {
		return p, miss, sim
	}
	// The required units are placed; the others go where they fit around them.
	p2 := &Plan{}
	for _, u := range required {
		for j, pod := range u.Pods {
			p2.Assign(pod, u.Requests[j], bt.node[pod.UID])
		}
	}
	var rest []PendingUnit
	for i := range r.Units {
		if !r.Units[i].Required {
			rest = append(rest, r.Units[i])
		}
	}
	p3, _, sim3 := placeUnits(&Request{Pod: r.Pod, PodGroup: r.PodGroup, Units: rest, Placed: r.Placed, Pool: r.Pool, Base: r.Base}, found, rest, nil)
	for uid, n := range p3.Nodes {
		p2.Nodes[uid], p2.requests[uid] = n, p3.requests[uid]
	}
	return p2, nil, sim3
}

func placeUnits(r *Request, sim *Simulation, units []PendingUnit, stop func(chosen []*corev1.Pod) bool) (*Plan, *PendingUnit, *Simulation) {
	nodes := r.Pool.Nodes()
	p := &Plan{}
	var chosen []*corev1.Pod
	for _, pp := range r.Placed {
		chosen = append(chosen, pp.Pod)
	}
	var miss *PendingUnit
	for i := range units {
		u := &units[i]
		got, ok := sim.PlaceUnit(u.Pods, u.Requests, nodes)
		if !ok {
			if miss == nil && u.Required {
				miss = u
			}
			continue
		}
		for j, pod := range u.Pods {
			p.Assign(pod, u.Requests[j], got[j])
		}
		chosen = append(chosen, u.Pods...)
		if stop != nil && stop(chosen) {
			break
		}
	}
	return p, miss, sim
}

func unitsHaveClaims(units []PendingUnit) bool {
	for i := range units {
		for _, p := range units[i].Pods {
			if HasClaims(p) {
				return true
			}
		}
	}
	return false
}

// backtrackBudget bounds the nodes a backtracking search tries, in all.
const backtrackBudget = 256

// backtracker searches the pods of the required units depth first: each pod tries the
// nodes its claims and requests fit, best first, and a pod that fits nowhere sends the
// search back to try the previous pod's next node.
type backtracker struct {
	nodes  []string
	budget int
	node   map[types.UID]string
}

func (b *backtracker) search(sim *Simulation, units []*PendingUnit) (*Simulation, bool) {
	type step struct {
		pod *corev1.Pod
		req Resources
	}
	var steps []step
	for _, u := range units {
		for j, pod := range u.Pods {
			steps = append(steps, step{pod, u.Requests[j]})
		}
	}
	b.node = map[types.UID]string{}
	var rec func(k int, sim *Simulation) (*Simulation, bool)
	rec = func(k int, sim *Simulation) (*Simulation, bool) {
		if k == len(steps) {
			return sim, true
		}
		st := steps[k]
		for _, node := range sim.candidates(st.pod, st.req, b.nodes) {
			if b.budget <= 0 {
				return nil, false
			}
			b.budget--
			next := sim.Clone()
			got, ok := next.fitDevices(st.pod, node)
			if !ok {
				continue
			}
			next.take(node, st.req)
			next.takeDevices(st.pod, node, got)
			b.node[st.pod.UID] = node
			if done, ok := rec(k+1, next); ok {
				return done, true
			}
		}
		return nil, false
	}
	return rec(0, sim)
}

// weight orders units for packing: accelerators dominate, then CPU, then memory.
func weight(u *PendingUnit) float64 {
	var w float64
	for _, r := range u.Requests {
		for name, v := range r {
			switch {
			case name == corev1.ResourceCPU:
				w += float64(v) * 1e3
			case name == corev1.ResourceMemory:
				w += float64(v) / (1 << 20)
			case IsDevice(name):
				w += float64(v) * 1e12
			}
		}
	}
	return w
}

// explain turns a failed planning into one sentence, e.g. "decode needs 2 complete
// replicas, 1 fits: 0/16 nodes its pods may use have 8 free nvidia.com/gpu".
func explain(req *Requirement, units []PendingUnit, placed map[string]bool, miss *PendingUnit, sim *Simulation, chosen int, rule string) string {
	need, fit := map[string]int{}, map[string]int{}
	for i := range units {
		u := &units[i]
		if !u.Required {
			continue
		}
		need[u.Role]++
		if placed[u.Key] {
			fit[u.Role]++
		}
	}
	var scarce string
	if miss != nil {
		scarce = scarcest(miss, sim)
	}
	for _, role := range SortedKeys(need) {
		if fit[role] >= need[role] {
			continue
		}
		noun := "complete replicas"
		if need[role] == 1 {
			noun = "complete replica"
		}
		verb := "fit"
		if fit[role] == 1 {
			verb = "fits"
		}
		msg := fmt.Sprintf("%s needs %d %s, %d %s", role, need[role], noun, fit[role], verb)
		if scarce != "" {
			msg += ": " + scarce
		}
		return msg
	}
	msg := fmt.Sprintf("the group needs %d pods placed together, %d fit", req.Members(), chosen)
	if chosen >= req.Members() && rule != "" {
		msg += " (" + rule + ")"
	}
	if scarce != "" {
		msg += ": " + scarce
	}
	return msg
}

// scarcest names the resource of the unit's largest pod that the fewest of the nodes its
// pods may use can offer, counting capacity left after the units the simulation placed.
func scarcest(u *PendingUnit, sim *Simulation) string {
	biggest, pod := u.Requests[0], u.Pods[0]
	for i, r := range u.Requests[1:] {
		if weightOf(r) > weightOf(biggest) {
			biggest, pod = r, u.Pods[i+1]
		}
	}
	var usable []string
	for _, n := range sim.pool.Nodes() {
		if sim.pool.Eligible(pod, n) {
			usable = append(usable, n)
		}
	}
	if len(usable) == 0 {
		return fmt.Sprintf("none of the %d nodes matches the pod's node selector, affinity, tolerations and accelerator requirements", len(sim.pool.Nodes()))
	}
	if err := sim.ClaimError(); err != nil {
		return fmt.Sprintf("pod %s's claims cannot be allocated: %v", pod.Name, err)
	}
	if devs := sim.pool.devices(); devs != nil && HasClaims(pod) {
		count := 0
		for _, n := range usable {
			if _, ok := sim.fitDevices(pod, n); ok {
				count++
			}
		}
		if err := sim.ClaimError(); err != nil {
			return fmt.Sprintf("pod %s's claims cannot be allocated: %v", pod.Name, err)
		}
		if pc, err := devs.claimsOf(pod); err == nil && count < len(usable) {
			return fmt.Sprintf("%d/%d nodes its pods may use can allocate %s", count, len(usable), describeClaims(pc))
		}
	}
	best, bestCount := corev1.ResourceName(""), len(usable)+1
	for _, name := range SortedKeys(asStrings(biggest)) {
		rn := corev1.ResourceName(name)
		if biggest[rn] == 0 {
			continue
		}
		count := 0
		for _, n := range usable {
			if sim.FreeAfter(n, rn) >= biggest[rn] {
				count++
			}
		}
		if count < bestCount {
			best, bestCount = rn, count
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("%d/%d nodes its pods may use have %s free %s", bestCount, len(usable), FormatAmount(best, biggest[best]), best)
}

func weightOf(r Resources) float64 {
	return weight(&PendingUnit{Requests: []Resources{r}})
}

package gang

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// RoleLabel is the ModelServing role of a pod; when present, unschedulable messages speak
// of roles ("decode needs 2 complete replicas") instead of tasks.
const RoleLabel = "modelserving.volcano.sh/role"

// capacity is the free capacity of the cluster's nodes: allocatable minus what is
// requested, assumed pods (those held in Permit) included. Values are milli-units for cpu,
// units otherwise. It is read lazily: packing a small gang touches a few nodes, not all.
type capacity interface {
	len() int
	free(i int) map[corev1.ResourceName]int64
}

// nodeFree is one node's free capacity, for a capacity given up front.
type nodeFree struct {
	name string
	free map[corev1.ResourceName]int64
}

type staticCapacity []nodeFree

func (c staticCapacity) len() int                                 { return len(c) }
func (c staticCapacity) free(i int) map[corev1.ResourceName]int64 { return c[i].free }

// unit is what must be placed whole: a subgroup (a role replica with its workers) or a pod.
type unit struct {
	role     string
	required bool
	pods     []*corev1.Pod
	requests []map[corev1.ResourceName]int64
}

// feasibility is the outcome of packing a group's missing pods onto the free capacity.
type feasibility struct {
	ok      bool
	message string
}

// checkFeasible answers, before any pod of the group is held, whether the pods the group
// still needs could be placed on the free capacity at all. It packs whole units first-fit,
// looking only at resources (not affinity or taints, which Filter checks pod by pod), so a
// "no" is certain and a "yes" is optimistic. A "no" comes with a message a user can act on.
func checkFeasible(req *requirement, placed, pending []*corev1.Pod, nodes capacity) feasibility {
	units := buildUnits(req, pending)
	// Required units first (capacity goes to what the minimum needs), largest first within
	// them: first-fit decreasing wastes the least capacity on fragments.
	sort.SliceStable(units, func(i, j int) bool {
		if units[i].required != units[j].required {
			return units[i].required
		}
		return units[i].weight() > units[j].weight()
	})

	sim := newPacking(nodes)
	chosen := append([]*corev1.Pod(nil), placed...)
	need, fit := map[string]int{}, map[string]int{}
	var firstMiss *unit
	for i := range units {
		u := &units[i]
		if u.required {
			need[u.role]++
		}
		if !sim.placeAll(u.requests) {
			if firstMiss == nil && u.required {
				firstMiss = u
			}
			continue
		}
		if u.required {
			fit[u.role]++
		}
		chosen = append(chosen, u.pods...)
		if req.check(chosen).ok {
			return feasibility{ok: true}
		}
	}
	if req.check(chosen).ok {
		return feasibility{ok: true}
	}
	return feasibility{message: explain(req, need, fit, firstMiss, chosen, sim)}
}

// buildUnits groups pending pods into placement units and marks the ones the minimum needs.
func buildUnits(req *requirement, pending []*corev1.Pod) []unit {
	byKey := map[string]*unit{}
	var order []string
	for _, p := range pending {
		key := "pod/" + p.Namespace + "/" + p.Name
		for i := range req.subGroups {
			if k := req.subGroups[i].subGroupOf(p); k != "" {
				key = fmt.Sprintf("sg/%d/%s", i, k)
				break
			}
		}
		u, ok := byKey[key]
		if !ok {
			u = &unit{role: roleOf(p)}
			byKey[key] = u
			order = append(order, key)
		}
		u.pods = append(u.pods, p)
		u.requests = append(u.requests, podRequests(p))
		if _, isMin := req.minTask[taskOf(p)]; isMin || len(req.minTask) == 0 {
			u.required = true
		}
	}
	out := make([]unit, 0, len(order))
	for _, k := range order {
		out = append(out, *byKey[k])
	}
	return out
}

// weight orders units for packing: accelerators dominate, then CPU, then memory.
func (u *unit) weight() float64 {
	var w float64
	for _, r := range u.requests {
		for name, v := range r {
			switch name {
			case corev1.ResourceCPU:
				w += float64(v) * 1e3
			case corev1.ResourceMemory:
				w += float64(v) / (1 << 20)
			case corev1.ResourcePods, corev1.ResourceEphemeralStorage:
			default:
				w += float64(v) * 1e12
			}
		}
	}
	return w
}

func roleOf(p *corev1.Pod) string {
	if r := p.Labels[RoleLabel]; r != "" {
		return r
	}
	if t := taskOf(p); t != "" {
		// Berth tasks are "<role>-<replica>"; other tools may use any name.
		if i := strings.LastIndexByte(t, '-'); i > 0 {
			return t[:i]
		}
		return t
	}
	return "pods"
}

// PodRequests returns the pod's effective requests (init containers and overhead included),
// one pod slot among them, cpu in millicores.
func PodRequests(p *corev1.Pod) map[corev1.ResourceName]int64 { return podRequests(p) }

func podRequests(p *corev1.Pod) map[corev1.ResourceName]int64 {
	out := map[corev1.ResourceName]int64{}
	out[corev1.ResourcePods] = 1 // every pod takes one of the node's pod slots
	for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
		out[name] = quantityValue(name, q)
	}
	return out
}

func quantityValue(name corev1.ResourceName, q resource.Quantity) int64 {
	if name == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// packing tracks simulated deductions without copying every node: only touched nodes get
// an entry in used.
type packing struct {
	nodes capacity
	used  map[int]map[corev1.ResourceName]int64
	next  int // next-fit cursor: keeps packing a big gang linear in its size
}

func newPacking(nodes capacity) *packing {
	return &packing{nodes: nodes, used: map[int]map[corev1.ResourceName]int64{}}
}

func (s *packing) fits(i int, req map[corev1.ResourceName]int64) bool {
	free := s.nodes.free(i)
	for name, v := range req {
		if v == 0 {
			continue
		}
		if free[name]-s.used[i][name] < v {
			return false
		}
	}
	return true
}

func (s *packing) take(i int, req map[corev1.ResourceName]int64) {
	u := s.used[i]
	if u == nil {
		u = map[corev1.ResourceName]int64{}
		s.used[i] = u
	}
	for name, v := range req {
		u[name] += v
	}
}

func (s *packing) give(i int, req map[corev1.ResourceName]int64) {
	for name, v := range req {
		s.used[i][name] -= v
	}
}

// placeAll places every request or none.
func (s *packing) placeAll(reqs []map[corev1.ResourceName]int64) bool {
	type took struct {
		node int
		req  map[corev1.ResourceName]int64
	}
	var done []took
	for _, r := range reqs {
		n := s.nodes.len()
		placed := false
		for k := 0; k < n; k++ {
			i := (s.next + k) % n
			if s.fits(i, r) {
				s.take(i, r)
				s.next = i
				done = append(done, took{i, r})
				placed = true
				break
			}
		}
		if !placed {
			for _, d := range done {
				s.give(d.node, d.req)
			}
			return false
		}
	}
	return true
}

// explain turns a failed packing into one sentence, e.g.
// "decode needs 2 complete replicas, 1 fits: 0/4 nodes have 8 free nvidia.com/gpu".
func explain(req *requirement, need, fit map[string]int, miss *unit, chosen []*corev1.Pod, sim *packing) string {
	var scarce string
	if miss != nil {
		scarce = scarcest(miss, sim)
	}
	for _, role := range sortedKeys(need) {
		if fit[role] >= need[role] {
			continue
		}
		noun := "complete replicas"
		if need[role] == 1 {
			noun = "complete replica"
		}
		msg := fmt.Sprintf("%s needs %d %s, %d fit", role, need[role], noun, fit[role])
		if fit[role] == 1 {
			msg = fmt.Sprintf("%s needs %d %s, 1 fits", role, need[role], noun)
		}
		if scarce != "" {
			msg += ": " + scarce
		}
		return msg
	}
	msg := fmt.Sprintf("the group needs %d pods placed together, %d fit", req.members(), len(chosen))
	if scarce != "" {
		msg += ": " + scarce
	}
	return msg
}

// scarcest names the resource of the unit's largest pod that the fewest nodes can offer,
// counting capacity left after the units the simulation did place.
func scarcest(u *unit, sim *packing) string {
	nodes := sim.nodes
	total := nodes.len()
	biggest := u.requests[0]
	for _, r := range u.requests[1:] {
		if sum(r) > sum(biggest) {
			biggest = r
		}
	}
	best, bestCount := corev1.ResourceName(""), total+1
	for _, name := range sortedKeys(asStringMap(biggest)) {
		rn := corev1.ResourceName(name)
		if biggest[rn] == 0 {
			continue
		}
		count := 0
		for i := 0; i < total; i++ {
			if nodes.free(i)[rn]-sim.used[i][rn] >= biggest[rn] {
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
	return fmt.Sprintf("%d/%d nodes have %s free %s", bestCount, total, formatAmount(best, biggest[best]), best)
}

func formatAmount(name corev1.ResourceName, v int64) string {
	switch name {
	case corev1.ResourceCPU:
		return resource.NewMilliQuantity(v, resource.DecimalSI).String()
	case corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return resource.NewQuantity(v, resource.BinarySI).String()
	}
	return fmt.Sprint(v)
}

func sum(r map[corev1.ResourceName]int64) int64 {
	var s int64
	for _, v := range r {
		s += v
	}
	return s
}

func asStringMap(r map[corev1.ResourceName]int64) map[string]int64 {
	out := make(map[string]int64, len(r))
	for k, v := range r {
		out[string(k)] = v
	}
	return out
}

// checkMinResources is Volcano's minResources pre-check: the cluster's free capacity, summed
// over nodes, must cover what the PodGroup says its minimum needs. It is cheaper to explain
// than per-node packing and catches a PodGroup whose pods are not all created yet.
func checkMinResources(minResources corev1.ResourceList, nodes capacity) feasibility {
	if len(minResources) == 0 {
		return feasibility{ok: true}
	}
	free := map[corev1.ResourceName]int64{}
	for i := 0; i < nodes.len(); i++ {
		for name, v := range nodes.free(i) {
			if v > 0 {
				free[name] += v
			}
		}
	}
	for _, name := range sortedKeys(asStringMap(toValues(minResources))) {
		rn := corev1.ResourceName(name)
		want := quantityValue(rn, minResources[rn])
		if free[rn] < want {
			return feasibility{message: fmt.Sprintf("the group's minResources ask for %s %s, %s free in the cluster",
				formatAmount(rn, want), rn, formatAmount(rn, free[rn]))}
		}
	}
	return feasibility{ok: true}
}

func toValues(rl corev1.ResourceList) map[corev1.ResourceName]int64 {
	out := make(map[corev1.ResourceName]int64, len(rl))
	for name, q := range rl {
		out[name] = quantityValue(name, q)
	}
	return out
}

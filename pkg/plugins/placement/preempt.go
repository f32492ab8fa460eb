package placement

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// Victim is what preemption evicts as one: every pod of a group, or one pod without a
// group. A group is never split: it loses all of its pods or none.
type Victim struct {
	// Key is the group's key, or "<namespace>/<name>" of a pod without a group.
	Key string
	// Group: Key names a group (false: a lone pod).
	Group bool
	// Priority is the group's priority (its PriorityClass, else its pods' highest).
	Priority int32
	// Pods are every live pod the victim has; the bound ones give capacity back.
	Pods []*corev1.Pod
	// Protection says why the victim may not be evicted (a disruption budget), or "".
	Protection string

	freed map[string]Resources // what evicting it gives back, per node (see withFreed)
}

// Bound counts the victim's pods that hold capacity on a node.
func (v *Victim) Bound() int {
	n := 0
	for _, p := range v.Pods {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

// withFreed returns copies of the victims that know what evicting each gives back, per
// node, so a search that tries many sets of victims sums their requests only once. The DRA
// devices of claims only the victim's pods use count too (as DeviceKey units).
func (m *Model) withFreed(vs []Victim) []Victim {
	out := make([]Victim, len(vs))
	for i, v := range vs {
		v.freed = map[string]Resources{}
		uids := map[types.UID]bool{}
		for _, p := range v.Pods {
			uids[p.UID] = true
		}
		for _, p := range v.Pods {
			if p.Spec.NodeName == "" {
				continue
			}
			r := v.freed[p.Spec.NodeName]
			if r == nil {
				r = Resources{}
				v.freed[p.Spec.NodeName] = r
			}
			addTo(r, PodRequests(p), 1)
			for _, id := range m.dra.devicesFreedWith(p, uids) {
				r[DeviceKey(id)] = 1
			}
		}
		out[i] = v
	}
	return out
}

// Devices are the DRA devices evicting the victim gives back, on every node: those of
// claims only its pods use. They are freed some time after its pods are gone, once the
// ResourceClaim controller has deleted or deallocated the claims.
func (v Victim) Devices() []structured.DeviceID {
	var out []structured.DeviceID
	for _, r := range v.freed {
		out = append(out, keptDevices(r)...)
	}
	return out
}

// AllocatedCheck returns a function that reports whether any of the given devices is still
// allocated (or being allocated) to a claim. The cluster's allocated devices are listed once,
// on the first call that needs them, so a caller checking many victims lists them once.
func (m *Model) AllocatedCheck() func(ids []structured.DeviceID) bool {
	var allocated sets.Set[structured.DeviceID]
	var err error
	listed := false
	return func(ids []structured.DeviceID) bool {
		if m.dra == nil || len(ids) == 0 {
			return false
		}
		if !listed {
			allocated, err = m.dra.mgr.ResourceClaims().ListAllAllocatedDevices()
			listed = true
		}
		if err != nil {
			return true // not known to be free: keep waiting
		}
		for _, id := range ids {
			if allocated.Has(id) {
				return true
			}
		}
		return false
	}
}

// OnlyProtected begins PlanPreemption's refusal when only victims a disruption budget
// protects would make room.
const OnlyProtected = "it would fit only by evicting "

// Preemption is what PlanPreemption chose: the victims, and the plan the preemptor gets
// once they are gone.
type Preemption struct {
	Plan    *Plan
	Victims []Victim
}

// PlanPreemption finds the victims whose eviction lets the group's minimum be planned:
// the lowest-priority and the fewest. candidates are what the group may evict (lower
// priority, not protected by a disruption budget); protected are the ones it may not,
// named in the refusal when only they would make room. It returns nil and the reason when
// no eviction helps, and nil without a reason when the group needs no eviction.
//
// The search works over whole groups in two steps. First it frees nodes the preemptor's
// pods may use one at a time, each time the node whose remaining victims have the lowest
// top priority, then the fewest of them (a group spanning nodes counts once), until the
// group can be planned. Then, as kube-scheduler's reprieve does, it gives each chosen
// victim back, the most important first, and keeps it evicted only when the group no
// longer fits without its capacity. What is left is minimal: no victim could stay.
func (m *Model) PlanPreemption(pod *corev1.Pod, pg *volcanov1beta1.PodGroup, req *Requirement, candidates, protected []Victim) (*Preemption, string, error) {
	key := GroupKey(pod)
	all := m.GroupPods(key)
	placed, _ := m.Split(key, all)
	units := pendingUnits(req, all, placed, true)
	candidates, protected = m.withFreed(candidates), m.withFreed(protected)
	try := func(victims []Victim) (*Plan, string, error) {
		freed := map[string]Resources{}
		for i := range victims {
			for node, r := range victims[i].freed {
				if freed[node] == nil {
					freed[node] = Resources{}
				}
				addTo(freed[node], r, 1)
			}
		}
		r := &Request{Pod: pod, PodGroup: pg, Units: units, Placed: placed, Pool: m.preemptionPool(key, freed)}
		return m.plan(r, req, false)
	}

	// Nothing to evict when the group fits already: what stopped it is capacity kept for the
	// oldest blocked group, which the reservation rules (priority first) settle.
	if p, _, err := try(nil); err != nil || p != nil {
		return nil, "", err
	}

	// The nodes worth freeing: those some pending pod of the group may use.
	pool := m.preemptionPool(key, nil)
	onNode := map[string][]int{}
	for i := range candidates {
		for _, p := range candidates[i].Pods {
			if n := p.Spec.NodeName; n != "" && usable(pool, units, n) {
				if l := onNode[n]; len(l) == 0 || l[len(l)-1] != i {
					onNode[n] = append(onNode[n], i)
				}
			}
		}
	}
	chosen := make([]bool, len(candidates))
	var plan *Plan
	msg := "no lower-priority group or pod runs where it could go"
	nodes := SortedKeys(onNode)
	for len(onNode) > 0 && plan == nil {
		best, bestPrio, bestCount, bestSize := "", int32(0), 0, 0
		for _, n := range nodes {
			if _, left := onNode[n]; !left {
				continue
			}
			prio, count, size := int32(0), 0, 0
			for _, i := range onNode[n] {
				if chosen[i] {
					continue
				}
				if count == 0 || candidates[i].Priority > prio {
					prio = candidates[i].Priority
				}
				count++
				size += candidates[i].Bound()
			}
			// Lowest top priority, then the fewest victims, then the victims freeing the
			// most elsewhere too (a group spanning nodes frees all of them at once).
			if best == "" || prio < bestPrio || prio == bestPrio && (count < bestCount || count == bestCount && size > bestSize) {
				best, bestPrio, bestCount, bestSize = n, prio, count, size
			}
		}
		for _, i := range onNode[best] {
			chosen[i] = true
		}
		delete(onNode, best)
		var err error
		var why string
		if plan, why, err = try(pick(candidates, chosen)); err != nil {
			return nil, "", err
		}
		if plan == nil {
			msg = fmt.Sprintf("evicting every lower-priority group and pod where it could go would not make room: %s", why)
		}
	}
	if plan == nil {
		if len(protected) > 0 {
			if q, _, err := try(append(pick(candidates, chosen), protected...)); err == nil && q != nil {
				return nil, OnlyProtected + DescribeVictims(protected, 4) + ", which disruption budgets protect: " + protected[0].Protection, nil
			}
		}
		return nil, msg, nil
	}

	// Reprieve: the most important first; within a priority, the smallest.
	order := pick(candidates, chosen)
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].Priority != order[j].Priority {
			return order[i].Priority > order[j].Priority
		}
		return order[i].Bound() < order[j].Bound()
	})
	keep := make([]bool, len(order))
	for i := range keep {
		keep[i] = true
	}
	for i := range order {
		keep[i] = false
		q, _, err := try(pick(order, keep))
		if err != nil {
			return nil, "", err
		}
		if q == nil {
			keep[i] = true // needed
			continue
		}
		plan = q
	}
	return &Preemption{Plan: plan, Victims: pick(order, keep)}, "", nil
}

// usable: some pending pod of the units may run on the node.
func usable(pool *Pool, units []PendingUnit, node string) bool {
	for i := range units {
		for _, p := range units[i].Pods {
			if pool.Eligible(p, node) {
				return true
			}
		}
	}
	return false
}

func pick(vs []Victim, on []bool) []Victim {
	var out []Victim
	for i, ok := range on {
		if ok {
			out = append(out, vs[i])
		}
	}
	return out
}

// preemptionPool is the capacity the group would see with freed given back: other groups'
// plans still count (a preemptor never takes what another group's plan keeps), except the
// reservation of the oldest blocked group, which a higher-priority group outranks.
func (m *Model) preemptionPool(key string, freed map[string]Resources) *Pool {
	p := NewPool(freedSource{NodeSource: m.nodes(), freed: freed}, m.Accelerators(), func(node string) Resources { return m.keptForPlacing(node, key) })
	p.dra = m.dra
	for _, r := range freed {
		for _, id := range keptDevices(r) {
			if p.freedDevices == nil {
				p.freedDevices = sets.New[structured.DeviceID]()
			}
			p.freedDevices.Insert(id)
		}
	}
	m.exclude(p, key)
	return p
}

// freedSource is a node source with some pods' capacity given back.
type freedSource struct {
	NodeSource
	freed map[string]Resources
}

func (s freedSource) Free(name string) Resources {
	f := s.NodeSource.Free(name)
	add := s.freed[name]
	if f == nil || len(add) == 0 {
		return f
	}
	out := make(Resources, len(f))
	for k, v := range f {
		out[k] = v
	}
	addTo(out, add, 1)
	return out
}

// Nominate puts a preemptor's plan in force until ttl passes: the capacity its victims
// give back is kept for it while they terminate, so no other group takes it, and its
// pods wait for their planned nodes instead of planning elsewhere (see PlanFor). Capacity
// kept for the oldest blocked group gives way: the preemptor outranks it.
func (m *Model) Nominate(key string, p *Plan, ttl time.Duration) {
	p.Group, p.Nominated, p.Reservation = key, true, false
	p.expires = time.Now().Add(ttl)
	m.mu.Lock()
	old := m.head
	if old != "" {
		if op := m.plans[old]; op != nil && op.Reservation {
			m.dropPlanLocked(old)
		}
		m.head = ""
	}
	delete(m.blocked, key)
	m.setPlanLocked(p)
	hooks := m.onHead
	m.mu.Unlock()
	if old != "" {
		for _, f := range hooks {
			f(old, "")
		}
	}
}

// Nominated reports whether the group waits on a preemption's plan that is still in force.
func (m *Model) Nominated(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.plans[key]
	return p != nil && p.Nominated && time.Now().Before(p.expires)
}

// DescribeVictims names up to max victims for messages and events: "group a/x, pod a/y and
// 3 more".
func DescribeVictims(vs []Victim, max int) string {
	names := make([]string, 0, max)
	for i, v := range vs {
		if i == max {
			names = append(names, fmt.Sprintf("%d more", len(vs)-max))
			break
		}
		if v.Group {
			names = append(names, "group "+v.Key)
		} else {
			names = append(names, "pod "+v.Key)
		}
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

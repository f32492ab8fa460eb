package placement

import (
	"context"
	"errors"
	"maps"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Simulation places pods on a Pool without touching it: what it used is kept per node.
// Pods that ask for accelerators go to the node that keeps the most whole nodes free (the
// fewest devices left, cheapest class first), as the accelerator plugin scores; other pods
// go to the next node that fits, so planning a thousand-pod gang stays linear in its size.
//
// Pods with DRA claims get their devices from the allocator kube-scheduler's
// DynamicResources plugin runs (see DRA), node by node, around the devices the
// simulation gave earlier pods and those other groups' plans keep.
type Simulation struct {
	pool   *Pool
	used   map[string]Resources
	cursor int

	// DRA: devices taken per node, claims allocated (pods sharing a claim follow it), each
	// placed pod's devices, what BestNode chose for its pod, and the first error the
	// allocator returned for a claim no node can take (a missing DeviceClass, a bad
	// selector), which refuses the group.
	taken     map[string]sets.Set[structured.DeviceID]
	simClaims map[types.UID]*claimAllocation
	got       map[types.UID]*podDevices
	chosen    *podDevices
	claimErr  error

	// changed logs every node a placement was added to or taken from, in order; ranks
	// are BestNode's rankings kept for pods of one kind (see rankFor).
	changed  []string
	ranks    map[rankKey]*ranking
	rankKeys []rankKey // ranks' keys, oldest first
}

// Simulate starts an empty simulation on the pool.
func (p *Pool) Simulate() *Simulation {
	return &Simulation{pool: p, used: map[string]Resources{}, taken: map[string]sets.Set[structured.DeviceID]{},
		simClaims: map[types.UID]*claimAllocation{}, got: map[types.UID]*podDevices{}}
}

// Pool is the pool the simulation places on.
func (s *Simulation) Pool() *Pool { return s.pool }

// Clone copies the simulation, to try a placement and keep it only if it works.
func (s *Simulation) Clone() *Simulation {
	c := &Simulation{pool: s.pool, used: make(map[string]Resources, len(s.used)), cursor: s.cursor,
		taken: make(map[string]sets.Set[structured.DeviceID], len(s.taken)), simClaims: make(map[types.UID]*claimAllocation, len(s.simClaims)),
		got: make(map[types.UID]*podDevices, len(s.got)), claimErr: s.claimErr}
	for n, u := range s.used {
		m := make(Resources, len(u))
		for k, v := range u {
			m[k] = v
		}
		c.used[n] = m
	}
	for n, t := range s.taken {
		c.taken[n] = t.Clone()
	}
	for k, v := range s.simClaims {
		c.simClaims[k] = v
	}
	for k, v := range s.got {
		c.got[k] = v
	}
	return c
}

// ClaimError is the allocator's error for a claim that no node can take, or nil.
func (s *Simulation) ClaimError() error { return s.claimErr }

// fitDevices is what the pod's claims get on the node after the simulation's placements,
// nil (and ok) for a pod without claims; ok=false when they do not fit.
func (s *Simulation) fitDevices(pod *corev1.Pod, node string) (*podDevices, bool) {
	devs := s.pool.devices()
	if devs == nil || !HasClaims(pod) {
		return nil, true
	}
	n := s.pool.Node(node)
	if n == nil {
		return nil, false
	}
	got, err := devs.allocate(context.TODO(), pod, n, s.taken[node], s.simClaims)
	if err != nil {
		if !errors.Is(err, errNoDevices) && s.claimErr == nil {
			s.claimErr = err
		}
		return nil, false
	}
	// kube-scheduler's allocator does not know what other groups' plans keep: it takes the
	// first devices that fit. So a node whose first fit takes a kept device does not take
	// the pod (the gang plugin's Filter refuses it there too), even when other devices
	// would do.
	if kept := s.pool.keptDevicesOn(node); len(kept) > 0 && intersects(got.devices, kept) {
		return nil, false
	}
	return got, true
}

func intersects(a, b []structured.DeviceID) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	in := sets.New(b...)
	for _, id := range a {
		if in.Has(id) {
			return true
		}
	}
	return false
}

func (s *Simulation) takeDevices(pod *corev1.Pod, node string, d *podDevices) {
	if d == nil {
		return
	}
	s.changed = append(s.changed, node)
	t := s.taken[node]
	if t == nil {
		t = sets.New[structured.DeviceID]()
		s.taken[node] = t
	}
	t.Insert(d.devices...)
	for uid, a := range d.claims {
		s.simClaims[uid] = a
	}
	s.got[pod.UID] = d
}

func (s *Simulation) giveDevices(pod *corev1.Pod, node string) {
	d := s.got[pod.UID]
	if d == nil {
		return
	}
	s.changed = append(s.changed, node)
	s.taken[node].Delete(d.devices...)
	for uid := range d.claims {
		delete(s.simClaims, uid)
	}
	delete(s.got, pod.UID)
}

// Used is what the simulation placed on the node.
func (s *Simulation) Used(node string) Resources { return s.used[node] }

// FreeAfter is the node's free amount of one resource after the simulation's placements.
func (s *Simulation) FreeAfter(node string, name corev1.ResourceName) int64 {
	return s.pool.Free(node)[name] - s.used[node][name]
}

// Fits reports whether req fits the node's free capacity after the simulation's placements.
func (s *Simulation) Fits(node string, req Resources) bool {
	return fitsIn(s.pool.Free(node), s.used[node], req)
}

func (s *Simulation) take(node string, req Resources) {
	s.changed = append(s.changed, node)
	u := s.used[node]
	if u == nil {
		u = Resources{}
		s.used[node] = u
	}
	addTo(u, req, 1)
}

func (s *Simulation) give(node string, req Resources) {
	s.changed = append(s.changed, node)
	addTo(s.used[node], req, -1)
}

// Leftover ranks placements. With the same wait (only a reservation waits), the cheapest
// accelerator class first (as the accelerator plugin scores), then the tightest fit, so
// that emptier nodes and domains stay free for larger groups.
type Leftover struct {
	// Wait is how much of what a reservation planned on is not free yet.
	Wait     int64
	Cost     int64 // class cost of the devices used
	Devices  int64 // accelerator devices left free
	MilliCPU int64
	Name     string
}

// Less orders leftovers, best first.
func (l Leftover) Less(o Leftover) bool {
	if l.Wait != o.Wait {
		return l.Wait < o.Wait
	}
	if l.Cost != o.Cost {
		return l.Cost < o.Cost
	}
	if l.Devices != o.Devices {
		return l.Devices < o.Devices
	}
	if l.MilliCPU != o.MilliCPU {
		return l.MilliCPU < o.MilliCPU
	}
	return l.Name < o.Name
}

// wait is, when planning a reservation, how much of req the node does not have free today
// (devices count for far more than cpu or memory).
func (s *Simulation) wait(node string, req Resources) int64 {
	if !s.pool.asIfEmpty {
		return 0
	}
	now := s.pool.freeNow(node)
	var w int64
	for name, v := range req {
		short := v - (now[name] - s.used[node][name])
		if v <= 0 || short <= 0 {
			continue
		}
		switch {
		case IsDevice(name):
			w += short << 30
		case name == corev1.ResourceMemory:
			w += short >> 20
		default:
			w += short
		}
	}
	return w
}

func asksForDevices(req Resources) bool {
	for name, v := range req {
		if v > 0 && IsDevice(name) {
			return true
		}
	}
	return false
}

// BestNode is where the scheduler would put the pod among nodes, or "" when none fits.
func (s *Simulation) BestNode(pod *corev1.Pod, req Resources, nodes []string) string {
	return s.bestNode(pod, req, nodes, false)
}

// bestNode is BestNode; more says that another pod of the same kind is placed next on the
// same nodes, so a ranking kept for it pays.
func (s *Simulation) bestNode(pod *corev1.Pod, req Resources, nodes []string, more bool) string {
	if len(nodes) == 0 {
		return ""
	}
	s.chosen = nil
	dra := HasClaims(pod) && s.pool.devices() != nil
	eligible := s.pool.eligibleFor(pod)
	if !asksForDevices(req) && !s.pool.asIfEmpty && !dra {
		// Next fit: every such node is as good as another to the accelerator score.
		n := len(nodes)
		start := s.cursor % n
		for k := 0; k < n; k++ {
			node := nodes[(start+k)%n]
			if s.Fits(node, req) && eligible(node) {
				s.cursor = (start + k) % n
				return node
			}
		}
		return ""
	}
	if !dra {
		// Without claims the ranking depends only on the pod's kind and the nodes' state:
		// kept for the next pod of the kind, only the nodes changed since are ranked again.
		if r := s.rankFor(pod, eligible, req, nodes, more); r != nil {
			return r.best(s, pod, eligible, req)
		}
	}
	best, bestLeft := "", Leftover{}
	var bestDevices *podDevices
	for _, node := range nodes {
		l, got, ok := s.leftover(pod, eligible, req, node)
		if !ok {
			continue
		}
		if best == "" || l.Less(bestLeft) {
			best, bestLeft, bestDevices = node, l, got
		}
	}
	s.chosen = bestDevices
	return best
}

// leftover ranks the node for the pod after the simulation's placements, with the devices
// its claims would get there; ok=false when the pod does not fit the node.
func (s *Simulation) leftover(pod *corev1.Pod, eligible func(string) bool, req Resources, node string) (Leftover, *podDevices, bool) {
	if !s.Fits(node, req) || !eligible(node) {
		return Leftover{}, nil, false
	}
	got, ok := s.fitDevices(pod, node)
	if !ok {
		return Leftover{}, nil, false
	}
	l := Leftover{Name: node, Wait: s.wait(node, req), MilliCPU: s.FreeAfter(node, corev1.ResourceCPU) - req[corev1.ResourceCPU]}
	if got != nil {
		// DRA devices left free on the node count as a device plugin's GPUs do, and a
		// reservation prefers devices free today.
		l.Devices += s.pool.devices().freeDevices(node, s.taken[node]) - int64(len(got.devices))
		if s.pool.asIfEmpty {
			l.Wait += s.pool.devices().busyNow(got.devices) << 30
		}
	}
	for name, v := range s.pool.Free(node) {
		if IsDevice(name) {
			l.Devices += v - s.used[node][name] - req[name]
			if req[name] > 0 {
				l.Cost = s.pool.Cost(node)
			}
		}
	}
	return l, got, true
}

// PlaceUnit places every pod of a unit on nodes, or none; it returns each pod's node.
func (s *Simulation) PlaceUnit(pods []*corev1.Pod, reqs []Resources, nodes []string) ([]string, bool) {
	took := make([]string, 0, len(pods))
	shapes := make([]string, len(pods))
	for i, p := range pods {
		shapes[i] = shapeOf(p)
	}
	for i, p := range pods {
		// Whether another pod of the kind follows (a unit's workers follow their entry;
		// the scan stops at the first alike).
		more := false
		for j := i + 1; j < len(pods) && !more; j++ {
			more = shapes[j] == shapes[i] && maps.Equal(reqs[j], reqs[i])
		}
		n := s.bestNode(p, reqs[i], nodes, more)
		if n == "" {
			for j, t := range took {
				s.give(t, reqs[j])
				s.giveDevices(pods[j], t)
			}
			return nil, false
		}
		s.take(n, reqs[i])
		s.takeDevices(p, n, s.chosen)
		took = append(took, n)
	}
	return took, true
}

// Rank sums what the simulation leaves free over nodes, named name, to compare domains.
func (s *Simulation) Rank(name string, nodes []string) Leftover {
	l := Leftover{Name: name}
	for _, n := range nodes {
		free := s.pool.Free(n)
		for res, v := range free {
			if IsDevice(res) {
				l.Devices += v - s.used[n][res]
				l.Cost += s.used[n][res] * s.pool.Cost(n)
			}
		}
		if devs := s.pool.devices(); devs != nil {
			l.Devices += devs.freeDevices(n, s.taken[n])
		}
		l.MilliCPU += free[corev1.ResourceCPU] - s.used[n][corev1.ResourceCPU]
		if s.pool.asIfEmpty {
			for res, v := range s.used[n] {
				if short := v - s.pool.freeNow(n)[res]; short > 0 && IsDevice(res) {
					l.Wait += short
				}
			}
		}
	}
	return l
}

// candidates are the nodes the pod fits after the simulation's placements, best first (as
// BestNode ranks them).
func (s *Simulation) candidates(pod *corev1.Pod, req Resources, nodes []string) []string {
	type cand struct {
		node string
		l    Leftover
	}
	var cs []cand
	eligible := s.pool.eligibleFor(pod)
	for _, node := range nodes {
		if l, _, ok := s.leftover(pod, eligible, req, node); ok {
			cs = append(cs, cand{node, l})
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].l.Less(cs[j].l) })
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.node
	}
	return out
}

package placement

import (
	corev1 "k8s.io/api/core/v1"
)

// Simulation places pods on a Pool without touching it: what it used is kept per node.
// Pods that ask for accelerators go to the node that keeps the most whole nodes free (the
// fewest devices left, cheapest class first), as the accelerator plugin scores; other pods
// go to the next node that fits, so planning a thousand-pod gang stays linear in its size.
type Simulation struct {
	pool   *Pool
	used   map[string]Resources
	cursor int
}

// Simulate starts an empty simulation on the pool.
func (p *Pool) Simulate() *Simulation {
	return &Simulation{pool: p, used: map[string]Resources{}}
}

// Pool is the pool the simulation places on.
func (s *Simulation) Pool() *Pool { return s.pool }

// Clone copies the simulation, to try a placement and keep it only if it works.
func (s *Simulation) Clone() *Simulation {
	c := &Simulation{pool: s.pool, used: make(map[string]Resources, len(s.used)), cursor: s.cursor}
	for n, u := range s.used {
		m := make(Resources, len(u))
		for k, v := range u {
			m[k] = v
		}
		c.used[n] = m
	}
	return c
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
	u := s.used[node]
	if u == nil {
		u = Resources{}
		s.used[node] = u
	}
	addTo(u, req, 1)
}

func (s *Simulation) give(node string, req Resources) { addTo(s.used[node], req, -1) }

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
	if len(nodes) == 0 {
		return ""
	}
	if !asksForDevices(req) && !s.pool.asIfEmpty {
		// Next fit: every such node is as good as another to the accelerator score.
		n := len(nodes)
		start := s.cursor % n
		for k := 0; k < n; k++ {
			node := nodes[(start+k)%n]
			if s.Fits(node, req) && s.pool.Eligible(pod, node) {
				s.cursor = (start + k) % n
				return node
			}
		}
		return ""
	}
	best, bestLeft := "", Leftover{}
	for _, node := range nodes {
		if !s.Fits(node, req) || !s.pool.Eligible(pod, node) {
			continue
		}
		l := Leftover{Name: node, Wait: s.wait(node, req), MilliCPU: s.FreeAfter(node, corev1.ResourceCPU) - req[corev1.ResourceCPU]}
		for name, v := range s.pool.Free(node) {
			if IsDevice(name) {
				l.Devices += v - s.used[node][name] - req[name]
				if req[name] > 0 {
					l.Cost = s.pool.Cost(node)
				}
			}
		}
		if best == "" || l.Less(bestLeft) {
			best, bestLeft = node, l
		}
	}
	return best
}

// PlaceUnit places every pod of a unit on nodes, or none; it returns each pod's node.
func (s *Simulation) PlaceUnit(pods []*corev1.Pod, reqs []Resources, nodes []string) ([]string, bool) {
	took := make([]string, 0, len(pods))
	for i, p := range pods {
		n := s.BestNode(p, reqs[i], nodes)
		if n == "" {
			for j, t := range took {
				s.give(t, reqs[j])
			}
			return nil, false
		}
		s.take(n, reqs[i])
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

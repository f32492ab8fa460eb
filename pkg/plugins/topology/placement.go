package topology

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// This file chooses where a whole group goes, before its first pod binds. It holds no
// framework state: the plugin hands it the fabric, the nodes' free capacity and the group's
// units, so the rules are unit-tested on their own.

// constraint is a network-topology requirement (the group's, or a subgroup's).
type constraint struct {
	hard bool
	// limit is the highest tier the pods may span; 0 means any (soft mode without a
	// limit, or no constraint at all).
	limit int
}

// unitToPlace is a subgroup or a pod of the group that must be placed whole.
type unitToPlace struct {
	key   string
	pods  []*corev1.Pod
	reqs  []map[corev1.ResourceName]int64
	sub   *constraint // the subgroup's own topology, if any
	along []string    // nodes of the unit's siblings already placed
}

// nodePool is the free capacity of nodes and whether a pod may run on them, as the
// scheduler's Filter plugins would judge it (resources, node affinity, taints, accelerator
// requirements).
type nodePool struct {
	free     func(node string) map[corev1.ResourceName]int64
	eligible func(pod *corev1.Pod, node string) bool
	// cost is the node's accelerator class cost per device (the accelerator plugin's
	// classCosts); nil means every class costs the same.
	cost func(node string) int64
}

func (p nodePool) costOf(node string) int64 {
	if p.cost == nil {
		return 0
	}
	return p.cost(node)
}

// target is where a group (or subgroup) is meant to go: a network domain, a spread domain
// or, with nothing else, a set of nodes.
type target struct {
	name  string // for messages and events: "leaf-3", "zone-a"
	tier  int    // the domain's tier, 0 for a spread domain
	nodes sets.Set[string]
	list  []string // nodes, sorted: the order the simulation tries them in
}

func newTarget(name string, tier int, nodes []string) *target {
	sort.Strings(nodes)
	return &target{name: name, tier: tier, nodes: sets.New(nodes...), list: nodes}
}

// plan is the outcome of choosing: the group's target and its subgroups' targets.
type plan struct {
	group *target
	sub   map[string]*target
}

// choice is everything chooseDomain needs.
type choice struct {
	fabric *Fabric
	group  constraint
	units  []unitToPlace
	placed []string // nodes that hold the group's placed pods
	// zones partition the nodes the spread constraints allow, most preferred first; nil
	// means no spread constraint.
	zones []*target
	// avoid are domains an earlier attempt of this group failed in; they are tried last.
	avoid sets.Set[string]
	pool  nodePool
}

// chooseDomain picks the lowest tier whose domain can hold every unit, best packed, within
// the group's limit (hard) or anywhere (soft), and inside one spread zone. The returned
// message explains a refusal.
func chooseDomain(c *choice) (*plan, string) {
	zones := c.zones
	if zones == nil {
		zones = []*target{nil}
	}
	top := c.fabric.Top()
	limit := top
	if c.group.hard && c.group.limit > 0 && c.group.limit < top {
		limit = c.group.limit
	}
	var best *attempt
	// Domains an earlier attempt failed in are tried only when no other domain holds the group.
	passes := []bool{false}
	if c.avoid.Len() > 0 {
		passes = []bool{true, false}
	}
	for _, avoiding := range passes {
		for _, tier := range c.fabric.Tiers {
			if tier > limit {
				break
			}
			for _, zone := range zones {
				var winner *attempt
				for _, d := range c.fabric.Domains[tier] {
					if avoiding && c.avoid.Has(d.Name) {
						continue
					}
					t := restrict(d, zone)
					if t == nil || !containsAll(t.nodes, c.placed) {
						continue
					}
					a := c.simulate(t)
					if a.ok && (winner == nil || a.leftover.less(winner.leftover)) {
						winner = a
					}
					if !a.ok && tier == limit && (best == nil || a.placedPods > best.placedPods) {
						best = a
					}
				}
				if winner != nil {
					return winner.plan(), ""
				}
			}
		}
	}
	if !c.group.hard || c.fabric.Top() == 0 {
		// Soft: no domain holds the group, so it goes wherever it fits, still in one zone.
		for _, zone := range zones {
			if zone == nil {
				// Anywhere: no target, so neither a confinement nor a preference.
				return &plan{}, ""
			}
			if !containsAll(zone.nodes, c.placed) {
				continue
			}
			if a := c.simulate(zone); a.ok {
				return a.plan(), ""
			}
		}
		if c.zones != nil {
			return nil, "no spread domain allowed by the ModelServing's topologySpreadConstraints can hold the group"
		}
		return &plan{}, "" // nothing fits anywhere: leave it to Filter and the gang plugin
	}
	tierName := c.fabric.TierName(limit)
	pods := countPods(c.units)
	msg := fmt.Sprintf("no %s (tier %d) can hold the group's %d pods", tierName, limit, pods)
	if len(c.placed) > 0 {
		msg = fmt.Sprintf("no %s (tier %d) around the group's placed pods can hold its %d other pods", tierName, limit, pods)
	}
	if best != nil {
		msg += fmt.Sprintf("; the best, %s, holds %d", best.where.name, best.placedPods)
	}
	return nil, msg
}

// restrict is the part of domain d inside zone, or nil when they do not meet. Without a
// zone it is the domain itself, sharing the fabric's node set (targets are never modified).
func restrict(d *Domain, zone *target) *target {
	if zone == nil {
		return &target{name: d.Name, tier: d.Tier, nodes: d.set, list: d.Nodes}
	}
	var in []string
	for _, n := range d.Nodes {
		if zone.nodes.Has(n) {
			in = append(in, n)
		}
	}
	if len(in) == 0 {
		return nil
	}
	return newTarget(d.Name, d.Tier, in)
}

func countPods(units []unitToPlace) int {
	n := 0
	for _, u := range units {
		n += len(u.pods)
	}
	return n
}

func containsAll(s sets.Set[string], nodes []string) bool {
	for _, n := range nodes {
		if !s.Has(n) {
			return false
		}
	}
	return true
}

// attempt is one simulated placement of the group into a target.
type attempt struct {
	ok         bool
	where      *target
	sub        map[string]*target
	placedPods int
	leftover   leftover
}

func (a *attempt) plan() *plan { return &plan{group: a.where, sub: a.sub} }

// leftover ranks placements: the cheapest accelerator class first (as the accelerator
// plugin scores), then the tightest fit, so that emptier domains and nodes stay free for
// larger groups.
type leftover struct {
	cost     int64 // class cost of the devices used
	devices  int64 // accelerator devices (extended resources) left free
	milliCPU int64
	name     string
}

func (l leftover) less(o leftover) bool {
	if l.cost != o.cost {
		return l.cost < o.cost
	}
	if l.devices != o.devices {
		return l.devices < o.devices
	}
	if l.milliCPU != o.milliCPU {
		return l.milliCPU < o.milliCPU
	}
	return l.name < o.name
}

// simulation tracks what the simulated placement used, per node.
type simulation struct {
	pool nodePool
	used map[string]map[corev1.ResourceName]int64
}

func (s *simulation) freeAfter(node string, name corev1.ResourceName) int64 {
	return s.pool.free(node)[name] - s.used[node][name]
}

func (s *simulation) fits(node string, req map[corev1.ResourceName]int64) bool {
	free := s.pool.free(node)
	if free == nil {
		return false
	}
	for name, v := range req {
		if v > 0 && free[name]-s.used[node][name] < v {
			return false
		}
	}
	return true
}

func (s *simulation) take(node string, req map[corev1.ResourceName]int64) {
	u := s.used[node]
	if u == nil {
		u = map[corev1.ResourceName]int64{}
		s.used[node] = u
	}
	for name, v := range req {
		u[name] += v
	}
}

func (s *simulation) give(node string, req map[corev1.ResourceName]int64) {
	for name, v := range req {
		s.used[node][name] -= v
	}
}

// bestNode is where the scheduler would put the pod: the fitting node with the fewest
// accelerator devices left (the accelerator plugin packs the same way), then the least CPU.
func (s *simulation) bestNode(pod *corev1.Pod, req map[corev1.ResourceName]int64, nodes []string) string {
	best, bestLeft := "", leftover{}
	for _, n := range nodes {
		if !s.fits(n, req) || !s.pool.eligible(pod, n) {
			continue
		}
		l := leftover{name: n, milliCPU: s.freeAfter(n, corev1.ResourceCPU) - req[corev1.ResourceCPU]}
		for name, v := range s.pool.free(n) {
			if isDevice(name) {
				l.devices += v - s.used[n][name] - req[name]
				if req[name] > 0 {
					l.cost = s.pool.costOf(n)
				}
			}
		}
		if best == "" || l.less(bestLeft) {
			best, bestLeft = n, l
		}
	}
	return best
}

// placeUnit places all pods of a unit on nodes, or none.
func (s *simulation) placeUnit(u *unitToPlace, nodes []string) bool {
	var took []string
	for i, p := range u.pods {
		n := s.bestNode(p, u.reqs[i], nodes)
		if n == "" {
			for j, t := range took {
				s.give(t, u.reqs[j])
			}
			return false
		}
		s.take(n, u.reqs[i])
		took = append(took, n)
	}
	return true
}

// simulate places the units into t in queue order, each subgroup with a topology of its own
// inside the lowest sub-domain of t that holds it.
func (c *choice) simulate(t *target) *attempt {
	s := &simulation{pool: c.pool, used: map[string]map[corev1.ResourceName]int64{}}
	nodes := t.list
	a := &attempt{where: t, sub: map[string]*target{}}
	for i := range c.units {
		u := &c.units[i]
		if u.sub != nil {
			sub := c.placeSubgroup(s, u, t)
			if sub == nil {
				return a
			}
			a.sub[u.key] = sub
		} else if !s.placeUnit(u, nodes) {
			return a
		}
		a.placedPods += len(u.pods)
	}
	a.ok = true
	a.leftover.name = t.name
	for _, n := range nodes {
		free := c.pool.free(n)
		for name, v := range free {
			if isDevice(name) {
				a.leftover.devices += v - s.used[n][name]
				a.leftover.cost += s.used[n][name] * c.pool.costOf(n)
			}
		}
		a.leftover.milliCPU += free[corev1.ResourceCPU] - s.used[n][corev1.ResourceCPU]
	}
	return a
}

// placeSubgroup finds the lowest, tightest domain inside t that holds the subgroup (and its
// placed siblings), and places it there. Soft subgroups fall back to anywhere in t.
func (c *choice) placeSubgroup(s *simulation, u *unitToPlace, t *target) *target {
	limit := c.fabric.Top()
	if u.sub.hard && u.sub.limit > 0 {
		limit = u.sub.limit
	}
	for _, tier := range c.fabric.Tiers {
		if tier > limit || (t.tier > 0 && tier > t.tier) {
			break
		}
		var best *target
		var bestLeft leftover
		for _, d := range c.fabric.Domains[tier] {
			sub := restrict(d, t)
			if sub == nil || !containsAll(sub.nodes, u.along) {
				continue
			}
			trial := &simulation{pool: s.pool, used: cloneUsed(s.used)}
			if !trial.placeUnit(u, sub.list) {
				continue
			}
			l := leftover{name: sub.name}
			for n := range sub.nodes {
				for name, v := range s.pool.free(n) {
					if isDevice(name) {
						l.devices += v - trial.used[n][name]
					}
				}
			}
			if best == nil || l.less(bestLeft) {
				best, bestLeft = sub, l
			}
		}
		if best != nil {
			s.placeUnit(u, best.list)
			return best
		}
	}
	if !u.sub.hard && s.placeUnit(u, t.list) {
		return t
	}
	return nil
}

func cloneUsed(in map[string]map[corev1.ResourceName]int64) map[string]map[corev1.ResourceName]int64 {
	out := make(map[string]map[corev1.ResourceName]int64, len(in))
	for n, m := range in {
		c := make(map[corev1.ResourceName]int64, len(m))
		for k, v := range m {
			c[k] = v
		}
		out[n] = c
	}
	return out
}

// isDevice tells accelerators (extended resources such as nvidia.com/gpu) from the
// resources every node has.
func isDevice(name corev1.ResourceName) bool {
	switch name {
	case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage:
		return false
	}
	return strings.Contains(string(name), "/") && !strings.HasPrefix(string(name), "hugepages-")
}

// sortedTargets orders spread zones: fewest groups first, then by name.
func sortedTargets(ts []*target, count map[string]int) {
	sort.SliceStable(ts, func(i, j int) bool {
		if count[ts[i].name] != count[ts[j].name] {
			return count[ts[i].name] < count[ts[j].name]
		}
		return ts[i].name < ts[j].name
	})
}

package topology

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/plugins/placement"
)

// This file is the search behind ChooseDomain (domainchooser.go): it chooses the domain a
// whole group goes to, before its first pod binds, by simulating the group's placement in
// each candidate domain with the shared placement model; subgroups.go places each subgroup
// (role replica) with a topology of its own inside it. It holds no framework state: the
// plugin hands it the fabric, the pool and the group's units, so the rules are unit-tested
// on their own.

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
	name  string // for messages and events: the role replica ("decode-1"), else the pod
	pods  []*corev1.Pod
	reqs  []placement.Resources
	sub   *constraint // the subgroup's own topology, if any
	along []string    // nodes of the unit's siblings already placed
}

// choice is everything chooseDomain needs.
type choice struct {
	fabric *fabric.Fabric
	group  constraint
	units  []unitToPlace
	placed []string // nodes that hold the group's placed pods
	// zones partition the nodes the spread constraints allow, most preferred first; nil
	// means no spread constraint.
	zones []*placement.Target
	// avoid are domains an earlier attempt of this group failed in; they are tried last.
	avoid sets.Set[string]
	pool  *placement.Pool
	// base is where each attempt starts: nil, the pool's free capacity.
	base *placement.Simulation
}

// Reasons a group is refused, the label of berth_topology_groups_refused_total.
const (
	refusedNoDomain         = "no_domain"
	refusedNoSubgroupDomain = "no_subgroup_domain"
)

// chooseDomain picks the lowest tier whose domain can hold every unit, best packed, within
// the group's limit (hard) or anywhere (soft), and inside one spread zone; every subgroup
// with a topology of its own gets a domain inside it (subgroups.go). The plan it returns
// has each pod's node, or no nodes at all for "anywhere"; a nil plan comes with a message
// that explains the refusal and the reason for the metric.
func chooseDomain(c *choice) (p *placement.Plan, msg, reason string) {
	zones := c.zones
	if zones == nil {
		zones = []*placement.Target{nil}
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
					if t == nil || !containsAll(t.Nodes, c.placed) {
						continue
					}
					a := c.simulate(t)
					if a.ok && (winner == nil || a.leftover.Less(winner.leftover)) {
						winner = a
					}
					if !a.ok && tier == limit && (best == nil || a.placedPods > best.placedPods) {
						best = a
					}
				}
				if winner != nil {
					return winner.plan, "", ""
				}
			}
		}
	}
	if !c.group.hard || c.fabric.Top() == 0 {
		// Soft: no domain holds the group, so it goes wherever it fits, still in one zone.
		for _, zone := range zones {
			if zone == nil {
				return c.anywhere()
			}
			if !containsAll(zone.Nodes, c.placed) {
				continue
			}
			if a := c.simulate(zone); a.ok {
				return a.plan, "", ""
			}
		}
		if c.zones != nil {
			return nil, "no spread domain allowed by the ModelServing's topologySpreadConstraints can hold the group", refusedNoDomain
		}
		return c.anywhere()
	}
	tierName := c.fabric.TierName(limit)
	pods := countPods(c.units)
	msg = fmt.Sprintf("no %s (tier %d) can hold the group's %d pods", tierName, limit, pods)
	if len(c.placed) > 0 {
		msg = fmt.Sprintf("no %s (tier %d) around the group's placed pods can hold its %d other pods", tierName, limit, pods)
	}
	if best == nil || !best.noSubDomain {
		// A subgroup's domain is what is missing otherwise: its own words follow.
		msg += c.deviceShortfall(limit, zones)
	}
	reason = refusedNoDomain
	if best != nil {
		msg += fmt.Sprintf("; the best, %s, holds %d", best.where.Name, best.placedPods)
		if best.noSubDomain {
			// The capacity may be there, but not in one domain of a subgroup's tier: say so,
			// or the user looks for GPUs when the answer is the role's topology.
			msg += fmt.Sprintf(" (no %s in it can hold %s)", c.subTierName(best.stuck), best.stuck.describe())
			reason = refusedNoSubgroupDomain
		}
	}
	return nil, msg, reason
}

// restrict is the part of domain d inside zone, or nil when they do not meet. Without a
// zone it is the domain itself, sharing the fabric's node set (targets are never modified).
func restrict(d *fabric.Domain, zone *placement.Target) *placement.Target {
	if zone == nil {
		return &placement.Target{Name: d.Name, Tier: d.Tier, Nodes: d.NodeSet(), List: d.Nodes}
	}
	var in []string
	for _, n := range d.Nodes {
		if zone.Nodes.Has(n) {
			in = append(in, n)
		}
	}
	if len(in) == 0 {
		return nil
	}
	return placement.NewTarget(d.Name, d.Tier, in)
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
	where      *placement.Target
	plan       *placement.Plan
	placedPods int
	leftover   placement.Leftover
	// stuck is the unit that did not fit; noSubDomain says it is a subgroup that no domain
	// of its tier inside where could hold.
	stuck       *unitToPlace
	noSubDomain bool
}

// simulate places the units into t, each subgroup with a topology of its own inside the
// lowest sub-domain of t that holds it.
func (c *choice) simulate(t *placement.Target) *attempt {
	s := c.pool.Simulate()
	if c.base != nil {
		s = c.base.Clone()
	}
	a := &attempt{where: t, plan: &placement.Plan{Domain: t, Sub: map[string]*placement.Target{}}}
	for i := range c.units {
		u := &c.units[i]
		nodes := t.List
		if u.sub != nil {
			sub := c.subDomain(s, u, t)
			if sub == nil {
				a.stuck, a.noSubDomain = u, true
				return a
			}
			a.plan.Sub[u.key] = sub
			nodes = sub.List
		}
		got, ok := s.PlaceUnit(u.pods, u.reqs, nodes)
		if !ok {
			a.stuck = u
			return a
		}
		for j, p := range u.pods {
			a.plan.Assign(p, u.reqs[j], got[j])
		}
		a.placedPods += len(u.pods)
	}
	a.ok = true
	a.leftover = s.Rank(t.Name, t.List)
	return a
}

// deviceShortfall says, for a group that asks for accelerators, how many it needs in one
// domain of the tier and how many the freest domain has: ": they need 8 nvidia.com/gpu in
// one NVLink domain (nvidia.com/gpu.clique), the largest free one has 6". Without it, a
// user reads "no domain can hold" and cannot tell a full cluster from a fragmented one.
func (c *choice) deviceShortfall(tier int, zones []*placement.Target) string {
	need := placement.Resources{}
	for _, u := range c.units {
		for _, r := range u.reqs {
			for name, v := range r {
				if placement.IsDevice(name) {
					need[name] += v
				}
			}
		}
	}
	if len(need) == 0 {
		return ""
	}
	names := make([]string, 0, len(need))
	for name := range need {
		names = append(names, string(name))
	}
	sort.Strings(names)
	res := corev1.ResourceName(names[0]) // a group asks for one kind of accelerator
	largest := int64(0)
	for _, d := range c.fabric.Domains[tier] {
		for _, zone := range zones {
			t := restrict(d, zone)
			if t == nil || !containsAll(t.Nodes, c.placed) {
				continue
			}
			free := int64(0)
			for _, n := range t.List {
				free += c.pool.Free(n)[res]
			}
			largest = max(largest, free)
		}
	}
	noun := c.fabric.TierName(tier)
	if c.fabric.IsNVLink(tier) {
		noun = "NVLink domain"
	}
	if label := c.fabric.TierLabel(tier); label != "" {
		noun += " (" + label + ")"
	}
	return fmt.Sprintf(": they need %d %s in one %s, the largest free one has %d", need[res], res, noun, largest)
}

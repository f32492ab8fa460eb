package topology

import (
	"fmt"
	"slices"
	"strings"

	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/plugins/placement"
)

// This file is the per-role rule: a PodGroup's spec.subGroupPolicy[].networkTopology (how
// berth-controller writes Kthena's rolePolicy, and what Volcano reads per subgroup). Every
// instance of such a subgroup, the pods matching its labelSelector with the same
// matchLabelKeys values (for a ModelServing: one role replica, its entry and workers), is
// placed inside one domain of its tier: hard never outside it, soft there whenever one
// has room. The subgroup's domain lies inside the group's own domain when the group asks
// for one, so a group with a spine policy and a leaf rolePolicy keeps every replica in a
// leaf and all of them in one spine. Volcano reads the fields the same way: a subgroup
// searches the tiers of its job's domain lowest first, and its soft mode is bounded by the
// job's domain.

// anywhereName names the target of a group placed over every node (no domain holds it, or
// it asks for none) while its subgroups keep domains of their own.
const anywhereName = "anywhere"

// subDomain finds where a subgroup goes inside the group's target t: the lowest tier first
// and, within a tier, the domain that leaves the least free after it (so emptier domains
// stay whole for larger replicas), among those holding the subgroup and its placed pods.
// Hard: no tier above the subgroup's own, or nil. Soft: up to t's tier, then t itself.
func (c *choice) subDomain(s *placement.Simulation, u *unitToPlace, t *placement.Target) *placement.Target {
	limit := c.fabric.Top()
	if u.sub.hard && u.sub.limit > 0 {
		limit = u.sub.limit
	}
	for _, tier := range c.fabric.Tiers {
		if tier > limit || (t.Tier > 0 && tier > t.Tier) {
			break
		}
		var best *placement.Target
		var bestLeft placement.Leftover
		for _, d := range c.fabric.Domains[tier] {
			sub := restrict(d, t)
			if sub == nil || !containsAll(sub.Nodes, u.along) {
				continue
			}
			trial := s.Clone()
			if _, ok := trial.PlaceUnit(u.pods, u.reqs, sub.List); !ok {
				continue
			}
			if l := trial.Rank(sub.Name, sub.List); best == nil || l.Less(bestLeft) {
				best, bestLeft = sub, l
			}
		}
		if best != nil {
			return best
		}
	}
	if !u.sub.hard {
		return t
	}
	return nil
}

// hasSubgroupTopology says whether any unit to place asks for a domain of its own.
func (c *choice) hasSubgroupTopology() bool {
	for i := range c.units {
		if c.units[i].sub != nil {
			return true
		}
	}
	return false
}

// anywhere is the plan of a group that no domain holds (soft) or that asks for no domain.
// Without subgroup topologies it has no nodes, and the placement model places the units
// over every node. With them, each subgroup still needs a domain of its own, which only
// this search knows, so the group is simulated over every node of the pool: the plan has
// the pods' nodes and the subgroups' domains, and no group domain.
func (c *choice) anywhere() (p *placement.Plan, msg, reason string) {
	if !c.hasSubgroupTopology() {
		return &placement.Plan{}, "", ""
	}
	a := c.simulate(placement.NewTarget(anywhereName, 0, slices.Clone(c.pool.Nodes())))
	switch {
	case a.ok:
		a.plan.Domain = nil
		return a.plan, "", ""
	case a.noSubDomain:
		return nil, fmt.Sprintf("no %s can hold %s", c.subTierName(a.stuck), a.stuck.describe()), refusedNoSubgroupDomain
	default:
		return nil, fmt.Sprintf("%s does not fit in the free capacity beside the rest of the group", a.stuck.describe()), refusedNoDomain
	}
}

// subTierName names the tier a subgroup asks for, for messages.
func (c *choice) subTierName(u *unitToPlace) string {
	if u.sub == nil || u.sub.limit <= 0 {
		return "domain"
	}
	return c.fabric.TierName(u.sub.limit)
}

// describe is the unit for messages: "decode-1 (2 pods)".
func (u *unitToPlace) describe() string {
	return fmt.Sprintf("%s (%d pods)", u.name, len(u.pods))
}

// subgroupChoice is where one subgroup with a topology of its own was planned.
type subgroupChoice struct {
	unit   string // the role replica, e.g. "decode-1"
	tier   string // the tier's name of its domain, or "anywhere"
	domain string
	// asked is the tier's name the subgroup asked for; inTier is false only for a soft
	// subgroup that no domain of that tier could hold.
	asked  string
	inTier bool
	// fresh: none of the subgroup's pods was placed before; its domain is a new choice.
	fresh bool
}

// subgroupChoices lists where the plan puts each subgroup with a topology of its own.
func subgroupChoices(f *fabric.Fabric, units []unitToPlace, p *placement.Plan) []subgroupChoice {
	var out []subgroupChoice
	for i := range units {
		u := &units[i]
		t := p.Sub[u.key]
		if u.sub == nil || t == nil {
			continue
		}
		ch := subgroupChoice{unit: u.name, tier: anywhereName, domain: t.Name, inTier: true, fresh: len(u.along) == 0}
		if t.Tier > 0 {
			ch.tier = f.TierName(t.Tier)
		}
		if u.sub.limit > 0 {
			ch.asked = f.TierName(u.sub.limit)
			ch.inTier = t.Tier > 0 && t.Tier <= u.sub.limit
		}
		out = append(out, ch)
	}
	return out
}

// maxSubgroupsInEvent bounds the event's list: a large group's note stays readable.
const maxSubgroupsInEvent = 8

// describeSubgroups is the event's account of the subgroups' domains, e.g. "; each role
// replica in a domain of its own: decode-0 in leaf l10, prefill-0 across spine s1 (no leaf
// could hold it)", or "" when no subgroup has a topology.
func describeSubgroups(choices []subgroupChoice) string {
	if len(choices) == 0 {
		return ""
	}
	parts := make([]string, 0, min(len(choices), maxSubgroupsInEvent)+1)
	for i, ch := range choices {
		if i == maxSubgroupsInEvent {
			parts = append(parts, fmt.Sprintf("and %d more", len(choices)-i))
			break
		}
		where := fmt.Sprintf("%s in %s %s", ch.unit, ch.tier, ch.domain)
		if ch.tier == anywhereName {
			where = ch.unit + " anywhere"
		}
		if !ch.inTier {
			where = fmt.Sprintf("%s across %s %s (no %s could hold it)", ch.unit, ch.tier, ch.domain, ch.asked)
			if ch.tier == anywhereName {
				where = fmt.Sprintf("%s anywhere (no %s could hold it)", ch.unit, ch.asked)
			}
		}
		parts = append(parts, where)
	}
	return "; each role replica in a domain of its own: " + strings.Join(parts, ", ")
}

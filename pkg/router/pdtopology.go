package router

import (
	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/router/pick"
	"github.com/berth-sh/berth/pkg/router/view"
)

// Topology-aware prefill/decode pairing. Where a prefill endpoint may hand its KV to decode
// endpoints on other nodes (every decode of its PD group, and a pdGroup whose groupKey has
// one value across ServingGroups makes that group span them), the handoff costs less the
// closer the decode sits: the same node, then the same NVLink domain, then the same leaf,
// then across the spine. choose asks nearDecodes to narrow the decode candidates to the
// nearest tier that has room, and the picker then chooses by load within it.

// kvFull is the KV cache usage at which a decode engine counts as full: past it, new
// sequences wait for blocks to free.
const kvFull = 0.9

// intake is how many waiting requests a decode engine may show and still count as having
// room: a handoff just received waits for the engine's next step (and, with a pull
// connector, for its KV), so an engine taking handoffs shows one now and then between steps
// without queueing anything. Counting that as full moved single requests across the spine
// (seen under -race, where steps are slower). A real queue shows two or more.
const intake = 1

// hasRoom says whether a decode engine can take one more sequence without queueing it, by
// its last scrape: no more than intake waits and its KV cache is not full. An engine never
// scraped counts as having room (as the picker treats it).
func hasRoom(c pick.Candidate) bool {
	return c.Stats.Waiting <= intake && c.Stats.KVUsage < kvFull
}

// nearDecodes returns the decode candidates of the nearest tier to prefill p (the same
// node, then tier 1, 2, …; see fabric.Apart) in which at least one candidate has room, and
// that tier's distance. The rule: a queued request waits a whole decode step or more, which
// costs more than moving the KV one tier further (microseconds to milliseconds), so
// nearness wins only while a near decode can take the request at once; when none can, the
// farther tiers are tried in turn, and when no decode has room anywhere every candidate is
// returned and the picker balances load as it does without a fabric. Within the tier
// chosen, the picker still picks by load, so a near decode busier than another near one
// is not chosen blindly.
//
// Without a fabric, or with p on a node the fabric does not know, cands come back
// unchanged (distance fabric.Far): the pairing is then what it was before topology.
func nearDecodes(f *fabric.Fabric, p *view.Endpoint, cands []pick.Candidate) ([]pick.Candidate, int) {
	if f == nil || len(cands) < 2 || p.Node == "" || !f.Knows(p.Node) {
		return cands, fabric.Far
	}
	best := fabric.Far
	var near []pick.Candidate
	for _, c := range cands {
		if !hasRoom(c) {
			continue
		}
		switch d := f.Apart(p.Node, c.Endpoint.Node); {
		case d < best:
			best, near = d, append(near[:0], c)
		case d == best:
			near = append(near, c)
		}
	}
	if len(near) == 0 {
		return cands, fabric.Far
	}
	// With best Far, near is every decode with room, none sharing a tier with p.
	return near, best
}

// tierLabel names a pairing's distance for the berth_router_pd_pairs_total metric: "node",
// the tier's name ("nvlink", "leaf"), or "far"; "unknown" without a fabric that knows both.
func tierLabel(f *fabric.Fabric, p, d *view.Endpoint) string {
	if f == nil || !f.Knows(p.Node) || !f.Knows(d.Node) {
		if p.Node != "" && p.Node == d.Node {
			return "node"
		}
		return "unknown"
	}
	switch t := f.Apart(p.Node, d.Node); t {
	case 0:
		return "node"
	case fabric.Far:
		return "far"
	default:
		return f.TierName(t)
	}
}

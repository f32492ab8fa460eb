package main

import (
	"slices"
)

// The stream's bounds under a hard one-NVLink-domain rule, worked out by the bench alone (no
// scheduler): how far any scheduler that keeps every group inside one domain can get, and
// how far best fit gets. They say what "GPUs allocated at the first failure" can be on a
// given stream, since groups of whole nodes arriving one at a time cannot fill 18-node
// domains to the last node whatever the scheduler does.

// domainSizes is the number of nodes of each NVLink domain, or nil when the fabric has none
// or a pod of the stream does not take a whole node (then a node's room depends on the other
// groups on it, and the bounds below do not apply).
func (f *fabric) domainSizes(groups []groupSpec) []int {
	if !f.hasDomains() {
		return nil
	}
	for _, g := range groups {
		if g.gpus != f.gpusPerNode {
			return nil
		}
	}
	count := map[string]int{}
	for _, n := range f.nodes {
		count[f.domain[n]]++
	}
	sizes := make([]int, 0, len(count))
	for _, c := range count {
		sizes = append(sizes, c)
	}
	slices.Sort(sizes)
	return sizes
}

// bounds are the ceiling and best fit of a stream on this fabric; ok is false where they do
// not apply.
func (f *fabric) bounds(groups []groupSpec) (ceil, fit streamBound, ok bool) {
	domains := f.domainSizes(groups)
	if domains == nil {
		return ceil, fit, false
	}
	return ceiling(domains, groups, f.gpusPerNode), bestFit(domains, groups, f.gpusPerNode), true
}

// streamBound is where a policy's first failure falls on a stream: the index of the first group it
// cannot place (len(groups) when it places them all) and the GPUs allocated then.
type streamBound struct {
	first int
	gpus  int
	// exact: the search finished; false when it ran out of steps, and first is then a lower
	// bound of the ceiling (the prefix it could not decide counted as not packable).
	exact bool
}

// ceilingSteps bounds the exhaustive search per prefix; the streams the bench draws (at most
// a few dozen groups before the first failure) need far fewer.
const ceilingSteps = 2_000_000

// ceiling is the best any one-domain scheduler can do on the stream, whatever the order in
// which it filled domains, even knowing the stream in advance: the first group k for which
// groups 0..k together do not pack into the domains (an exhaustive bin-packing search), and
// the GPUs of groups 0..k-1. Every such scheduler fails at k or before.
func ceiling(domains []int, groups []groupSpec, gpusPerPod int) streamBound {
	b := streamBound{exact: true}
	room, pods := 0, 0
	for _, d := range domains {
		room += d
	}
	for k := range groups {
		if pods += groups[k].pods; pods > room { // more pods than nodes: no search needed
			b.first = k
			return b
		}
		ok, decided := packs(domains, groups[:k+1])
		if !decided {
			b.exact = false
		}
		if !ok {
			b.first = k
			return b
		}
		b.gpus += groups[k].pods * gpusPerPod
	}
	b.first = len(groups)
	return b
}

// packs reports whether the groups (pods of one node each) fit into domains of the given
// node counts, each group inside one domain; decided is false when the search gave up.
func packs(domains []int, groups []groupSpec) (ok, decided bool) {
	items := make([]int, len(groups))
	for i, g := range groups {
		items[i] = g.pods
	}
	slices.SortFunc(items, func(a, b int) int { return b - a }) // largest first prunes soonest
	free := slices.Clone(domains)
	steps := 0
	var place func(i int) bool
	place = func(i int) bool {
		if i == len(items) {
			return true
		}
		if steps++; steps > ceilingSteps {
			return false
		}
		tried := map[int]bool{} // domains with the same free room are interchangeable
		for d := range free {
			if free[d] < items[i] || tried[free[d]] {
				continue
			}
			tried[free[d]] = true
			free[d] -= items[i]
			ok := place(i + 1)
			free[d] += items[i]
			if ok {
				return true
			}
		}
		return false
	}
	ok = place(0)
	return ok, steps <= ceilingSteps
}

// bestFit is the online policy berth's scoring aims at: each group, as it arrives, goes into
// the domain with the fewest free nodes that still holds it.
func bestFit(domains []int, groups []groupSpec, gpusPerPod int) streamBound {
	free := slices.Clone(domains)
	b := streamBound{exact: true}
	for k, g := range groups {
		best := -1
		for d := range free {
			if free[d] >= g.pods && (best < 0 || free[d] < free[best]) {
				best = d
			}
		}
		if best < 0 {
			b.first = k
			return b
		}
		free[best] -= g.pods
		b.gpus += g.pods * gpusPerPod
	}
	b.first = len(groups)
	return b
}

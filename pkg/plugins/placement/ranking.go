package placement

import (
	"container/heap"
	"hash/maphash"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// A group's plan ranks every node for every pod (best fit: BestNode), and most pods of a
// group are alike: a role's workers share one template, so their requests and eligibility
// are the same. A ranking of the nodes made for one pod stays right for the next of its
// kind except on the nodes the simulation changed since, which are few: so BestNode keeps
// it, and ranks only those nodes again. On 5000 nodes this turned a 5-pod group's plan from
// five full scans into two (the entry's and the first worker's).

// rankKey is a kind of pod (its eligibility shape and requests) over one list of nodes
// (by content: callers pass domain lists that may share backing arrays).
type rankKey struct {
	shape string
	req   string
	nodes uint64
}

// ranking is the nodes that fitted the pod when it was made, as a heap with the best on
// top, and where the simulation's change log stood then. A node that changed since is
// ranked afresh at every later call, so its entry is dropped once it reaches the top.
type ranking struct {
	order  leftoverHeap
	member map[string]bool // the list's nodes
	at     int             // len(Simulation.changed) when made
}

type leftoverHeap []Leftover

func (h leftoverHeap) Len() int           { return len(h) }
func (h leftoverHeap) Less(i, j int) bool { return h[i].Less(h[j]) }
func (h leftoverHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *leftoverHeap) Push(x any)        { *h = append(*h, x.(Leftover)) }
func (h *leftoverHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

var rankSeed = maphash.MakeSeed()

// keptRankings is how many rankings a simulation keeps, the most recent.
const keptRankings = 4

func newRankKey(pod *corev1.Pod, req Resources, nodes []string) rankKey {
	var h maphash.Hash
	h.SetSeed(rankSeed)
	for _, n := range nodes {
		h.WriteString(n)
		h.WriteByte(0)
	}
	names := make([]string, 0, len(req))
	for name := range req {
		names = append(names, string(name))
	}
	sort.Strings(names)
	var r []byte
	for _, name := range names {
		r = append(r, name...)
		r = append(r, '=')
		r = strconv.AppendInt(r, req[corev1.ResourceName(name)], 10)
		r = append(r, ';')
	}
	return rankKey{shape: shapeOf(pod), req: string(r), nodes: h.Sum64()}
}

// rankFor is the simulation's ranking for pods of pod's kind over nodes. One is made when
// there is none (or so many nodes changed since that ranking them again one by one would
// cost more than a fresh scan) and more pods of the kind follow (more), or one was kept
// for the kind before: a pod of a kind placed once is better served by a plain scan. nil:
// no ranking, scan.
func (s *Simulation) rankFor(pod *corev1.Pod, eligible func(string) bool, req Resources, nodes []string, more bool) *ranking {
	if !more && len(s.ranks) == 0 {
		return nil // nothing kept and nothing to keep: no key to hash
	}
	key := newRankKey(pod, req, nodes)
	r := s.ranks[key]
	if r != nil && len(s.changed)-r.at <= len(nodes)/8 {
		return r
	}
	if r == nil && !more {
		return nil
	}
	r = &ranking{member: make(map[string]bool, len(nodes)), at: len(s.changed)}
	for _, node := range nodes {
		r.member[node] = true
		if l, _, ok := s.leftover(pod, eligible, req, node); ok {
			r.order = append(r.order, l)
		}
	}
	heap.Init(&r.order)
	if s.ranks == nil {
		s.ranks = map[rankKey]*ranking{}
	}
	if _, ok := s.ranks[key]; !ok {
		// Only the last few kinds are kept: a ranking serves the pods placed right after
		// it (a unit's workers after its entry), and one simulation may place pods of many
		// kinds one at a time (the capacity count's pending pods), each ranking as large as
		// the node list.
		if len(s.rankKeys) == keptRankings {
			delete(s.ranks, s.rankKeys[0])
			s.rankKeys = s.rankKeys[1:]
		}
		s.rankKeys = append(s.rankKeys, key)
	}
	s.ranks[key] = r
	return r
}

// best is the best node for the pod now: the nodes changed since the ranking was made,
// ranked again, against the best of those that did not change (the first in the order,
// whose rank is what it was).
func (r *ranking) best(s *Simulation, pod *corev1.Pod, eligible func(string) bool, req Resources) string {
	var changed map[string]bool
	best, bestLeft := "", Leftover{}
	for _, node := range s.changed[r.at:] {
		if !r.member[node] || changed[node] {
			continue
		}
		if changed == nil {
			changed = map[string]bool{}
		}
		changed[node] = true
		if l, _, ok := s.leftover(pod, eligible, req, node); ok && (best == "" || l.Less(bestLeft)) {
			best, bestLeft = node, l
		}
	}
	for len(r.order) > 0 && changed[r.order[0].Name] {
		heap.Pop(&r.order)
	}
	if len(r.order) > 0 && (best == "" || r.order[0].Less(bestLeft)) {
		best = r.order[0].Name
	}
	return best
}

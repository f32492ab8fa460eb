package main

// placement is a fully placed group and the node of each of its pods.
type placement struct {
	spec  groupSpec
	nodes []string
}

// ledger is the bench's own account of what is allocated: the groups that were placed
// whole. Partly placed groups are withdrawn and never enter it, so every figure reads the
// same for a scheduler that places all or nothing and one that does not.
type ledger struct {
	fabric *fabric
	used   map[string]int // node → GPUs allocated
	groups []placement
}

func newLedger(f *fabric) *ledger { return &ledger{fabric: f, used: map[string]int{}} }

func (l *ledger) add(spec groupSpec, nodes []string) {
	l.groups = append(l.groups, placement{spec: spec, nodes: nodes})
	for _, n := range nodes {
		l.used[n] += spec.gpus
	}
}

func (l *ledger) gpus() int {
	total := 0
	for _, g := range l.used {
		total += g
	}
	return total
}

func (l *ledger) pods() int {
	total := 0
	for _, p := range l.groups {
		total += len(p.nodes)
	}
	return total
}

// freeNodes counts nodes with no GPU allocated.
func (l *ledger) freeNodes() int {
	busy := 0
	for _, g := range l.used {
		if g > 0 {
			busy++
		}
	}
	return len(l.fabric.nodes) - busy
}

// spread counts, over the groups of more than one pod (a single pod is trivially inside
// every domain), those whose pods all sit in one leaf, in one NVLink domain (on a fabric
// that has them) and those that span spines.
type spread struct {
	multiPod, oneLeaf, oneDomain, manySpines int
}

func (l *ledger) spread() spread {
	var s spread
	for _, p := range l.groups {
		if len(p.nodes) < 2 {
			continue
		}
		s.multiPod++
		leaves, spines, domains := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for _, n := range p.nodes {
			leaves[l.fabric.leaf[n]] = true
			spines[l.fabric.spine[n]] = true
			domains[l.fabric.domain[n]] = true
		}
		if len(leaves) == 1 {
			s.oneLeaf++
		}
		if len(domains) == 1 && l.fabric.hasDomains() {
			s.oneDomain++
		}
		if len(spines) > 1 {
			s.manySpines++
		}
	}
	return s
}

package placement

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
)

// NodeSource is what a Pool reads: the scheduling cycle's snapshot, or fixed nodes in tests.
type NodeSource interface {
	// Names lists every node, in a stable order.
	Names() []string
	Node(name string) *corev1.Node
	// Free is allocatable minus what the node's pods (assumed ones included) request.
	Free(name string) Resources
	Allocatable(name string) Resources
}

// Pool is the capacity one planning sees: each node's free capacity less what other
// groups' plans keep there, and whether a pod may use the node at all. It reads nodes
// lazily and caches per planning, so a small gang touches few nodes.
type Pool struct {
	src NodeSource
	acc Accelerators
	// kept is what other groups' plans keep on a node (nil: nothing).
	kept func(node string) Resources
	// asIfEmpty plans a reservation: capacity is what nodes offer with nothing running,
	// and nodes closer to offering it now are preferred.
	asIfEmpty bool
	// excluded nodes take none of this planning's pods.
	excluded map[string]bool
	// dra is the profile's DRA view (nil: pods' claims are not planned); devs its state
	// for this planning, read on first use.
	dra  *DRA
	devs *deviceState
	// freedDevices are allocated devices a preemption would give back.
	freedDevices sets.Set[structured.DeviceID]

	names []string
	free  map[string]Resources
	now   map[string]Resources
	elig  map[string]map[string]bool // shape -> node -> eligible
	cost  map[string]int64           // node -> accelerator cost per device
}

// NewPool builds a pool over src. kept may be nil.
func NewPool(src NodeSource, acc Accelerators, kept func(node string) Resources) *Pool {
	if acc == nil {
		acc = anyAccelerator{}
	}
	return &Pool{src: src, acc: acc, kept: kept, free: map[string]Resources{}, elig: map[string]map[string]bool{}}
}

// emptied is the same pool as if its nodes ran nothing: the capacity a reservation plans on.
func (p *Pool) emptied() *Pool {
	q := NewPool(p.src, p.acc, p.kept)
	q.asIfEmpty, q.now, q.excluded, q.dra = true, map[string]Resources{}, p.excluded, p.dra
	return q
}

// devices is the DRA state this planning reads, nil without DRA.
func (p *Pool) devices() *deviceState {
	if p.dra == nil {
		return nil
	}
	if p.devs == nil {
		p.devs = p.dra.state(p.asIfEmpty, p.freedDevices)
	}
	return p.devs
}

// keptDevicesOn are the DRA devices other groups' plans keep on the node.
func (p *Pool) keptDevicesOn(node string) []structured.DeviceID {
	if p.kept == nil {
		return nil
	}
	return keptDevices(p.kept(node))
}

// Nodes lists every node.
func (p *Pool) Nodes() []string {
	if p.names == nil {
		p.names = p.src.Names()
	}
	return p.names
}

// Node returns the node object, or nil.
func (p *Pool) Node(name string) *corev1.Node { return p.src.Node(name) }

// Free is what a new pod may use on the node: free capacity (allocatable when planning a
// reservation) less what other groups' plans keep there. Nil for a node that takes no pods.
func (p *Pool) Free(name string) Resources {
	if f, ok := p.free[name]; ok {
		return f
	}
	var base Resources
	if p.asIfEmpty {
		base = p.src.Allocatable(name)
	} else {
		base = p.src.Free(name)
	}
	var f Resources
	if base != nil {
		f = make(Resources, len(base))
		for k, v := range base {
			f[k] = v
		}
		if p.kept != nil {
			addTo(f, p.kept(name), -1)
		}
	}
	p.free[name] = f
	return f
}

// freeNow is, when planning a reservation, what the node has free today.
func (p *Pool) freeNow(name string) Resources {
	if f, ok := p.now[name]; ok {
		return f
	}
	f := p.src.Free(name)
	if f != nil && p.kept != nil {
		c := make(Resources, len(f))
		for k, v := range f {
			c[k] = v
		}
		addTo(c, p.kept(name), -1)
		f = c
	}
	p.now[name] = f
	return f
}

// Eligible reports whether the pod may run on the node at all (see Eligible), computed
// once per pod shape and node.
func (p *Pool) Eligible(pod *corev1.Pod, name string) bool { return p.eligibleFor(pod)(name) }

// eligibleFor is Eligible for one pod over many nodes: the pod's shape and its cache are
// looked up once, not once per node (a group's plan asks it of every node for every pod).
func (p *Pool) eligibleFor(pod *corev1.Pod) func(name string) bool {
	shape := shapeOf(pod)
	m := p.elig[shape]
	if m == nil {
		m = map[string]bool{}
		p.elig[shape] = m
	}
	return func(name string) bool {
		if p.excluded[name] {
			return false
		}
		ok, seen := m[name]
		if !seen {
			ok = Eligible(pod, p.src.Node(name), p.acc)
			m[name] = ok
		}
		return ok
	}
}

// Cost is the node's accelerator class cost per device (read from its labels once per
// planning).
func (p *Pool) Cost(name string) int64 {
	if c, ok := p.cost[name]; ok {
		return c
	}
	var c int64
	if n := p.src.Node(name); n != nil {
		c = p.acc.Cost(n)
	}
	if p.cost == nil {
		p.cost = map[string]int64{}
	}
	p.cost[name] = c
	return c
}

// snapshotSource reads the scheduling cycle's snapshot.
type snapshotSource struct{ lister fwk.NodeInfoLister }

// SnapshotSource reads nodes from the scheduler's snapshot of this cycle.
func SnapshotSource(lister fwk.NodeInfoLister) NodeSource { return snapshotSource{lister} }

func (s snapshotSource) Names() []string {
	infos, err := s.lister.List()
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(infos))
	for _, ni := range infos {
		if n := ni.Node(); n != nil {
			out = append(out, n.Name)
		}
	}
	return out
}

func (s snapshotSource) info(name string) fwk.NodeInfo {
	ni, err := s.lister.Get(name)
	if err != nil || ni.Node() == nil {
		return nil
	}
	return ni
}

func (s snapshotSource) Node(name string) *corev1.Node {
	if ni := s.info(name); ni != nil {
		return ni.Node()
	}
	return nil
}

func (s snapshotSource) Free(name string) Resources {
	if ni := s.info(name); ni != nil {
		return FreeOf(ni)
	}
	return nil
}

func (s snapshotSource) Allocatable(name string) Resources {
	if ni := s.info(name); ni != nil {
		return AllocatableOf(ni)
	}
	return nil
}

// StaticNode is a node with fixed free capacity, for a StaticSource.
type StaticNode struct {
	Node        *corev1.Node
	Free        Resources
	Allocatable Resources // nil: the same as Free
}

// StaticSource is a fixed set of nodes: unit tests, and anything that plans off the
// scheduler's snapshot.
func StaticSource(nodes ...StaticNode) NodeSource {
	s := staticSource{byName: map[string]StaticNode{}}
	for _, n := range nodes {
		s.names = append(s.names, n.Node.Name)
		s.byName[n.Node.Name] = n
	}
	sort.Strings(s.names)
	return s
}

type staticSource struct {
	names  []string
	byName map[string]StaticNode
}

func (s staticSource) Names() []string { return s.names }
func (s staticSource) Node(name string) *corev1.Node {
	if n, ok := s.byName[name]; ok {
		return n.Node
	}
	return nil
}
func (s staticSource) Free(name string) Resources { return s.byName[name].Free }
func (s staticSource) Allocatable(name string) Resources {
	n := s.byName[name]
	if n.Allocatable != nil {
		return n.Allocatable
	}
	return n.Free
}

package sim

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	topologyv1alpha1 "volcano.sh/apis/pkg/apis/topology/v1alpha1"
)

// A simulated leaf/spine GPU fabric, the same for the sandbox and the placement benchmark:
// nodes labelled with their leaf and spine, and the Volcano HyperNodes that describe them.
// Optionally the nodes of a leaf are grouped into NVLink domains (GB200 NVL72 racks), the
// lowest tier.

// Node labels naming a node's place in the simulated network. The topology plugin can read
// them (lowest tier first) when no HyperNodes exist; the sandbox and the placement benchmark create both.
const (
	LeafLabel  = "network.berth.sh/leaf"
	SpineLabel = "network.berth.sh/spine"
)

// HyperNode tiers and tier names of the simulated fabric, Volcano style: tier 1 is the
// switch the nodes hang off, tier 2 the switch above it. A fabric with NVLink domains has
// them as tier 1 and the leaf and spine one tier higher (Fabric.LeafTier, SpineTier).
const (
	LeafTier       = 1
	LeafTierName   = "leaf"
	SpineTier      = 2
	SpineTierName  = "spine"
	NVLinkTier     = 1
	NVLinkTierName = "nvlink"
)

// CliqueLabel is what GPU feature discovery labels a node of an NVLink domain with:
// "<clusterUUID>.<cliqueID>", alike on every node whose GPUs share the NVLink fabric.
const CliqueLabel = "nvidia.com/gpu.clique"

// Capacity of a simulated GPU node besides its GPUs, an 8-GPU server's (HGX H100 class: two
// 96-core CPUs, 2 TiB of memory, about 30 TB of local NVMe), so manifests written for real
// nodes fit and GPUs are what runs out.
const (
	nodeCPU     = "192"
	nodeMemory  = "2Ti"
	nodeStorage = "30T"
)

// Fabric is a two-tier leaf/spine network of GPU nodes, alike but for their GPU product,
// which can differ from spine to spine.
type Fabric struct {
	Spines         int
	LeavesPerSpine int
	NodesPerLeaf   int
	GPUsPerNode    int
	// NodesPerNVLink groups each leaf's nodes into NVLink domains of this many nodes (18 for
	// a GB200 NVL72 rack), labelled with CliqueLabel and described by tier-1 HyperNodes; 0
	// means none. It divides NodesPerLeaf.
	NodesPerNVLink int
	// GPUProducts are keys of GPUProducts given to the spines in turn: spine i's nodes have
	// GPUProducts[i % len]. Empty leaves the nodes without GPU feature discovery labels.
	GPUProducts []string
	// CPU and Memory of each node; empty means 192 cores and 2Ti, an 8-GPU server's.
	CPU, Memory string
}

// GPUProduct is what GPU feature discovery labels a node with.
type GPUProduct struct {
	Product   string // nvidia.com/gpu.product
	MemoryMiB int64  // nvidia.com/gpu.memory
	Family    string // nvidia.com/gpu.family
}

// GPUProducts are the GPUs a simulated node can have, as real GFD reports them.
var GPUProducts = map[string]GPUProduct{
	"h100": {Product: "NVIDIA-H100-80GB-HBM3", MemoryMiB: 81559, Family: "hopper"},
	"h200": {Product: "NVIDIA-H200", MemoryMiB: 143771, Family: "hopper"},
	"a100": {Product: "NVIDIA-A100-SXM4-80GB", MemoryMiB: 81920, Family: "ampere"},
	"l40s": {Product: "NVIDIA-L40S", MemoryMiB: 46068, Family: "ada-lovelace"},
	// A GB200 NVL72 compute tray's Blackwell GPU.
	"gb200": {Product: "NVIDIA-GB200", MemoryMiB: 189471, Family: "blackwell"},
}

// GPUProductNames lists the keys of GPUProducts, sorted.
func GPUProductNames() []string {
	names := make([]string, 0, len(GPUProducts))
	for k := range GPUProducts {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Validate says what is wrong with the fabric's shape, if anything.
func (f Fabric) Validate() error {
	if f.Spines < 1 || f.LeavesPerSpine < 1 || f.NodesPerLeaf < 1 {
		return fmt.Errorf("fabric needs at least one spine, leaf and node (got %d spines, %d leaves per spine, %d nodes per leaf)",
			f.Spines, f.LeavesPerSpine, f.NodesPerLeaf)
	}
	if f.NodesPerNVLink < 0 || (f.NodesPerNVLink > 0 && f.NodesPerLeaf%f.NodesPerNVLink != 0) {
		return fmt.Errorf("nodes per NVLink domain (%d) must divide the nodes per leaf (%d)", f.NodesPerNVLink, f.NodesPerLeaf)
	}
	if f.GPUsPerNode < 0 {
		return fmt.Errorf("negative GPUs per node: %d", f.GPUsPerNode)
	}
	for _, p := range f.GPUProducts {
		if _, ok := GPUProducts[p]; !ok {
			return fmt.Errorf("unknown GPU product %q (known: %s)", p, strings.Join(GPUProductNames(), ", "))
		}
	}
	return nil
}

// NVL72 is a fabric of GB200 NVL72 racks: each leaf holds one rack, an NVLink domain of 18
// compute trays with 4 GPUs each, Grace CPUs (2 × 72 cores) and their memory.
func NVL72(spines, racksPerSpine int) Fabric {
	return Fabric{Spines: spines, LeavesPerSpine: racksPerSpine, NodesPerLeaf: 18, NodesPerNVLink: 18, GPUsPerNode: 4,
		GPUProducts: []string{"gb200"}, CPU: "144", Memory: "960Gi"}
}

// NVLinkDomains is the number of NVLink domains (0 without them).
func (f Fabric) NVLinkDomains() int {
	if f.NodesPerNVLink <= 0 {
		return 0
	}
	return f.NodeCount() / f.NodesPerNVLink
}

// LeafTier and SpineTier are the tiers of the fabric's leaf and spine HyperNodes: one
// higher when NVLink domains are tier 1.
func (f Fabric) LeafTier() int  { return LeafTier + f.shift() }
func (f Fabric) SpineTier() int { return SpineTier + f.shift() }

func (f Fabric) shift() int {
	if f.NodesPerNVLink > 0 {
		return 1
	}
	return 0
}

// Leaves is the number of leaf switches; NodeCount the number of nodes.
func (f Fabric) Leaves() int    { return f.Spines * f.LeavesPerSpine }
func (f Fabric) NodeCount() int { return f.Leaves() * f.NodesPerLeaf }

// Names are numbered across the whole fabric (leaf-3 is the second leaf of spine-1 in the
// default shape), zero-padded so that kubectl's sorted output reads in fabric order.
func (f Fabric) spineName(s int) string  { return fmt.Sprintf("spine-%d", s) }
func (f Fabric) leafName(l int) string   { return fmt.Sprintf("leaf-%d", l) }
func (f Fabric) nvlinkName(d int) string { return fmt.Sprintf("nvlink-%d", d) }

// clique is node n's CliqueLabel value: one made-up cluster UUID per domain and clique 0,
// as GPU feature discovery reports a rack whose trays all share one NVLink partition.
func (f Fabric) clique(n int) string {
	d := n / f.NodesPerNVLink
	return fmt.Sprintf("%08x-0000-4000-8000-%012x.0", d+1, d+1)
}
func (f Fabric) nodeName(n int) string {
	return fmt.Sprintf("gpu-%0*d", len(fmt.Sprint(f.NodeCount()-1)), n)
}

// spineProduct is the GPU of the nodes under spine s, "" for none.
func (f Fabric) spineProduct(s int) string {
	if len(f.GPUProducts) == 0 || f.GPUsPerNode == 0 {
		return ""
	}
	return f.GPUProducts[s%len(f.GPUProducts)]
}

func (f Fabric) nodeShape(spine int) NodeShape {
	shape := NodeShape{CPU: nodeCPU, Memory: nodeMemory, EphemeralStorage: nodeStorage, GPUs: int64(f.GPUsPerNode)}
	if f.CPU != "" {
		shape.CPU = f.CPU
	}
	if f.Memory != "" {
		shape.Memory = f.Memory
	}
	if p, ok := GPUProducts[f.spineProduct(spine)]; ok {
		shape.GPUProduct, shape.GPUMemoryMiB, shape.GPUFamily = p.Product, p.MemoryMiB, p.Family
	}
	return shape
}

// Describe is one line for a person, e.g. "spine-0: 8 nodes × 8 h100".
func (f Fabric) Describe() string {
	var parts []string
	for s := 0; s < f.Spines; s++ {
		gpu := "GPUs"
		if p := f.spineProduct(s); p != "" {
			gpu = p
		}
		nodes := fmt.Sprintf("%d nodes", f.NodesPerLeaf)
		if f.NodesPerNVLink > 0 {
			nodes = fmt.Sprintf("one NVLink domain of %d nodes", f.NodesPerNVLink)
			if per := f.NodesPerLeaf / f.NodesPerNVLink; per > 1 {
				nodes = fmt.Sprintf("%d NVLink domains of %d nodes", per, f.NodesPerNVLink)
			}
		}
		parts = append(parts, fmt.Sprintf("%s: %d leaves × %s × %d %s", f.spineName(s), f.LeavesPerSpine, nodes, f.GPUsPerNode, gpu))
	}
	return strings.Join(parts, "; ")
}

// Nodes are the simulated GPU nodes, each labelled with its leaf and spine (and NVLink
// clique, if any); the spine is also the node's zone.
func (f Fabric) Nodes() []*corev1.Node {
	nodes := make([]*corev1.Node, 0, f.NodeCount())
	for s := 0; s < f.Spines; s++ {
		for l := s * f.LeavesPerSpine; l < (s+1)*f.LeavesPerSpine; l++ {
			for n := l * f.NodesPerLeaf; n < (l+1)*f.NodesPerLeaf; n++ {
				labels := map[string]string{
					LeafLabel:                f.leafName(l),
					SpineLabel:               f.spineName(s),
					corev1.LabelTopologyZone: f.spineName(s),
				}
				if f.NodesPerNVLink > 0 {
					labels[CliqueLabel] = f.clique(n)
				}
				nodes = append(nodes, NewNode(f.nodeName(n), f.nodeShape(s), labels))
			}
		}
	}
	return nodes
}

// HyperNodes describe the same fabric to Volcano and to berth-scheduler: one tier-1
// HyperNode per leaf whose members are its nodes, one tier-2 HyperNode per spine whose
// members are its leaves. With NVLink domains, one tier-1 HyperNode per domain holds its
// nodes, and the leaves (tier 2) and spines (tier 3) hold the HyperNodes below them.
func (f Fabric) HyperNodes() []*topologyv1alpha1.HyperNode {
	var hns []*topologyv1alpha1.HyperNode
	for s := 0; s < f.Spines; s++ {
		spine := &topologyv1alpha1.HyperNode{
			ObjectMeta: metav1.ObjectMeta{Name: f.spineName(s)},
			Spec:       topologyv1alpha1.HyperNodeSpec{Tier: f.SpineTier(), TierName: SpineTierName},
		}
		for l := s * f.LeavesPerSpine; l < (s+1)*f.LeavesPerSpine; l++ {
			leaf := &topologyv1alpha1.HyperNode{
				ObjectMeta: metav1.ObjectMeta{Name: f.leafName(l)},
				Spec:       topologyv1alpha1.HyperNodeSpec{Tier: f.LeafTier(), TierName: LeafTierName},
			}
			for n := l * f.NodesPerLeaf; n < (l+1)*f.NodesPerLeaf; n++ {
				if f.NodesPerNVLink == 0 {
					leaf.Spec.Members = append(leaf.Spec.Members, member(topologyv1alpha1.MemberTypeNode, f.nodeName(n)))
					continue
				}
				d := n / f.NodesPerNVLink
				if n%f.NodesPerNVLink == 0 {
					hns = append(hns, &topologyv1alpha1.HyperNode{
						ObjectMeta: metav1.ObjectMeta{Name: f.nvlinkName(d)},
						Spec:       topologyv1alpha1.HyperNodeSpec{Tier: NVLinkTier, TierName: NVLinkTierName},
					})
					leaf.Spec.Members = append(leaf.Spec.Members, member(topologyv1alpha1.MemberTypeHyperNode, f.nvlinkName(d)))
				}
				nv := hns[len(hns)-1]
				nv.Spec.Members = append(nv.Spec.Members, member(topologyv1alpha1.MemberTypeNode, f.nodeName(n)))
			}
			hns = append(hns, leaf)
			spine.Spec.Members = append(spine.Spec.Members, member(topologyv1alpha1.MemberTypeHyperNode, f.leafName(l)))
		}
		hns = append(hns, spine)
	}
	return hns
}

func member(typ topologyv1alpha1.MemberType, name string) topologyv1alpha1.MemberSpec {
	return topologyv1alpha1.MemberSpec{Type: typ, Selector: topologyv1alpha1.MemberSelector{
		ExactMatch: &topologyv1alpha1.ExactMatch{Name: name}}}
}

package main

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/berth-sh/berth/bench/internal/fanout"
	"github.com/berth-sh/berth/pkg/sim"
)

// Node CPU and memory. The default scheduler's spreading (LeastAllocated on CPU and memory)
// is what fragments GPUs, and how much depends on each pod's share of a node's CPU: with the
// stream's 500m pods, 64 cores make it spread, 192 cores leave near-equal scores. See
// bench/README.md.
var nodeCPU, nodeMemory = "64", "512Gi"

// fabric is the simulated network the sandbox runs too (sim.Fabric): the leaf/spine fabric
// of H100 nodes, or GB200 NVL72 racks (NVLink domains). Each node's leaf, spine and NVLink
// domain are at hand for the figures.
type fabric struct {
	sim         sim.Fabric
	gpusPerNode int
	// dra: the nodes publish their GPUs as ResourceSlices of the simulated gpu.nvidia.com
	// driver instead of the nvidia.com/gpu extended resource, and pods claim them.
	dra bool

	nodes  []string          // every node, in creation order
	leaf   map[string]string // node → leaf
	spine  map[string]string // node → spine
	domain map[string]string // node → NVLink domain (clique label), when the fabric has them
}

// newFabric is the leaf/spine fabric of H100 nodes.
func newFabric(spines, leaves, nodesPerLeaf, gpusPerNode int) *fabric {
	return newFabricOf(sim.Fabric{Spines: spines, LeavesPerSpine: leaves, NodesPerLeaf: nodesPerLeaf,
		GPUsPerNode: gpusPerNode, GPUProducts: []string{"h100"}, CPU: nodeCPU, Memory: nodeMemory}, false)
}

func newFabricOf(s sim.Fabric, dra bool) *fabric {
	f := &fabric{sim: s, gpusPerNode: s.GPUsPerNode, dra: dra,
		leaf: map[string]string{}, spine: map[string]string{}, domain: map[string]string{}}
	for _, n := range f.sim.Nodes() {
		f.nodes = append(f.nodes, n.Name)
		f.leaf[n.Name] = n.Labels[sim.LeafLabel]
		f.spine[n.Name] = n.Labels[sim.SpineLabel]
		if c := n.Labels[sim.CliqueLabel]; c != "" {
			f.domain[n.Name] = c
		}
	}
	return f
}

func (f *fabric) totalGPUs() int { return len(f.nodes) * f.gpusPerNode }

// hasDomains: the fabric has NVLink domains, and groups are measured against them.
func (f *fabric) hasDomains() bool { return len(f.domain) > 0 }

// create registers the nodes and the HyperNodes (tier 1 "leaf", tier 2 "spine"; with NVLink
// domains tier 1 "nvlink" below them). With DRA GPUs it also creates the gpu.nvidia.com
// DeviceClass and publishes each node's ResourceSlice, as the simulated kubelet's driver
// would (the bench runs no kubelet).
func (f *fabric) create(ctx context.Context, kube kubernetes.Interface, vc volcanoclient.Interface) error {
	nodes := f.sim.Nodes()
	if f.dra {
		if _, err := kube.ResourceV1().DeviceClasses().Create(ctx, sim.GPUDeviceClass(), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("DeviceClass: %w", err)
		}
	}
	if err := fanout.Run(len(nodes), 16, func(i int) error {
		if f.dra {
			sim.UseDRAForGPUs(nodes[i])
		}
		created, err := kube.CoreV1().Nodes().Create(ctx, nodes[i], metav1.CreateOptions{})
		if err != nil || !f.dra {
			return err
		}
		_, err = kube.ResourceV1().ResourceSlices().Create(ctx, sim.GPUResourceSlice(created), metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	hyperNodes := f.sim.HyperNodes()
	return fanout.Run(len(hyperNodes), 8, func(i int) error {
		_, err := vc.TopologyV1alpha1().HyperNodes().Create(ctx, hyperNodes[i], metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("HyperNode %s: %w", hyperNodes[i].Name, err)
		}
		return nil
	})
}

// fits is the bench's fit check, exhaustive for a group of identical pods: the group can be
// placed on what the ledger leaves free if one domain (an NVLink domain when the fabric has
// them, else the whole fabric) holds room for all its pods, a node of free GPUs f holding
// f/gpus of them.
func (f *fabric) fits(l *ledger, g groupSpec) bool {
	room := map[string]int{}
	for _, n := range f.nodes {
		room[f.domain[n]] += (f.gpusPerNode - l.used[n]) / g.gpus
	}
	for _, r := range room {
		if r >= g.pods {
			return true
		}
	}
	return false
}

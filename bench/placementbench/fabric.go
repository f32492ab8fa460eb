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

// fabric is the simulated leaf/spine network the sandbox runs too (sim.Fabric, one GPU class:
// H100), with each node's leaf and spine at hand for the figures.
type fabric struct {
	sim         sim.Fabric
	gpusPerNode int

	nodes []string          // every node, in creation order
	leaf  map[string]string // node → leaf
	spine map[string]string // node → spine
}

func newFabric(spines, leavesPerSpine, nodesPerLeaf, gpusPerNode int) *fabric {
	f := &fabric{
		sim: sim.Fabric{Spines: spines, LeavesPerSpine: leavesPerSpine, NodesPerLeaf: nodesPerLeaf,
			GPUsPerNode: gpusPerNode, GPUProducts: []string{"h100"}, CPU: nodeCPU, Memory: nodeMemory},
		gpusPerNode: gpusPerNode, leaf: map[string]string{}, spine: map[string]string{},
	}
	for _, n := range f.sim.Nodes() {
		f.nodes = append(f.nodes, n.Name)
		f.leaf[n.Name] = n.Labels[sim.LeafLabel]
		f.spine[n.Name] = n.Labels[sim.SpineLabel]
	}
	return f
}

func (f *fabric) totalGPUs() int { return len(f.nodes) * f.gpusPerNode }

// create registers the nodes and the HyperNodes (tier 1 "leaf", tier 2 "spine").
func (f *fabric) create(ctx context.Context, kube kubernetes.Interface, vc volcanoclient.Interface) error {
	nodes := f.sim.Nodes()
	if err := fanout.Run(len(nodes), 16, func(i int) error {
		_, err := kube.CoreV1().Nodes().Create(ctx, nodes[i], metav1.CreateOptions{})
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

package main

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	topologyv1alpha1 "volcano.sh/apis/pkg/apis/topology/v1alpha1"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/berth-sh/berth/bench/internal/fanout"
	"github.com/berth-sh/berth/pkg/sim"
)

// Node labels naming a node's network domains, lowest tier first. The topology plugin
// reads HyperNodes when any exist and these labels otherwise; the fabric has both.
const (
	labelLeaf  = "network.berth.sh/leaf"
	labelSpine = "network.berth.sh/spine"
	// The GPU feature discovery label the accelerator plugin reads; one class here.
	labelGPUProduct = "nvidia.com/gpu.product"
	gpuProduct      = "NVIDIA-H100-80GB-HBM3"
)

// fabric is a two-tier network: spines × leaves per spine × nodes per leaf.
type fabric struct {
	spines, leavesPerSpine, nodesPerLeaf int
	gpusPerNode                          int

	nodes []string          // every node, in creation order
	leaf  map[string]string // node → leaf
	spine map[string]string // node → spine
}

func newFabric(spines, leavesPerSpine, nodesPerLeaf, gpusPerNode int) *fabric {
	f := &fabric{spines: spines, leavesPerSpine: leavesPerSpine, nodesPerLeaf: nodesPerLeaf, gpusPerNode: gpusPerNode,
		leaf: map[string]string{}, spine: map[string]string{}}
	for s := 0; s < spines; s++ {
		for l := 0; l < leavesPerSpine; l++ {
			for n := 0; n < nodesPerLeaf; n++ {
				name := fmt.Sprintf("node-%d-%d-%02d", s, l, n)
				f.nodes = append(f.nodes, name)
				f.leaf[name] = leafName(s, l)
				f.spine[name] = spineName(s)
			}
		}
	}
	return f
}

func leafName(s, l int) string { return fmt.Sprintf("leaf-%d-%d", s, l) }
func spineName(s int) string   { return fmt.Sprintf("spine-%d", s) }

func (f *fabric) totalGPUs() int { return len(f.nodes) * f.gpusPerNode }

// create registers the nodes and the HyperNodes: tier 1 "leaf" (members: its nodes),
// tier 2 "spine" (members: its leaf HyperNodes), all by exactMatch.
func (f *fabric) create(ctx context.Context, kube kubernetes.Interface, vc volcanoclient.Interface) error {
	if err := fanout.Run(len(f.nodes), 16, func(i int) error {
		name := f.nodes[i]
		node := sim.NewNode(name, sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: int64(f.gpusPerNode)}, map[string]string{
			labelLeaf: f.leaf[name], labelSpine: f.spine[name], labelGPUProduct: gpuProduct,
		})
		_, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("nodes: %w", err)
	}
	var hyperNodes []*topologyv1alpha1.HyperNode
	for s := 0; s < f.spines; s++ {
		spine := &topologyv1alpha1.HyperNode{ObjectMeta: metav1.ObjectMeta{Name: spineName(s)},
			Spec: topologyv1alpha1.HyperNodeSpec{Tier: 2, TierName: "spine"}}
		for l := 0; l < f.leavesPerSpine; l++ {
			leaf := &topologyv1alpha1.HyperNode{ObjectMeta: metav1.ObjectMeta{Name: leafName(s, l)},
				Spec: topologyv1alpha1.HyperNodeSpec{Tier: 1, TierName: "leaf"}}
			for n := 0; n < f.nodesPerLeaf; n++ {
				leaf.Spec.Members = append(leaf.Spec.Members, member(topologyv1alpha1.MemberTypeNode, fmt.Sprintf("node-%d-%d-%02d", s, l, n)))
			}
			hyperNodes = append(hyperNodes, leaf)
			spine.Spec.Members = append(spine.Spec.Members, member(topologyv1alpha1.MemberTypeHyperNode, leaf.Name))
		}
		hyperNodes = append(hyperNodes, spine)
	}
	return fanout.Run(len(hyperNodes), 8, func(i int) error {
		_, err := vc.TopologyV1alpha1().HyperNodes().Create(ctx, hyperNodes[i], metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("HyperNode %s: %w", hyperNodes[i].Name, err)
		}
		return nil
	})
}

func member(t topologyv1alpha1.MemberType, name string) topologyv1alpha1.MemberSpec {
	return topologyv1alpha1.MemberSpec{Type: t, Selector: topologyv1alpha1.MemberSelector{
		ExactMatch: &topologyv1alpha1.ExactMatch{Name: name}}}
}

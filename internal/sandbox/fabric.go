package sandbox

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/berth-sh/berth/pkg/sim"
)

// DefaultFabric is 2 spines × 2 leaves × 4 nodes × 8 GPUs (16 nodes, 128 GPUs), H100 under
// the first spine and A100 under the second, the two classes the ModelBooster example asks
// for.
func DefaultFabric() sim.Fabric {
	return sim.Fabric{Spines: 2, LeavesPerSpine: 2, NodesPerLeaf: 4, GPUsPerNode: 8, GPUProducts: []string{"h100", "a100"}}
}

// NVL72Fabric is the --nvl72 fabric: 2 spines × 2 GB200 NVL72 racks, each rack one leaf
// and one NVLink domain of 18 nodes × 4 GPUs (72 nodes, 288 GPUs), small enough for the
// sandbox on a laptop and enough domains to watch groups pack into them.
func NVL72Fabric() sim.Fabric { return sim.NVL72(2, 2) }

// createFabric makes the nodes and HyperNodes. Objects that already exist (a sandbox run before
// on the same control plane) are kept as they are.
func createFabric(ctx context.Context, f sim.Fabric, kube kubernetes.Interface, vc volcanoclient.Interface) error {
	for _, n := range f.Nodes() {
		if _, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	for _, hn := range f.HyperNodes() {
		if _, err := vc.TopologyV1alpha1().HyperNodes().Create(ctx, hn, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("HyperNode %s: %w", hn.Name, err)
		}
	}
	return nil
}

// createPlainNodes creates n workers with CPU and memory only, named worker-<i>.
func createPlainNodes(ctx context.Context, n int, kube kubernetes.Interface) error {
	for i := range n {
		node := sim.NewNode(fmt.Sprintf("worker-%d", i), sim.NodeShape{CPU: "16", Memory: "64Gi"}, nil)
		if _, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("node %s: %w", node.Name, err)
		}
	}
	return nil
}

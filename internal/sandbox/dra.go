package sandbox

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/berth-sh/berth/pkg/sim"
)

// DefaultDRAGPUs names the part of the fabric whose GPUs are DRA GPUs by default: its last
// leaf (leaf-3 of the default fabric, four A100 nodes). The rest keep the device plugin, so
// one sandbox runs both kinds side by side and examples/ can show a ResourceClaimTemplate.
func DefaultDRAGPUs(f sim.Fabric) []string {
	nodes := f.Nodes()
	if len(nodes) == 0 || f.GPUsPerNode == 0 {
		return nil
	}
	return []string{nodes[len(nodes)-1].Labels[sim.LeafLabel]}
}

// draNodes are the fabric's nodes under the named leaves or spines, with their GPUs
// published through the simulated gpu.nvidia.com DRA driver instead of the device plugin;
// a name that is no leaf or spine of the fabric is an error.
func draNodes(f sim.Fabric, domains []string) ([]*corev1.Node, error) {
	if len(domains) == 0 {
		return nil, nil
	}
	var nodes []*corev1.Node
	known := map[string]bool{}
	for _, n := range f.Nodes() {
		leaf, spine := n.Labels[sim.LeafLabel], n.Labels[sim.SpineLabel]
		known[leaf], known[spine] = true, true
		if slices.Contains(domains, leaf) || slices.Contains(domains, spine) {
			sim.UseDRAForGPUs(n)
			nodes = append(nodes, n)
		}
	}
	for _, d := range domains {
		if !known[d] {
			return nil, fmt.Errorf("DRA GPUs: %q is no leaf or spine of the fabric (it has %s)", d, strings.Join(domainNames(known), ", "))
		}
	}
	return nodes, nil
}

// createDRANodes creates the DRA nodes before the rest of the fabric (createFabric then
// keeps them as they are), and the driver's DeviceClass, as its chart installs it.
func createDRANodes(ctx context.Context, nodes []*corev1.Node, kube kubernetes.Interface) error {
	if len(nodes) == 0 {
		return nil
	}
	if _, err := kube.ResourceV1().DeviceClasses().Create(ctx, sim.GPUDeviceClass(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("DeviceClass %s: %w", sim.GPUDeviceClassName, err)
	}
	for _, n := range nodes {
		if _, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	return nil
}

func domainNames(known map[string]bool) []string {
	names := make([]string, 0, len(known))
	for k := range known {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

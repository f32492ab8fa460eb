package placement

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// BenchmarkPlaceGroupOn5000Nodes is one group's plan as bench/scalebench's fill makes it:
// five 1-GPU pods of one template placed best-fit over 5000 half-full 8-GPU nodes (every
// pod of a gang is ranked against every node, so this is most of berth-scheduler's CPU
// in that fill).
func BenchmarkPlaceGroupOn5000Nodes(b *testing.B) {
	var nodes []StaticNode
	var names []string
	for i := range 5000 {
		name := fmt.Sprintf("node-%05d", i)
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}
		nodes = append(nodes, StaticNode{Node: n,
			Free:        Resources{gpu: int64(1 + i%8), corev1.ResourceCPU: 64000, corev1.ResourceMemory: 512 << 30, corev1.ResourcePods: 110},
			Allocatable: Resources{gpu: 8, corev1.ResourceCPU: 96000, corev1.ResourceMemory: 1 << 40, corev1.ResourcePods: 110}})
		names = append(names, name)
	}
	src := StaticSource(nodes...)
	pods := simplePods("g", 5, 1)
	for _, p := range pods { // one role's pods, as berth-controller labels them
		p.Labels[workloadv1alpha1.ModelServingNameLabel], p.Labels[workloadv1alpha1.RoleLabel] = "m", "server"
	}
	reqs := make([]Resources, len(pods))
	for i, p := range pods {
		reqs[i] = PodRequests(p)
	}
	b.ResetTimer()
	for range b.N {
		sim := NewPool(src, nil, nil).Simulate()
		if _, ok := sim.PlaceUnit(pods, reqs, names); !ok {
			b.Fatal("the group does not fit")
		}
	}
}

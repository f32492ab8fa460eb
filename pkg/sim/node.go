package sim

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GPUResource is the extended resource simulated GPU nodes offer.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// NodeShape is the capacity of a simulated node.
type NodeShape struct {
	CPU    string // e.g. "64"
	Memory string // e.g. "512Gi"
	GPUs   int64
	Pods   int // 0 means 110, the kubelet's default
}

// NewNode is a Ready node object with the shape as capacity and allocatable. No kubelet
// stands behind it; the simulated Kubelet runs whatever is bound to it.
func NewNode(name string, shape NodeShape, labels map[string]string) *corev1.Node {
	pods := shape.Pods
	if pods == 0 {
		pods = 110
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(shape.CPU),
		corev1.ResourceMemory: resource.MustParse(shape.Memory),
		corev1.ResourcePods:   resource.MustParse(strconv.Itoa(pods)),
	}
	if shape.GPUs > 0 {
		capacity[GPUResource] = *resource.NewQuantity(shape.GPUs, resource.DecimalSI)
	}
	all := map[string]string{corev1.LabelHostname: name}
	for k, v := range labels {
		all[k] = v
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: all},
		Status: corev1.NodeStatus{
			Capacity: capacity, Allocatable: capacity.DeepCopy(),
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

package sim

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GPUResource is the extended resource simulated GPU nodes offer.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// NVIDIA GPU feature discovery's node labels, which the accelerator plugin reads.
const (
	GPUProductLabel = "nvidia.com/gpu.product"
	GPUMemoryLabel  = "nvidia.com/gpu.memory" // MiB per device
	GPUFamilyLabel  = "nvidia.com/gpu.family"
)

// NodeShape is the capacity of a simulated node.
type NodeShape struct {
	CPU    string // e.g. "64"
	Memory string // e.g. "512Gi"
	// EphemeralStorage is the node's local ephemeral storage, e.g. "30T"; empty offers none.
	EphemeralStorage string
	// GPUs are offered through the device plugin, as the nvidia.com/gpu extended resource.
	GPUs int64
	// DRAGPUs are published through DRA instead, as the devices of a ResourceSlice of the
	// simulated gpu.nvidia.com driver (see GPUResourceSlice); a node may have both.
	DRAGPUs int64
	Pods    int // 0 means 110, the kubelet's default

	// Optional GPU description, written as the labels GPU feature discovery would write
	// when non-empty; labels passed to NewNode win over them.
	GPUProduct   string // nvidia.com/gpu.product, e.g. "NVIDIA-H100-80GB-HBM3"
	GPUMemoryMiB int64  // nvidia.com/gpu.memory, e.g. 81920
	GPUFamily    string // nvidia.com/gpu.family, e.g. "hopper"
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
	if shape.EphemeralStorage != "" {
		capacity[corev1.ResourceEphemeralStorage] = resource.MustParse(shape.EphemeralStorage)
	}
	if shape.GPUs > 0 {
		capacity[GPUResource] = *resource.NewQuantity(shape.GPUs, resource.DecimalSI)
	}
	all := map[string]string{corev1.LabelHostname: name}
	if shape.GPUProduct != "" {
		all[GPUProductLabel] = shape.GPUProduct
	}
	if shape.GPUMemoryMiB > 0 {
		all[GPUMemoryLabel] = strconv.FormatInt(shape.GPUMemoryMiB, 10)
	}
	if shape.GPUFamily != "" {
		all[GPUFamilyLabel] = shape.GPUFamily
	}
	for k, v := range labels {
		all[k] = v
	}
	var annotations map[string]string
	if shape.DRAGPUs > 0 {
		annotations = map[string]string{DRAGPUsAnnotation: strconv.FormatInt(shape.DRAGPUs, 10)}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: all, Annotations: annotations},
		Status: corev1.NodeStatus{
			Capacity: capacity, Allocatable: capacity.DeepCopy(),
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

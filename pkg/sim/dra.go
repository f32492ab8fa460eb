package sim

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A simulated DRA GPU driver, standing in for NVIDIA's k8s-dra-driver-gpu kubelet plugin: a
// node's DRA GPUs are published as one ResourceSlice of devices named and described the way
// that driver describes them, and the simulated Kubelet prepares a pod's claims before it
// starts the pod. Its scheduling is not simulated: kube-scheduler's DynamicResources plugin
// allocates the devices, and kube-controller-manager's ResourceClaim controller (run by
// internal/controlplane) frees them when the pod ends.

const (
	// DRADriver is NVIDIA's DRA driver name; the slice's driver and the attribute domain.
	DRADriver = "gpu.nvidia.com"
	// GPUDeviceClassName is the DeviceClass NVIDIA's chart installs for whole GPUs.
	GPUDeviceClassName = "gpu.nvidia.com"
	// DRAGPUsAnnotation carries a node's number of DRA GPUs from NewNode to the simulated
	// driver (a real driver asks NVML; the Node object is all a simulated node has).
	DRAGPUsAnnotation = "sim.berth.sh/dra-gpus"
	// cliqueLabel is GPU feature discovery's NVLink clique label (<cluster UUID>.<clique
	// id>); when a node has it, its DRA GPUs carry it as the cliqueID attribute.
	cliqueLabel = "nvidia.com/gpu.clique"
	// FailedPrepareReason is the event reason of a pod whose claims could not be prepared,
	// the kubelet's own.
	FailedPrepareReason = "FailedPrepareDynamicResources"
)

// The driver and CUDA versions every simulated GPU reports (an R570 driver).
const (
	simDriverVersion     = "570.124.6"
	simCUDADriverVersion = "12.8.0"
)

// nvmlGPU is what NVML says about a GPU product GPU feature discovery labels as the key of
// nvmlGPUs: the name with spaces, the architecture and compute capability.
type nvmlGPU struct {
	productName, architecture, computeCapability string
}

var nvmlGPUs = map[string]nvmlGPU{
	"NVIDIA-H100-80GB-HBM3": {"NVIDIA H100 80GB HBM3", "Hopper", "9.0.0"},
	"NVIDIA-H200":           {"NVIDIA H200", "Hopper", "9.0.0"},
	"NVIDIA-A100-SXM4-80GB": {"NVIDIA A100-SXM4-80GB", "Ampere", "8.0.0"},
	"NVIDIA-A100-SXM4-40GB": {"NVIDIA A100-SXM4-40GB", "Ampere", "8.0.0"},
	"NVIDIA-L40S":           {"NVIDIA L40S", "Ada Lovelace", "8.9.0"},
}

// DRAGPUs is the number of GPUs the node publishes through DRA (0 for none).
func DRAGPUs(node *corev1.Node) int {
	n, err := strconv.Atoi(node.Annotations[DRAGPUsAnnotation])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// GPUDeviceClass is the DeviceClass of whole NVIDIA GPUs, as the driver's chart installs it.
// It has no extendedResourceName: the simulated cluster keeps `nvidia.com/gpu` for the
// device plugin, so a pod asking for it is never given DRA GPUs instead, and each path is
// tested on its own nodes.
func GPUDeviceClass() *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: GPUDeviceClassName},
		Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == '%s' && device.attributes['%s'].type == 'gpu'", DRADriver, DRADriver),
		}}}},
	}
}

// GPUSliceName is the name of the node's GPU ResourceSlice.
func GPUSliceName(node string) string { return node + "-" + DRADriver }

// GPUResourceSlice is the ResourceSlice the driver publishes for the node's DRA GPUs (nil
// if it has none): one pool named after the node, owned by the Node so that it goes with
// it, as a kubelet plugin's slices do. Devices are gpu-<minor> with the attributes and
// memory capacity of the driver's whole-GPU devices; the product comes from the node's GPU
// feature discovery labels.
func GPUResourceSlice(node *corev1.Node) *resourcev1.ResourceSlice {
	n := DRAGPUs(node)
	if n == 0 {
		return nil
	}
	product := node.Labels[GPUProductLabel]
	info, ok := nvmlGPUs[product]
	if !ok {
		info = nvmlGPU{productName: product, architecture: architecture(node.Labels[GPUFamilyLabel])}
	}
	var memory *resource.Quantity
	if mib, err := strconv.ParseInt(node.Labels[GPUMemoryLabel], 10, 64); err == nil && mib > 0 {
		memory = resource.NewQuantity(mib<<20, resource.BinarySI)
	}
	clique := node.Labels[cliqueLabel]
	devices := make([]resourcev1.Device, n)
	for i := range n {
		attrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": {StringValue: ptrTo("gpu")},
			"uuid": {StringValue: ptrTo(gpuUUID(node.Name, i))},
			// minor and index as the driver published them up to v25.3 (later releases
			// dropped them; the device name still carries the minor).
			"minor":             {IntValue: ptrTo(int64(i))},
			"index":             {IntValue: ptrTo(int64(i))},
			"productName":       {StringValue: ptrTo(info.productName)},
			"brand":             {StringValue: ptrTo("Nvidia")},
			"architecture":      {StringValue: ptrTo(info.architecture)},
			"driverVersion":     {VersionValue: ptrTo(simDriverVersion)},
			"cudaDriverVersion": {VersionValue: ptrTo(simCUDADriverVersion)},
			// Kubernetes' standard attribute, which the driver publishes since v25.8.
			"resource.kubernetes.io/pciBusID": {StringValue: ptrTo(fmt.Sprintf("0000:%02x:00.0", 0x18+i*0x10))},
		}
		if info.computeCapability != "" {
			attrs["cudaComputeCapability"] = resourcev1.DeviceAttribute{VersionValue: ptrTo(info.computeCapability)}
		}
		if clique != "" {
			attrs["cliqueID"] = resourcev1.DeviceAttribute{StringValue: ptrTo(clique)}
		}
		devices[i] = resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i), Attributes: attrs}
		if memory != nil {
			devices[i].Capacity = map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: memory.DeepCopy()}}
		}
	}
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: GPUSliceName(node.Name),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
				Controller: ptrTo(true)}},
		},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   DRADriver,
			NodeName: ptrTo(node.Name),
			Pool:     resourcev1.ResourcePool{Name: node.Name, Generation: 1, ResourceSliceCount: 1},
			Devices:  devices,
		},
	}
}

// architecture is NVML's name for a GPU feature discovery family, e.g. "ada-lovelace" is
// "Ada Lovelace".
func architecture(family string) string {
	words := strings.Split(family, "-")
	for i, w := range words {
		if w != "" {
			words[i] = strings.ToUpper(w[:1]) + w[1:]
		}
	}
	return strings.Join(words, " ")
}

// gpuUUID is a stable GPU-<uuid> for the node's GPU i, shaped as NVML's.
func gpuUUID(node string, i int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", node, i)))
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// UseDRAForGPUs turns a node's device-plugin GPUs into DRA GPUs: the nvidia.com/gpu
// extended resource goes, and the simulated driver publishes as many devices instead.
func UseDRAForGPUs(node *corev1.Node) {
	q, ok := node.Status.Capacity[GPUResource]
	if !ok || q.Value() == 0 {
		return
	}
	delete(node.Status.Capacity, GPUResource)
	delete(node.Status.Allocatable, GPUResource)
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations[DRAGPUsAnnotation] = strconv.FormatInt(q.Value()+int64(DRAGPUs(node)), 10)
}

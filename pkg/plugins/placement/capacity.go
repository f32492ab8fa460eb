package placement

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	fwk "k8s.io/kube-scheduler/framework"
)

// Resources are amounts by resource name: cpu in millicores, everything else in units, and
// "pods" for pod slots.
type Resources = map[corev1.ResourceName]int64

// FreeOf is a node's allocatable minus what its pods request (pods held in Permit, which
// the scheduler's cache assumes, included); nil for a node that takes no new pods.
func FreeOf(ni fwk.NodeInfo) Resources {
	node := ni.Node()
	if node == nil || node.Spec.Unschedulable {
		return nil
	}
	alloc, used := ni.GetAllocatable(), ni.GetRequested()
	free := Resources{
		corev1.ResourceCPU:    alloc.GetMilliCPU() - used.GetMilliCPU(),
		corev1.ResourceMemory: alloc.GetMemory() - used.GetMemory(),
		corev1.ResourcePods:   int64(alloc.GetAllowedPodNumber() - len(ni.GetPods())),
	}
	if es := alloc.GetEphemeralStorage(); es > 0 {
		free[corev1.ResourceEphemeralStorage] = es - used.GetEphemeralStorage()
	}
	usedScalar := used.GetScalarResources()
	for name, v := range alloc.GetScalarResources() {
		free[name] = v - usedScalar[name]
	}
	return free
}

// AllocatableOf is what the node offers with nothing running on it; nil for a node that
// takes no new pods.
func AllocatableOf(ni fwk.NodeInfo) Resources {
	node := ni.Node()
	if node == nil || node.Spec.Unschedulable {
		return nil
	}
	alloc := ni.GetAllocatable()
	out := Resources{
		corev1.ResourceCPU:    alloc.GetMilliCPU(),
		corev1.ResourceMemory: alloc.GetMemory(),
		corev1.ResourcePods:   int64(alloc.GetAllowedPodNumber()),
	}
	if es := alloc.GetEphemeralStorage(); es > 0 {
		out[corev1.ResourceEphemeralStorage] = es
	}
	for name, v := range alloc.GetScalarResources() {
		out[name] = v
	}
	return out
}

// PodRequests returns the pod's effective requests (init containers and overhead included),
// one pod slot among them.
func PodRequests(p *corev1.Pod) Resources {
	out := Resources{corev1.ResourcePods: 1}
	for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
		out[name] = QuantityValue(name, q)
	}
	return out
}

// QuantityValue is q in the units Resources uses for name.
func QuantityValue(name corev1.ResourceName, q resource.Quantity) int64 {
	if name == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

// Quantity turns an amount back into a Quantity.
func Quantity(name corev1.ResourceName, v int64) resource.Quantity {
	switch name {
	case corev1.ResourceCPU:
		return *resource.NewMilliQuantity(v, resource.DecimalSI)
	case corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		return *resource.NewQuantity(v, resource.BinarySI)
	}
	return *resource.NewQuantity(v, resource.DecimalSI)
}

// FormatAmount spells an amount for a message ("500m", "8Gi", "8").
func FormatAmount(name corev1.ResourceName, v int64) string {
	q := Quantity(name, v)
	return q.String()
}

// IsDevice tells accelerators (extended resources such as nvidia.com/gpu) from the
// resources every node has.
func IsDevice(name corev1.ResourceName) bool {
	switch name {
	case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage:
		return false
	}
	return strings.Contains(string(name), "/") && !strings.HasPrefix(string(name), "hugepages-") && !isDeviceKey(name)
}

// fitsIn reports whether req fits in free less used (used may be nil).
func fitsIn(free, used, req Resources) bool {
	if free == nil {
		return false
	}
	for name, v := range req {
		if v > 0 && free[name]-used[name] < v && !isDeviceKey(name) {
			return false
		}
	}
	return true
}

func addTo(dst, req Resources, sign int64) {
	for name, v := range req {
		dst[name] += sign * v
	}
}

func describeResources(r Resources) string {
	var parts []string
	for _, name := range SortedKeys(asStrings(r)) {
		rn := corev1.ResourceName(name)
		if rn == corev1.ResourcePods || r[rn] == 0 || isDeviceKey(rn) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s", FormatAmount(rn, r[rn]), rn))
	}
	return strings.Join(parts, ", ")
}

func asStrings(r Resources) map[string]int64 {
	out := make(map[string]int64, len(r))
	for k, v := range r {
		out[string(k)] = v
	}
	return out
}

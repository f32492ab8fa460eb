package accelerator

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Match reports whether the node's accelerator labels satisfy the pod's annotations
// (products, families, minimum memory per device) for the accelerator the pod requests,
// or, for a pod that requests none but states requirements, for the first accelerator the
// node offers. It does not count free devices. It uses the default resources and label
// keys; a profile's own are applied by the plugin's Match method.
//
// A pod without accelerator annotations matches every node. A malformed annotation
// matches none, and the reason names it.
func Match(pod *corev1.Pod, node *corev1.Node) (ok bool, reason string) {
	return defaultAccelerators.match(pod, node)
}

func (a *accelerators) match(pod *corev1.Pod, node *corev1.Node) (bool, string) {
	var r requirement
	if err := parseAnnotations(pod.Annotations, &r); err != nil {
		return false, err.Error()
	}
	if !r.constrained() {
		return true, ""
	}
	res := a.requested(pod)
	if res == nil {
		res = a.firstOffered(func(name corev1.ResourceName) bool {
			q, ok := node.Status.Allocatable[name]
			return ok && q.Sign() > 0
		})
	}
	return matchNode(&r, res, node.Labels)
}

// firstOffered is the first configured resource the node offers, or nil.
func (a *accelerators) firstOffered(offers func(corev1.ResourceName) bool) *AcceleratorResource {
	for i := range a.resources {
		if offers(a.resources[i].Name) {
			return &a.resources[i]
		}
	}
	return nil
}

// matchNode checks the pod's label requirements against the node's labels for res, the
// device the pod would use there (nil: the node offers no accelerator).
func matchNode(r *requirement, res *AcceleratorResource, labels map[string]string) (bool, string) {
	if !r.constrained() {
		return true, ""
	}
	if res == nil {
		return false, "node offers no accelerator, pod requires one (" + r.describe() + ")"
	}
	if r.products != "" {
		if ok, why := matchList(res, "product", res.ProductLabel, r.products, labels); !ok {
			return false, why
		}
	}
	if r.families != "" {
		if ok, why := matchList(res, "family", res.FamilyLabel, r.families, labels); !ok {
			return false, why
		}
	}
	if r.minMemory != "" {
		if res.MemoryLabel == "" {
			return false, fmt.Sprintf("no memory label is configured for %s, pod needs %s per device", res.Name, r.minMemory)
		}
		v, ok := labels[res.MemoryLabel]
		if !ok {
			return false, fmt.Sprintf("node has no %s label, pod needs %s per device", res.MemoryLabel, r.minMemory)
		}
		mib, ok := memoryMiB(v, res.MemoryLabelUnit)
		if !ok {
			return false, fmt.Sprintf("%s is %q, not a memory size; pod needs %s per device", res.MemoryLabel, v, r.minMemory)
		}
		if mib < r.minMemoryMiB-memoryTolerance(r.minMemoryMiB) {
			return false, fmt.Sprintf("%s is %s, pod needs %s per device", res.MemoryLabel, withUnit(v, res.MemoryLabelUnit), r.minMemory)
		}
	}
	return true, ""
}

func matchList(res *AcceleratorResource, what, key, list string, labels map[string]string) (bool, string) {
	if key == "" {
		return false, fmt.Sprintf("no %s label is configured for %s, pod accepts %s", what, res.Name, list)
	}
	v, ok := labels[key]
	if !ok {
		return false, fmt.Sprintf("node has no %s label, pod accepts %s", key, list)
	}
	if !listHas(list, v) {
		return false, fmt.Sprintf("%s is %s, pod accepts %s", key, v, list)
	}
	return true, ""
}

// describe names the pod's first stated requirement, for a node with no accelerator.
func (r *requirement) describe() string {
	switch {
	case r.products != "":
		return ProductsAnnotation + "=" + r.products
	case r.families != "":
		return FamiliesAnnotation + "=" + r.families
	default:
		return MinMemoryAnnotation + "=" + r.minMemory
	}
}

// withUnit spells out the unit of a bare-integer memory label in a reason.
func withUnit(v, unit string) string {
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return v
		}
	}
	return v + " " + unit
}

// memoryTolerance is how far a device's memory label may fall below the requested size and
// still match: 1% of it. Labellers report the memory a device can use, which is a few hundred
// MiB below its nominal size (GPU feature discovery reports 81559 MiB for an "80 GB" H100), so
// a user's "80Gi" means the 80 GB class, and no device class differs by as little as 1%.
func memoryTolerance(requestedMiB int64) int64 { return requestedMiB / 100 }

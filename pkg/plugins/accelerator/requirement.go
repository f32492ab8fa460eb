package accelerator

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Pod annotations a user states on the pod template (a ModelServing role's template).
const (
	// ProductsAnnotation lists acceptable product label values, comma-separated (any of).
	ProductsAnnotation = "accelerator.berth.sh/products"
	// FamiliesAnnotation lists acceptable family label values, comma-separated (any of).
	FamiliesAnnotation = "accelerator.berth.sh/families"
	// MinMemoryAnnotation is the minimum memory per device as a quantity ("80Gi", "40G").
	MinMemoryAnnotation = "accelerator.berth.sh/min-memory"
)

const bytesPerMiB = 1 << 20

// requirement is what a pod asks of a node's accelerators. It is parsed once per
// scheduling cycle (PreFilter) and read by Filter and Score on every node.
type requirement struct {
	// res is the accelerator the pod requests; nil when it requests none.
	res   *AcceleratorResource
	count int64

	// The annotations, trimmed; "" means no constraint.
	products, families, minMemory string
	minMemoryMiB                  int64 // minMemory rounded up to MiB
}

// constrained reports whether the pod states any label requirement.
func (r *requirement) constrained() bool {
	return r.products != "" || r.families != "" || r.minMemory != ""
}

// accelerators is the configured resource list and the rules that read it. The plugin
// holds one built from its args; Match and DeviceRequest use one built from the defaults.
type accelerators struct {
	resources []AcceleratorResource
}

var defaultAccelerators = &accelerators{resources: DefaultResources()}

// requested returns the first configured resource any container of the pod requests, or
// nil. It only looks at map keys, so the common pod that asks for no accelerator costs a
// few lookups and no allocation.
func (a *accelerators) requested(pod *corev1.Pod) *AcceleratorResource {
	for i := range a.resources {
		name := a.resources[i].Name
		if requestsResource(pod.Spec.Containers, name) || requestsResource(pod.Spec.InitContainers, name) {
			return &a.resources[i]
		}
	}
	return nil
}

func requestsResource(containers []corev1.Container, name corev1.ResourceName) bool {
	for i := range containers {
		if q, ok := containers[i].Resources.Requests[name]; ok && !q.IsZero() {
			return true
		}
	}
	return false
}

// deviceRequest is the pod's effective request of its accelerator: what the kubelet will
// set aside, so init containers and sidecars count the way NodeResourcesFit counts them.
func (a *accelerators) deviceRequest(pod *corev1.Pod) (*AcceleratorResource, int64) {
	res := a.requested(pod)
	if res == nil {
		return nil, 0
	}
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	q := reqs[res.Name]
	return res, q.Value()
}

// parse reads the pod's accelerator request and annotations. A malformed annotation is an
// error naming the annotation and its value.
func (a *accelerators) parse(pod *corev1.Pod) (requirement, error) {
	var r requirement
	r.res, r.count = a.deviceRequest(pod)
	if r.res != nil && r.count <= 0 {
		r.res, r.count = nil, 0
	}
	if err := parseAnnotations(pod.Annotations, &r); err != nil {
		return requirement{}, err
	}
	return r, nil
}

// parseAnnotations fills the label requirements of r. It allocates nothing for valid
// annotations other than what parsing the quantity needs, because Match runs it per node.
func parseAnnotations(ann map[string]string, r *requirement) error {
	if len(ann) == 0 {
		return nil
	}
	r.products = strings.TrimSpace(ann[ProductsAnnotation])
	r.families = strings.TrimSpace(ann[FamiliesAnnotation])
	r.minMemory = strings.TrimSpace(ann[MinMemoryAnnotation])
	if err := checkList(ProductsAnnotation, r.products); err != nil {
		return err
	}
	if err := checkList(FamiliesAnnotation, r.families); err != nil {
		return err
	}
	if r.minMemory != "" {
		q, err := resource.ParseQuantity(r.minMemory)
		if err != nil {
			return fmt.Errorf("annotation %s=%q is not a quantity (e.g. 80Gi): %v", MinMemoryAnnotation, r.minMemory, err)
		}
		if q.Sign() <= 0 {
			return fmt.Errorf("annotation %s=%q must be positive", MinMemoryAnnotation, r.minMemory)
		}
		r.minMemoryMiB = (q.Value() + bytesPerMiB - 1) / bytesPerMiB
	}
	return nil
}

// checkList accepts a comma-separated list of label values with at least one entry;
// empty entries ("a,,b", a trailing comma) are ignored.
func checkList(annotation, list string) error {
	if list == "" {
		return nil
	}
	entries := 0
	for rest := list; rest != ""; {
		var item string
		item, rest, _ = strings.Cut(rest, ",")
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !isLabelValue(item) {
			return fmt.Errorf("annotation %s=%q: %q is not a label value (letters, digits, '-', '_', '.'; at most 63)", annotation, list, item)
		}
		entries++
	}
	if entries == 0 {
		return fmt.Errorf("annotation %s=%q lists nothing", annotation, list)
	}
	return nil
}

// listHas reports whether the comma-separated list contains v exactly, as a nodeSelector
// would compare label values.
func listHas(list, v string) bool {
	for rest := list; rest != ""; {
		var item string
		item, rest, _ = strings.Cut(rest, ",")
		if strings.TrimSpace(item) == v {
			return true
		}
	}
	return false
}

// isLabelValue is the label value syntax without a regular expression: alphanumerics at
// both ends, '-', '_' or '.' inside, at most 63 characters.
func isLabelValue(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && ((c != '-' && c != '_' && c != '.') || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}

// memoryMiB reads a memory label value: a bare integer in unit, or an integer with a
// binary-unit suffix. Labellers write binary sizes even when they print "G" (the AMD
// labeller's "192G" is 192 GiB), so G and GB mean GiB here, not 10^9 bytes.
func memoryMiB(v, unit string) (int64, bool) {
	i := 0
	var n int64
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		if n > (1<<62)/10 {
			return 0, false
		}
		n = n*10 + int64(v[i]-'0')
		i++
	}
	if i == 0 {
		return 0, false
	}
	switch suffix := v[i:]; suffix {
	case "":
		if unit == UnitGiB {
			return n * 1024, true
		}
		return n, true
	case "M", "Mi", "MiB", "MB":
		return n, true
	case "G", "Gi", "GiB", "GB":
		return n * 1024, true
	default:
		return 0, false
	}
}

// DeviceRequest returns the accelerator resource the pod requests (its effective request,
// counting init containers and sidecars) among the default resources, or "" and 0.
func DeviceRequest(pod *corev1.Pod) (corev1.ResourceName, int64) {
	res, n := defaultAccelerators.deviceRequest(pod)
	if res == nil || n <= 0 {
		return "", 0
	}
	return res.Name, n
}

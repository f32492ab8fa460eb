package accelerator

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/berth-sh/berth/pkg/plugins/pluginargs"
)

// Args configure the accelerator plugin (pluginConfig.args in the KubeSchedulerConfiguration).
type Args struct {
	metav1.TypeMeta `json:",inline"`

	// Resources are the accelerator extended resources the plugin knows, in order of
	// preference when a pod asks for more than one. Empty means DefaultResources. An entry
	// naming a built-in resource takes the built-in label keys for the fields it leaves empty.
	Resources []AcceleratorResource `json:"resources,omitempty"`

	// ClassCosts is the relative cost of one device per product label value (exact match),
	// e.g. {"NVIDIA-A100-SXM4-80GB": 1.0, "NVIDIA-H100-80GB-HBM3": 2.2}. A node whose
	// product has no entry counts as the most expensive listed cost, so an unlisted (often
	// new and scarce) class is never preferred over a known cheap one. Empty: every node
	// costs the same and only packing orders them.
	ClassCosts map[string]float64 `json:"classCosts,omitempty"`

	// PreferNodesWithoutAccelerators makes a pod that requests no accelerator score nodes
	// that offer none above nodes that do, so CPU-only pods do not take the CPU and memory
	// an accelerator pod will need on a GPU node. Default true.
	PreferNodesWithoutAccelerators *bool `json:"preferNodesWithoutAccelerators,omitempty"`
}

// AcceleratorResource is one extended resource and the node labels that describe its
// devices. An empty label key means nodes carry no such label: a pod that states the
// matching requirement cannot be placed on nodes offering this resource.
type AcceleratorResource struct {
	// Name is the extended resource, e.g. nvidia.com/gpu.
	Name corev1.ResourceName `json:"name"`
	// ProductLabel holds the device model, matched against accelerator.berth.sh/products
	// and looked up in classCosts.
	ProductLabel string `json:"productLabel,omitempty"`
	// FamilyLabel holds the device generation, matched against accelerator.berth.sh/families.
	FamilyLabel string `json:"familyLabel,omitempty"`
	// MemoryLabel holds the memory of one device, compared to accelerator.berth.sh/min-memory.
	MemoryLabel string `json:"memoryLabel,omitempty"`
	// MemoryLabelUnit is the unit of a memory label value written as a bare integer:
	// MiB (default, what NVIDIA GPU feature discovery writes) or GiB. A value with its own
	// suffix (M, Mi, MiB, MB, G, Gi, GiB, GB) is read in binary units whatever this says.
	MemoryLabelUnit string `json:"memoryLabelUnit,omitempty"`
}

// Memory label units.
const (
	UnitMiB = "MiB"
	UnitGiB = "GiB"
)

// DefaultResources are the accelerators the plugin knows without configuration, with the
// labels their vendors' node labellers write (docs/accelerator.md says where each comes from).
func DefaultResources() []AcceleratorResource {
	return []AcceleratorResource{
		// NVIDIA GPU feature discovery (GPU operator): memory in MiB as a bare integer.
		{Name: "nvidia.com/gpu", ProductLabel: "nvidia.com/gpu.product", FamilyLabel: "nvidia.com/gpu.family", MemoryLabel: "nvidia.com/gpu.memory", MemoryLabelUnit: UnitMiB},
		// AMD k8s-node-labeller (ROCm/k8s-device-plugin): vram is whole GiB with a "G" suffix.
		{Name: "amd.com/gpu", ProductLabel: "amd.com/gpu.product-name", FamilyLabel: "amd.com/gpu.family", MemoryLabel: "amd.com/gpu.vram", MemoryLabelUnit: UnitGiB},
		// Huawei Ascend device plugin: chip name (910B3, 310P3, ...) and the accelerator
		// label (huawei-Ascend910, huawei-Ascend310P); it publishes no per-device memory.
		{Name: "huawei.com/Ascend910", ProductLabel: "node.kubernetes.io/npu.chip.name", FamilyLabel: "accelerator", MemoryLabelUnit: UnitMiB},
		{Name: "huawei.com/Ascend310P", ProductLabel: "node.kubernetes.io/npu.chip.name", FamilyLabel: "accelerator", MemoryLabelUnit: UnitMiB},
	}
}

// maxClassCost bounds classCosts so that a cost in thousandths, shifted past the packing
// bits, stays far inside an int64 raw score.
const maxClassCost = 1e6

// DeepCopyObject makes Args a runtime.Object, as the scheduler's config decoding wants.
func (a *Args) DeepCopyObject() runtime.Object {
	out := *a
	if a.Resources != nil {
		out.Resources = append([]AcceleratorResource(nil), a.Resources...)
	}
	if a.ClassCosts != nil {
		out.ClassCosts = make(map[string]float64, len(a.ClassCosts))
		for k, v := range a.ClassCosts {
			out.ClassCosts[k] = v
		}
	}
	if a.PreferNodesWithoutAccelerators != nil {
		v := *a.PreferNodesWithoutAccelerators
		out.PreferNodesWithoutAccelerators = &v
	}
	return &out
}

// decodeArgs decodes strictly, applies defaults and validates. Its error names every
// unknown field and every invalid one, with its path.
func decodeArgs(obj runtime.Object) (*Args, error) {
	args := &Args{}
	var errs []error
	if typed, ok := obj.(*Args); ok {
		if typed != nil {
			args = typed.DeepCopyObject().(*Args)
		}
	} else {
		// A misspelt field (classCost, resource) would otherwise be dropped without a word
		// and the plugin would run on defaults.
		strict, err := pluginargs.Decode(obj, args)
		if err != nil {
			return nil, fmt.Errorf("accelerator args: %w", err)
		}
		errs = strict
	}
	setDefaults(args)
	for _, e := range validateArgs(args) {
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("accelerator args: %w", utilerrors.NewAggregate(errs))
	}
	return args, nil
}

func setDefaults(args *Args) {
	if len(args.Resources) == 0 {
		args.Resources = DefaultResources()
	} else {
		builtin := DefaultResources()
		for i := range args.Resources {
			r := &args.Resources[i]
			for _, b := range builtin {
				if b.Name != r.Name {
					continue
				}
				if r.ProductLabel == "" {
					r.ProductLabel = b.ProductLabel
				}
				if r.FamilyLabel == "" {
					r.FamilyLabel = b.FamilyLabel
				}
				if r.MemoryLabel == "" {
					r.MemoryLabel = b.MemoryLabel
					if r.MemoryLabelUnit == "" {
						r.MemoryLabelUnit = b.MemoryLabelUnit
					}
				}
			}
			if r.MemoryLabelUnit == "" {
				r.MemoryLabelUnit = UnitMiB
			}
		}
	}
	if args.PreferNodesWithoutAccelerators == nil {
		v := true
		args.PreferNodesWithoutAccelerators = &v
	}
}

// validateArgs checks defaulted args and reports every invalid field.
func validateArgs(args *Args) field.ErrorList {
	var errs field.ErrorList
	resources := field.NewPath("resources")
	seen := make(map[corev1.ResourceName]bool, len(args.Resources))
	for i, r := range args.Resources {
		path := resources.Index(i)
		switch {
		case r.Name == "":
			errs = append(errs, field.Required(path.Child("name"), "an extended resource name such as nvidia.com/gpu"))
		case !isExtendedResourceName(r.Name):
			errs = append(errs, field.Invalid(path.Child("name"), r.Name, "not an extended resource name (<domain>/<name>, outside kubernetes.io)"))
		case seen[r.Name]:
			errs = append(errs, field.Duplicate(path.Child("name"), r.Name))
		}
		seen[r.Name] = true
		for _, l := range []struct{ name, key string }{
			{"productLabel", r.ProductLabel}, {"familyLabel", r.FamilyLabel}, {"memoryLabel", r.MemoryLabel},
		} {
			if l.key == "" {
				continue
			}
			if msgs := validation.IsQualifiedName(l.key); len(msgs) > 0 {
				errs = append(errs, field.Invalid(path.Child(l.name), l.key, "not a label key: "+strings.Join(msgs, "; ")))
			}
		}
		if r.MemoryLabelUnit != UnitMiB && r.MemoryLabelUnit != UnitGiB {
			errs = append(errs, field.NotSupported(path.Child("memoryLabelUnit"), r.MemoryLabelUnit, []string{UnitMiB, UnitGiB}))
		}
	}
	costs := field.NewPath("classCosts")
	for _, product := range slices.Sorted(maps.Keys(args.ClassCosts)) {
		cost := args.ClassCosts[product]
		if msgs := validation.IsValidLabelValue(product); product == "" || len(msgs) > 0 {
			errs = append(errs, field.Invalid(costs.Key(product), product, "the key is not a product label value"))
		}
		if math.IsNaN(cost) || cost < 0 || cost > maxClassCost {
			errs = append(errs, field.Invalid(costs.Key(product), cost, fmt.Sprintf("must be between 0 and %g", float64(maxClassCost))))
		}
	}
	return errs
}

// isExtendedResourceName is the API's rule: a qualified name with a domain, outside the
// kubernetes.io namespace and not a quota "requests." name.
func isExtendedResourceName(name corev1.ResourceName) bool {
	s := string(name)
	domain, _, ok := strings.Cut(s, "/")
	if !ok || domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") || strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(s)) == 0
}

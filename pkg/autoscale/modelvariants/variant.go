// Package modelvariants sizes the variants of a model the way llm-d's workload variant
// autoscaler v0.5 does: a variant is a VariantAutoscaling written in llm-d v0.5's shape
// (scaleTargetRef, modelID, variantCost), or an HPA or KEDA ScaledObject annotated
// llm-d.ai/managed: "true"; the variants of one model in one namespace are read and sized
// together by pkg/autoscale/saturation, and each one's desired replicas are exported as
// llm-d's wva_* series. The VariantAutoscaling reconciler (pkg/autoscale/variantscaler)
// and the annotated-scaler reconciler (pkg/autoscale/managedscalers) both size through a
// Sizer, so a model declared partly one way and partly the other is sized as one.
package modelvariants

import (
	"fmt"
	"strconv"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	llmdv1alpha1 "github.com/berth-sh/berth/pkg/apis/llmd/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// Source is the kind of object that declares a variant.
type Source string

const (
	SourceVariantAutoscaling Source = "VariantAutoscaling"
	SourceHPA                Source = "HorizontalPodAutoscaler"
	SourceScaledObject       Source = "ScaledObject"
)

// ScaledObjectGVK is KEDA's ScaledObject. Berth reads it as unstructured data (no KEDA
// module), and only when the cluster serves it.
var ScaledObjectGVK = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}

// Variant is one variant of a model.
type Variant struct {
	Source Source
	// Namespace and Name are the declaring object's; Name is the variant's name
	// (variant_name on the wva_* series), as llm-d names a variant after its HPA or
	// ScaledObject.
	Namespace, Name string
	ModelID         string
	// Cost is the cost of one replica (variantCost, default 10).
	Cost float64
	// Target is the workload, apiVersion defaulted.
	Target autoscalingv1.CrossVersionObjectReference
	// Min and Max bound the replicas (Max 0: no bound but the HPA's own).
	Min, Max int32
	// Accelerator is the inference.optimization/acceleratorName label, "" when absent.
	Accelerator string
	// Desired is the previous run's target as the object's status keeps it (0: none).
	Desired int32
}

// Key identifies a variant across sources.
func (v Variant) Key() string { return string(v.Source) + "/" + v.Namespace + "/" + v.Name }

func (v Variant) String() string { return fmt.Sprintf("%s %s/%s", v.Source, v.Namespace, v.Name) }

// analysisName names the variant inside one model's analysis: by name first, as llm-d
// breaks cost ties by variant name.
func (v Variant) analysisName() string { return v.Name + " (" + string(v.Source) + ")" }

// targetKey identifies the workload a variant scales.
func (v Variant) targetKey() string {
	return v.Namespace + "/" + v.Target.APIVersion + "/" + v.Target.Kind + "/" + v.Target.Name
}

// ScalesModelServing reports whether the variant's workload is a ModelServing.
func (v Variant) ScalesModelServing() bool {
	gv, err := schema.ParseGroupVersion(v.Target.APIVersion)
	return err == nil && gv.Group == workloadv1alpha1.SchemeGroupVersion.Group && v.Target.Kind == "ModelServing"
}

// defaultAPIVersion is llm-d's default for a scaleTargetRef without apiVersion (apps/v1,
// a Deployment), except that a ModelServing is Kthena's.
func defaultAPIVersion(kind, apiVersion string) string {
	switch {
	case apiVersion != "":
		return apiVersion
	case kind == "ModelServing":
		return workloadv1alpha1.SchemeGroupVersion.String()
	}
	return "apps/v1"
}

// parseCost reads a variant cost, default 10; field names where it came from.
func parseCost(s, field string) (float64, error) {
	if s == "" {
		s = llmdv1alpha1.DefaultVariantCost
	}
	c, err := strconv.ParseFloat(s, 64)
	if err != nil || c < 0 {
		return 0, fmt.Errorf("%s: %q is not a non-negative decimal", field, s)
	}
	return c, nil
}

// FromVariantAutoscaling is the variant a VariantAutoscaling in llm-d v0.5's shape declares.
func FromVariantAutoscaling(va *llmdv1alpha1.VariantAutoscaling) (Variant, error) {
	ref := va.Spec.ScaleTargetRef
	if ref == nil {
		return Variant{}, fmt.Errorf("spec.scaleTargetRef: Required value")
	}
	cost, err := parseCost(va.Spec.VariantCost, "spec.variantCost")
	if err != nil {
		return Variant{}, err
	}
	v := Variant{
		Source: SourceVariantAutoscaling, Namespace: va.Namespace, Name: va.Name, ModelID: va.Spec.ModelID, Cost: cost,
		Target:      autoscalingv1.CrossVersionObjectReference{APIVersion: defaultAPIVersion(ref.Kind, ref.APIVersion), Kind: ref.Kind, Name: ref.Name},
		Min:         1,
		Accelerator: va.Labels[llmdv1alpha1.AcceleratorNameLabel],
	}
	if d := va.Status.DesiredOptimizedAlloc; d != nil {
		v.Desired = d.NumReplicas
	}
	return v, nil
}

// IsManaged reports whether an HPA or ScaledObject opts into llm-d's annotation path.
func IsManaged(obj metav1.Object) bool {
	return obj.GetAnnotations()[llmdv1alpha1.ManagedAnnotation] == "true"
}

// fromAnnotations reads what the annotations of a managed object declare.
func fromAnnotations(obj metav1.Object, source Source) (Variant, error) {
	ann := obj.GetAnnotations()
	model := ann[llmdv1alpha1.ModelIDAnnotation]
	if model == "" {
		return Variant{}, fmt.Errorf("annotation %s is missing or empty: it names the model the variant serves", llmdv1alpha1.ModelIDAnnotation)
	}
	cost, err := parseCost(ann[llmdv1alpha1.VariantCostAnnotation], "annotation "+llmdv1alpha1.VariantCostAnnotation)
	if err != nil {
		return Variant{}, err
	}
	return Variant{Source: source, Namespace: obj.GetNamespace(), Name: obj.GetName(), ModelID: model, Cost: cost,
		Accelerator: obj.GetLabels()[llmdv1alpha1.AcceleratorNameLabel]}, nil
}

// FromHPA is the variant an annotated HorizontalPodAutoscaler declares: its name, its
// scaleTargetRef, its minReplicas (default 1) and maxReplicas.
func FromHPA(hpa *autoscalingv2.HorizontalPodAutoscaler) (Variant, error) {
	v, err := fromAnnotations(hpa, SourceHPA)
	if err != nil {
		return v, err
	}
	ref := hpa.Spec.ScaleTargetRef
	if ref.Name == "" {
		return v, fmt.Errorf("spec.scaleTargetRef.name: Required value")
	}
	v.Target = autoscalingv1.CrossVersionObjectReference{APIVersion: defaultAPIVersion(ref.Kind, ref.APIVersion), Kind: ref.Kind, Name: ref.Name}
	v.Min, v.Max = 1, hpa.Spec.MaxReplicas
	if hpa.Spec.MinReplicas != nil {
		v.Min = *hpa.Spec.MinReplicas
	}
	return v, nil
}

// kedaDefaultMaxReplicas is KEDA's maxReplicaCount when a ScaledObject sets none.
const kedaDefaultMaxReplicas = 100

// FromScaledObject is the variant an annotated KEDA ScaledObject declares: its name, its
// spec.scaleTargetRef (KEDA's defaults: a Deployment in apps/v1), minReplicaCount and
// maxReplicaCount (KEDA's default 100).
func FromScaledObject(so *unstructured.Unstructured) (Variant, error) {
	v, err := fromAnnotations(so, SourceScaledObject)
	if err != nil {
		return v, err
	}
	name, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name")
	if name == "" {
		return v, fmt.Errorf("spec.scaleTargetRef.name: Required value")
	}
	kind, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "kind")
	if kind == "" {
		kind = "Deployment"
	}
	apiVersion, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "apiVersion")
	v.Target = autoscalingv1.CrossVersionObjectReference{APIVersion: defaultAPIVersion(kind, apiVersion), Kind: kind, Name: name}
	v.Min, v.Max = 1, kedaDefaultMaxReplicas
	if n, ok := nestedInt(so.Object, "spec", "minReplicaCount"); ok && n > 1 {
		v.Min = int32(n)
	}
	if n, ok := nestedInt(so.Object, "spec", "maxReplicaCount"); ok && n > 0 {
		v.Max = int32(n)
	}
	return v, nil
}

// nestedInt reads an integer field of unstructured data, decoded as an int64 (from the
// apiserver) or a float64 (from plain JSON).
func nestedInt(obj map[string]any, fields ...string) (int64, bool) {
	raw, ok, _ := unstructured.NestedFieldNoCopy(obj, fields...)
	if !ok {
		return 0, false
	}
	switch n := raw.(type) {
	case int64:
		return n, true
	case float64:
		return int64(n), true
	case int:
		return int64(n), true
	}
	return 0, false
}

// ControlledByScaledObject reports whether an HPA is the one KEDA generates for a
// ScaledObject (it inherits the ScaledObject's annotations; the ScaledObject is the variant).
func ControlledByScaledObject(hpa *autoscalingv2.HorizontalPodAutoscaler) bool {
	ref := metav1.GetControllerOf(hpa)
	if ref == nil || ref.Kind != ScaledObjectGVK.Kind {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == ScaledObjectGVK.Group
}

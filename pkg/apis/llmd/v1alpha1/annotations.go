package v1alpha1

// llm-d's annotation path: a HorizontalPodAutoscaler (autoscaling/v2) or a KEDA
// ScaledObject (keda.sh/v1alpha1) carrying these annotations is a variant without a
// VariantAutoscaling object. Its name is the variant's name (the variant_name of the
// wva_* series), its scaleTargetRef the variant's workload, its minimum and maximum
// replicas the variant's bounds, and its labels the variant's labels
// (inference.optimization/acceleratorName among them). Names as in llm-d's
// internal/annotations/annotations.go.
const (
	// ManagedAnnotation opts an HPA or ScaledObject into management; the value must be "true".
	ManagedAnnotation = "llm-d.ai/managed"
	// ModelIDAnnotation is the model the variant serves (required): VariantAutoscaling's
	// spec.modelID. Variants of one model in one namespace are sized together.
	ModelIDAnnotation = "llm-d.ai/model-id"
	// VariantCostAnnotation is the cost of one replica (optional, a non-negative decimal,
	// default "10.0"): VariantAutoscaling's spec.variantCost.
	VariantCostAnnotation = "llm-d.ai/variant-cost"
)

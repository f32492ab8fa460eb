// Package v1alpha1 holds llm-d's llmd.ai/v1alpha1 API: VariantAutoscaling, which sizes one
// model variant (a ModelServing) from its load, an SLO class and per-accelerator performance
// profiles. Group, version, kind and field names follow llm-d's workload-variant-autoscaler
// (the version seed 002 describes) so its manifests apply unchanged.
//
// +kubebuilder:object:generate=true
// +groupName=llmd.ai
package v1alpha1

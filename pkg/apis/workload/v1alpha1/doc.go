// Package v1alpha1 holds the workload.serving.volcano.sh/v1alpha1 API: ModelServing,
// ModelBooster, AutoscalingPolicy and AutoscalingPolicyBinding. Group, version, kind and
// field names follow the Kthena API reference so existing manifests apply unchanged.
//
// +kubebuilder:object:generate=true
// +groupName=workload.serving.volcano.sh
package v1alpha1

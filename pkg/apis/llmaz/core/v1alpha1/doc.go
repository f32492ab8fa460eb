// Package v1alpha1 holds the part of llmaz's core llmaz.io/v1alpha1 API that Playground and
// Service refer to: the cluster-scoped OpenModel and the ModelClaim / ModelClaims types.
// Field names, defaults and validation follow llmaz v0.1.x so its manifests apply unchanged.
//
// +kubebuilder:object:generate=true
// +groupName=llmaz.io
package v1alpha1

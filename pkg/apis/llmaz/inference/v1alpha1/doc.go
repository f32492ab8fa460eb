// Package v1alpha1 holds llmaz's inference.llmaz.io/v1alpha1 API: Playground, Service and
// BackendRuntime (seeds 003/004). Field names, defaults and validation follow llmaz v0.1.x so
// its manifests apply unchanged; the checks llmaz makes in its admission webhooks are CEL
// rules here, so they hold without a webhook.
//
// +kubebuilder:object:generate=true
// +groupName=inference.llmaz.io
package v1alpha1

// Package v1alpha1 holds the networking.serving.volcano.sh/v1alpha1 API: ModelRoute and
// ModelServer, which drive the router's request matching and endpoint picking.
//
// +kubebuilder:object:generate=true
// +groupName=networking.serving.volcano.sh
package v1alpha1

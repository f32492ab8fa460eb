// Package v1alpha1 holds the networking.serving.volcano.sh/v1alpha1 API: ModelRoute,
// ModelServer and ExternalModelProvider, which drive the router's request matching, endpoint
// picking and the requests it sends to providers outside the cluster.
//
// +kubebuilder:object:generate=true
// +groupName=networking.serving.volcano.sh
package v1alpha1

package router

import (
	"github.com/berth-sh/berth/pkg/apicheck"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	topologyv1alpha1 "volcano.sh/apis/pkg/apis/topology/v1alpha1"
)

// requiredAPIs are the APIs the router reads (package view's informers) and, with
// MetricsAuth, asks to authenticate and authorize callers of /metrics.
func requiredAPIs(o Options) []apicheck.API {
	apis := append(apicheck.CRDs(apicheck.Berth, networkingv1alpha1.SchemeGroupVersion.String(), "modelroutes", "modelservers"),
		apicheck.Builtin("", "v1", "pods")...)
	if !o.DisablePDTopology {
		apis = append(apis, apicheck.Builtin("", "v1", "nodes")...)
	}
	if o.MetricsAuth && o.AdminAddr != "" {
		apis = append(apis, apicheck.Builtin("1.6", "authentication.k8s.io/v1", "tokenreviews")...)
		apis = append(apis, apicheck.Builtin("1.6", "authorization.k8s.io/v1", "subjectaccessreviews")...)
	}
	return apis
}

// providerAPIs are what the router reads when the apiserver serves ExternalModelProviders:
// them and the Secrets they name (one watch per Secret, package credentials).
func providerAPIs() []apicheck.API {
	return append(apicheck.CRDs(apicheck.Berth, networkingv1alpha1.SchemeGroupVersion.String(), "externalmodelproviders"),
		apicheck.Builtin("", "v1", "secrets")...)
}

// workloadAPIs are what the router reads, and patches the demand annotation of, to bring a
// model up from zero replicas (fromzero.go).
func workloadAPIs() []apicheck.API {
	return apicheck.CRDs(apicheck.Berth, workloadv1alpha1.SchemeGroupVersion.String(), "modelservings")
}

// gatewayAPIs are what the router reads, and writes the status of, when it serves as a
// Gateway API implementation (package gateway), and the Services and EndpointSlices of the
// Service backends its HTTPRoutes name.
func gatewayAPIs() []apicheck.API {
	return append(append(append(
		apicheck.CRDs(apicheck.GatewayAPI, gwv1.GroupVersion.String(), "gatewayclasses", "gateways", "httproutes", "referencegrants"),
		apicheck.CRDs(apicheck.GatewayAPI, infv1.GroupVersion.String(), "inferencepools")...),
		apicheck.Builtin("", "v1", "services")...),
		apicheck.Builtin("", "discovery.k8s.io/v1", "endpointslices")...)
}

// hyperNodeAPIs are what the router reads, where the apiserver serves them, for the fabric
// prefill/decode pairing prefers near endpoints by (pdtopology.go): Volcano's HyperNodes.
// Without them the fabric comes from node labels.
func hyperNodeAPIs() []apicheck.API {
	return apicheck.CRDs(apicheck.Volcano, topologyv1alpha1.SchemeGroupVersion.String(), "hypernodes")
}

package controller

import (
	"slices"

	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/pkg/apicheck"
	llmazcorev1alpha1 "github.com/berth-sh/berth/pkg/apis/llmaz/core/v1alpha1"
	llmazinferencev1alpha1 "github.com/berth-sh/berth/pkg/apis/llmaz/inference/v1alpha1"
	llmdv1alpha1 "github.com/berth-sh/berth/pkg/apis/llmd/v1alpha1"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// requiredAPIs are the APIs the manager's reconcilers watch, write or own, which the
// apiserver must serve before NewManager builds them. Every reconciler runs whatever --manage
// says (it decides per object, not per kind), so every CRD is required, llmaz's and llm-d's
// included: on a cluster that runs Kthena alone, install those from manifests/crds too.
// Optional APIs are not listed: KEDA's ScaledObject and LeaderWorkerSet are asked for at
// start (manager.go's serves) and their reconcilers run only when they are served.
func requiredAPIs(o Options) []apicheck.API {
	apis := slices.Concat(
		// ModelServings, ModelBoosters, autoscaling policies and bindings (Kthena's kinds).
		apicheck.CRDs(apicheck.Berth, workloadv1alpha1.SchemeGroupVersion.String(), "modelservings", "modelboosters", "autoscalingpolicies", "autoscalingpolicybindings"),
		apicheck.CRDs(apicheck.Berth, networkingv1alpha1.SchemeGroupVersion.String(), "modelroutes", "modelservers", "externalmodelproviders"),
		// llm-d's VariantAutoscaling and llmaz's Playground, Service, BackendRuntime and OpenModel.
		apicheck.CRDs(apicheck.Berth, llmdv1alpha1.SchemeGroupVersion.String(), "variantautoscalings"),
		apicheck.CRDs(apicheck.Berth, llmazinferencev1alpha1.SchemeGroupVersion.String(), "playgrounds", "services", "backendruntimes"),
		apicheck.CRDs(apicheck.Berth, llmazcorev1alpha1.SchemeGroupVersion.String(), "openmodels"),
		// The gang contract: a PodGroup per ServingGroup.
		apicheck.CRDs(apicheck.Volcano, volcanov1beta1.SchemeGroupVersion.String(), "podgroups"),
		apicheck.Builtin("", "v1", "pods", "services", "configmaps"),
		apicheck.Builtin("1.9", "apps/v1", "controllerrevisions"),
		// A Playground's elasticConfig becomes a HorizontalPodAutoscaler.
		apicheck.Builtin("1.23", "autoscaling/v2", "horizontalpodautoscalers"),
		apicheck.Builtin("1.19", "events.k8s.io/v1", "events"),
	)
	if o.LeaderElection {
		apis = append(apis, apicheck.Builtin("1.14", "coordination.k8s.io/v1", "leases")...)
	}
	if o.MetricsSecure {
		apis = append(apis, slices.Concat(
			apicheck.Builtin("1.6", "authentication.k8s.io/v1", "tokenreviews"),
			apicheck.Builtin("1.6", "authorization.k8s.io/v1", "subjectaccessreviews"),
		)...)
	}
	return apis
}

package llmazserving

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/berth-sh/berth/pkg/scope"
)

// RBAC: a Playground becomes an llmaz Service, a ModelServer, a ModelRoute and (with an
// elasticConfig) a HorizontalPodAutoscaler; a Service becomes a ModelServing. OpenModels and
// BackendRuntimes are read; every kind's status is written (docs/llmaz.md).
//
// +kubebuilder:rbac:groups=inference.llmaz.io,resources=playgrounds;services;backendruntimes,verbs=get;list;watch
// +kubebuilder:rbac:groups=inference.llmaz.io,resources=services,verbs=create;update;patch;delete
// +kubebuilder:rbac:groups=inference.llmaz.io,resources=playgrounds/status;services/status;backendruntimes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=llmaz.io,resources=openmodels,verbs=get;list;watch
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.serving.volcano.sh,resources=modelroutes;modelservers,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=modelservings,verbs=get;list;watch;create;update;patch;delete

// Setup registers the Playground, Service and BackendRuntime reconcilers, acting on the
// objects m manages.
func Setup(mgr ctrl.Manager, m scope.Mode) error {
	rec := mgr.GetEventRecorder("berth-llmaz")
	if err := (&PlaygroundReconciler{Client: mgr.GetClient(), Recorder: rec, Scope: m}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("Playground reconciler: %w", err)
	}
	if err := (&ServiceReconciler{Client: mgr.GetClient(), Recorder: rec, Scope: m}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("llmaz Service reconciler: %w", err)
	}
	if err := (&BackendRuntimeReconciler{Client: mgr.GetClient(), Scope: m}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("BackendRuntime reconciler: %w", err)
	}
	return nil
}

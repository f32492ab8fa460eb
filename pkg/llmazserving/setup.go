package llmazserving

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
)

// Setup registers the Playground, Service and BackendRuntime reconcilers.
func Setup(mgr ctrl.Manager) error {
	rec := mgr.GetEventRecorder("berth-llmaz")
	if err := (&PlaygroundReconciler{Client: mgr.GetClient(), Recorder: rec}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("Playground reconciler: %w", err)
	}
	if err := (&ServiceReconciler{Client: mgr.GetClient(), Recorder: rec}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("llmaz Service reconciler: %w", err)
	}
	if err := (&BackendRuntimeReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("BackendRuntime reconciler: %w", err)
	}
	return nil
}

package llmazserving

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	inferenceapi "github.com/berth-sh/berth/pkg/apis/llmaz/inference/v1alpha1"
	"github.com/berth-sh/berth/pkg/scope"
)

// BackendRuntimeReconciler reports whether a BackendRuntime can be used: its recommended
// configs' arguments use only the placeholders a Playground fills, and no limit is below its
// request.
type BackendRuntimeReconciler struct {
	// Scope is which objects it acts on (scope.All when zero).
	Scope  scope.Mode
	Client client.Client
}

func (r *BackendRuntimeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("backendruntime").For(&inferenceapi.BackendRuntime{}).Complete(r)
}

func (r *BackendRuntimeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var br inferenceapi.BackendRuntime
	if err := r.Client.Get(ctx, req.NamespacedName, &br); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, log.FromContext(ctx).WithValues("backendruntime", klog.KObj(&br)))
	if !r.Scope.Manages(&br) {
		return ctrl.Result{}, nil // another project's controller acts on it (--manage=berth)
	}
	status := br.Status.DeepCopy()
	cond := metav1.Condition{Type: ConditionValid, Status: metav1.ConditionTrue, Reason: ReasonValid, ObservedGeneration: br.Generation}
	var names, problems []string
	// Every placeholder a Playground may fill, with a stand-in value.
	vars := map[string]string{"ModelPath": "-", "ModelName": "-", "DraftModelPath": "-", "DraftModelName": "-"}
	for i, c := range br.Spec.RecommendedConfigs {
		names = append(names, c.Name)
		if _, err := RenderArgs(c.Args, vars); err != nil {
			problems = append(problems, fmt.Sprintf("spec.recommendedConfigs[%d].args: %v", i, err))
		}
		if bad := LimitsBelowRequests(c.Resources); len(bad) > 0 {
			problems = append(problems, fmt.Sprintf("spec.recommendedConfigs[%d].resources: %s", i, strings.Join(bad, "; ")))
		}
	}
	if len(problems) > 0 {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "InvalidRecommendedConfig", strings.Join(problems, "; ")
	} else {
		cond.Message = fmt.Sprintf("image %s:%s; recommended configs: %s", br.Spec.Image, br.Spec.Version, strings.Join(names, ", "))
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	if equality.Semantic.DeepEqual(&br.Status, status) {
		return ctrl.Result{}, nil
	}
	orig := br.DeepCopy()
	br.Status = *status
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Status().Patch(ctx, &br, client.MergeFrom(orig)))
}

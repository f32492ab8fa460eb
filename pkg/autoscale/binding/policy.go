package binding

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale"
	"github.com/berth-sh/berth/pkg/scope"
)

// ConditionValid on an AutoscalingPolicy says whether the autoscaler can use it.
const ConditionValid = "Valid"

// PolicyReconciler reports on each AutoscalingPolicy whether it is usable: what the schema
// cannot check (a metric target that is not a positive number, a metric listed twice).
type PolicyReconciler struct {
	// Scope is which objects it acts on (scope.All when zero).
	Scope  scope.Mode
	Client client.Client
}

// RBAC: policies are read and their Valid condition written.
//
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=autoscalingpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=autoscalingpolicies/status,verbs=get;update;patch

// SetupWithManager registers the reconciler.
func (r *PolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("autoscalingpolicy").
		For(&workloadv1alpha1.AutoscalingPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
}

func (r *PolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var p workloadv1alpha1.AutoscalingPolicy
	if err := r.Client.Get(ctx, req.NamespacedName, &p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, log.FromContext(ctx).WithValues("autoscalingpolicy", klog.KObj(&p)))
	if !r.Scope.Manages(&p) {
		return ctrl.Result{}, nil // another project's controller acts on it (--manage=berth)
	}
	cond := metav1.Condition{Type: ConditionValid, Status: metav1.ConditionTrue, Reason: "Valid", Message: "the autoscaler can use this policy", ObservedGeneration: p.Generation}
	if _, err := autoscale.NewPolicy(&p.Spec); err != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonInvalidPolicy, err.Error()
	}
	st := p.Status.DeepCopy()
	st.ObservedGeneration = p.Generation
	meta.SetStatusCondition(&st.Conditions, cond)
	if p.Status.ObservedGeneration == st.ObservedGeneration && meta.IsStatusConditionPresentAndEqual(p.Status.Conditions, ConditionValid, cond.Status) &&
		meta.FindStatusCondition(p.Status.Conditions, ConditionValid).Message == cond.Message {
		return ctrl.Result{}, nil
	}
	p.Status = *st
	if err := r.Client.Status().Update(ctx, &p); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

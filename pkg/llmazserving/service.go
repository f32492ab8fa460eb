package llmazserving

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	coreapi "github.com/berth-sh/berth/pkg/apis/llmaz/core/v1alpha1"
	inferenceapi "github.com/berth-sh/berth/pkg/apis/llmaz/inference/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/scope"
)

// ServiceReconciler runs llmaz Services as ModelServings.
type ServiceReconciler struct {
	// Scope is which objects it acts on (scope.All when zero).
	Scope    scope.Mode
	Client   client.Client
	Recorder events.EventRecorder
}

// SetupWithManager watches Services, their ModelServings and the OpenModels they claim.
func (r *ServiceReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("llmaz-service").
		For(&inferenceapi.Service{}).
		Owns(&workloadv1alpha1.ModelServing{}).
		Watches(&coreapi.OpenModel{}, handler.EnqueueRequestsFromMapFunc(r.allServices)).
		Complete(r)
}

func (r *ServiceReconciler) allServices(ctx context.Context, _ client.Object) []reconcile.Request {
	var list inferenceapi.ServiceList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, s := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
	}
	return out
}

func (r *ServiceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var svc inferenceapi.Service
	if err := r.Client.Get(ctx, req.NamespacedName, &svc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, log.FromContext(ctx).WithValues("service", klog.KObj(&svc)))
	if !r.Scope.Manages(&svc) {
		return ctrl.Result{}, nil // another project's controller acts on it (--manage=berth)
	}
	if !svc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	status := svc.Status.DeepCopy()
	ms, err := r.sync(ctx, &svc)
	switch {
	case recordProblem(ctx, r.Recorder, &svc, svc.Status.Conditions, &status.Conditions, err):
	case err != nil:
		return ctrl.Result{}, err
	default:
		status.Replicas = ms.Status.Replicas
		status.Selector = selectorOf(ms.Name)
		c := meta.FindStatusCondition(ms.Status.Conditions, string(workloadv1alpha1.ModelServingAvailable))
		want := ptr.Deref(svc.Spec.Replicas, 1)
		if c != nil && c.Status == metav1.ConditionTrue && ms.Status.ObservedGeneration == ms.Generation && ms.Status.AvailableReplicas >= want {
			setProgress(&status.Conditions, svc.Generation, true, ReasonAvailable, fmt.Sprintf("ModelServing %s: %d of %d groups available", ms.Name, ms.Status.AvailableReplicas, want))
		} else {
			msg := fmt.Sprintf("ModelServing %s: %d of %d groups available", ms.Name, ms.Status.AvailableReplicas, want)
			if c != nil && c.Message != "" {
				msg += ": " + c.Message
			}
			setProgress(&status.Conditions, svc.Generation, false, ReasonWaiting, msg)
		}
	}
	if !equality.Semantic.DeepEqual(&svc.Status, status) {
		// An update, not a merge patch: status.replicas is required, and a patch of an object
		// that never had a status would leave it out. A conflict is retried.
		svc.Status = *status
		if err := r.Client.Status().Update(ctx, &svc); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	return ctrl.Result{}, nil
}

func (r *ServiceReconciler) sync(ctx context.Context, svc *inferenceapi.Service) (*workloadv1alpha1.ModelServing, error) {
	m, err := resolveModels(ctx, r.Client, sortedRefs(svc.Spec.ModelClaims.Models), svc.Spec.ModelClaims.InferenceFlavors, "spec.modelClaims.models")
	if err != nil {
		return nil, err
	}
	flavors, err := Flavors(m)
	if err != nil {
		return nil, &problem{ReasonFlavorNotFound, "spec.modelClaims.inferenceFlavors: " + err.Error()}
	}
	live, err := ensureOwned(ctx, r.Client, r.Recorder, svc, BuildModelServing(svc, m, flavors))
	if err != nil {
		return nil, err
	}
	return live.(*workloadv1alpha1.ModelServing), nil
}

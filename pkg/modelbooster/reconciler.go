package modelbooster

import (
	"context"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/scope"
)

// Reconciler compiles ModelBoosters into ModelServings, ModelServers, a ModelRoute
// and autoscaling policies and bindings (objects.go), keeps them in step with the
// spec, deletes those the spec no longer has, loads LoRA adapters into the engines, and
// derives the ModelBooster's status from what exists. It never creates a pod.
type Reconciler struct {
	// Scope is which objects it acts on (scope.All when zero).
	Scope scope.Mode
	client.Client
	Recorder events.EventRecorder
	// HTTPClient calls the engines' LoRA API (default: loraHTTPTimeout per request).
	HTTPClient *http.Client
}

// RBAC: a ModelBooster compiles to ModelServings, ModelServers, a ModelRoute and autoscaling
// policies and bindings: the controller creates them, keeps them in step with the spec and
// deletes those of a removed backend (docs/modelbooster.md). It reads the entry pods to load
// LoRA adapters into their engines over HTTP.
//
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=modelboosters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=modelboosters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=modelservings;autoscalingpolicies;autoscalingpolicybindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.serving.volcano.sh,resources=modelroutes;modelservers,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// SetupWithManager registers the reconciler and what it watches.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.HTTPClient == nil {
		r.HTTPClient = &http.Client{Timeout: loraHTTPTimeout}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("modelbooster").
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		For(&workloadv1alpha1.ModelBooster{}).
		Owns(&workloadv1alpha1.ModelServing{}).
		Owns(&networkingv1alpha1.ModelServer{}).
		Owns(&networkingv1alpha1.ModelRoute{}).
		Owns(&workloadv1alpha1.AutoscalingPolicy{}).
		Owns(&workloadv1alpha1.AutoscalingPolicyBinding{}).
		// Someone else's autoscaler naming a generated ModelServing owns its replica count.
		Watches(&workloadv1alpha1.AutoscalingPolicy{}, handler.EnqueueRequestsFromMapFunc(r.boostersOfScaler)).
		Watches(&workloadv1alpha1.AutoscalingPolicyBinding{}, handler.EnqueueRequestsFromMapFunc(r.boostersOfScaler)).
		// Entry pods becoming Ready (or restarting) are when adapters must be loaded.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.boosterOfPod), builder.WithPredicates(entryPodChanged())).
		Complete(r)
}

// boosterOfPod maps a pod to the ModelBooster of its ModelServing, if any.
func (r *Reconciler) boosterOfPod(ctx context.Context, obj client.Object) []reconcile.Request {
	msName := obj.GetLabels()[workloadv1alpha1.ModelServingNameLabel]
	if msName == "" {
		return nil
	}
	ms := &workloadv1alpha1.ModelServing{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: msName}, ms); err != nil {
		return nil
	}
	mb := ms.Labels[workloadv1alpha1.ModelBoosterNameLabel]
	if mb == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ms.Namespace, Name: mb}}}
}

// entryPodChanged passes the events of ModelServing entry pods that matter to LoRA loading:
// creation, deletion, and changes of readiness, IP or restarts. Other status churn would
// make every pod update cost a round of HTTP calls.
func entryPodChanged() predicate.Predicate {
	isEntry := func(o client.Object) bool {
		l := o.GetLabels()
		return l[workloadv1alpha1.ModelServingNameLabel] != "" && l[workloadv1alpha1.EntryLabel] == "true"
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return isEntry(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return isEntry(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return isEntry(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			if !isEntry(e.ObjectNew) {
				return false
			}
			a, okA := e.ObjectOld.(*corev1.Pod)
			b, okB := e.ObjectNew.(*corev1.Pod)
			if !okA || !okB {
				return true
			}
			return engineServing(a) != engineServing(b) || a.Status.PodIP != b.Status.PodIP ||
				restarts(a) != restarts(b) || (a.DeletionTimestamp == nil) != (b.DeletionTimestamp == nil)
		},
	}
}

// Reconcile brings one ModelBooster's generated objects in line with its spec, loads its
// LoRA adapters and writes its status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	mb := &workloadv1alpha1.ModelBooster{}
	if err := r.Get(ctx, req.NamespacedName, mb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, log.FromContext(ctx).WithValues("modelbooster", klog.KObj(mb)))
	if !r.Scope.Manages(mb) {
		return ctrl.Result{}, nil // another project's controller acts on it (--manage=berth)
	}
	if mb.DeletionTimestamp != nil {
		return ctrl.Result{}, nil // owner references let the garbage collector remove the rest
	}

	objs, err := BuildObjects(mb)
	if err != nil {
		// Bad input the schema could not reject: say so and touch nothing, so a typo
		// cannot take down backends that were serving.
		cond := metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonInvalidSpec, Message: err.Error()}
		if prev := meta.FindStatusCondition(mb.Status.Conditions, ConditionReady); prev == nil || prev.Reason != ReasonInvalidSpec || prev.Message != cond.Message {
			r.event(mb, nil, corev1.EventTypeWarning, ReasonInvalidSpec, actionValidate, "%s", err.Error())
		}
		return r.writeStatus(ctx, mb, []metav1.Condition{cond})
	}

	conflicts, err := r.applyObjects(ctx, mb, objs)
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: time.Second}, nil // an object changed under us: derive again
	} else if err != nil {
		r.event(mb, nil, corev1.EventTypeWarning, ReasonSyncFailed, actionSync, "%v", err)
		return ctrl.Result{}, err
	}

	var conds []metav1.Condition
	ready, err := r.readyCondition(ctx, mb, conflicts)
	if err != nil {
		return ctrl.Result{}, err
	}
	conds = append(conds, ready)
	var result ctrl.Result
	if lora := r.syncAdapters(ctx, mb); lora != nil {
		conds = append(conds, *lora)
		result.RequeueAfter = loraResync
		if lora.Reason == ReasonAdapterLoadFailed {
			result.RequeueAfter = loraRetry
		}
	}
	res, err := r.writeStatus(ctx, mb, conds)
	if err != nil || res.RequeueAfter > 0 {
		return res, err
	}
	return result, nil
}

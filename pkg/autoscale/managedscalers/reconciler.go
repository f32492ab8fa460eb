// Package managedscalers is berth-controller's reconciler for llm-d's annotation path: a
// HorizontalPodAutoscaler (autoscaling/v2), or a KEDA ScaledObject when KEDA is
// installed, annotated llm-d.ai/managed: "true" and llm-d.ai/model-id, whose
// scaleTargetRef is a ModelServing, is a variant of that model without a
// VariantAutoscaling. Berth sizes it as llm-d sizes such a variant (pkg/autoscale/
// modelvariants: the saturation analyzer over all variants of the model) and exports its
// desired replicas as wva_desired_replicas{variant_name=<the HPA's or ScaledObject's
// name>, namespace, accelerator_type}, with wva_current_replicas and wva_desired_ratio.
// The user's HPA (through a Prometheus adapter's External metric) or KEDA (through a
// prometheus trigger) reads it and scales the ModelServing; Berth never scales it here.
//
// Objects whose workload is not a ModelServing are left to llm-d's own autoscaler.
package managedscalers

import (
	"context"
	"maps"
	"sync"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/berth-sh/berth/pkg/autoscale/modelvariants"
	"github.com/berth-sh/berth/pkg/scope"
)

// Event reasons on an annotated HPA or ScaledObject.
const (
	// ReasonDesiredReplicas: the exported desired replicas changed (from, to, why).
	ReasonDesiredReplicas = "DesiredReplicas"
	// ReasonInvalidAnnotations: the llm-d annotations do not declare a variant (the
	// message names the annotation); nothing is exported.
	ReasonInvalidAnnotations = "InvalidAnnotations"
	// Problems sizing the variant are sent under modelvariants' reasons (TargetNotFound,
	// TargetNotScalable, TargetDeclaredTwice, UnknownMetric); WaitingForMetrics is not sent.

	actionSize        = "Size"
	defaultSyncPeriod = 30 * time.Second
)

// Reconciler exports the desired replicas of annotated HPAs and, when ScaledObjects is
// set, ScaledObjects.
type Reconciler struct {
	// Scope is which objects it acts on (scope.All when zero): with scope.Berth only
	// those labelled serving.berth.sh/managed=true.
	Scope    scope.Mode
	Client   client.Client
	Recorder events.EventRecorder
	// Sizer sizes the variants (shared with the VariantAutoscaling reconciler).
	Sizer *modelvariants.Sizer
	// ScaledObjects: KEDA's ScaledObject kind is served (discovered at start); watch it.
	ScaledObjects bool
	// SyncPeriod is how often each variant is sized (default 30 s, as a VariantAutoscaling).
	SyncPeriod time.Duration

	mu   sync.Mutex
	last map[string]state // by variant key
}

// state is what was last exported or reported for a variant, so events say what changed.
type state struct {
	desired int32
	problem string
}

// RBAC: read HPAs and KEDA ScaledObjects (their annotations declare the variants); the
// workloads' scale subresource, pods and ModelServers are read as for a VariantAutoscaling.
//
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch
// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects,verbs=get;list;watch
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=modelservings/scale,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.serving.volcano.sh,resources=modelservers,verbs=get;list;watch

// SetupWithManager registers a controller for HPAs and, when ScaledObjects is set, one for
// ScaledObjects. Only objects that are or were annotated llm-d.ai/managed reach them;
// each variant requeues itself every sync period.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.SyncPeriod <= 0 {
		r.SyncPeriod = defaultSyncPeriod
	}
	r.last = map[string]state{}
	if err := ctrl.NewControllerManagedBy(mgr).
		Named("llmd-managed-hpa").
		For(&autoscalingv2.HorizontalPodAutoscaler{}, builder.WithPredicates(managedPredicate())).
		Complete(reconcileFunc(r.reconcileHPA)); err != nil {
		return err
	}
	if !r.ScaledObjects {
		return nil
	}
	so := &unstructured.Unstructured{}
	so.SetGroupVersionKind(modelvariants.ScaledObjectGVK)
	return ctrl.NewControllerManagedBy(mgr).
		Named("llmd-managed-scaledobject").
		For(so, builder.WithPredicates(managedPredicate())).
		Complete(reconcileFunc(r.reconcileScaledObject))
}

type reconcileFunc func(context.Context, ctrl.Request) (ctrl.Result, error)

func (f reconcileFunc) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return f(ctx, req)
}

// managedPredicate passes objects annotated llm-d.ai/managed: "true", and an update that
// removes the annotation (its series must go).
func managedPredicate() predicate.Predicate {
	managed := func(o client.Object) bool { return o != nil && modelvariants.IsManaged(o) }
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return managed(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return managed(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return managed(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			if !managed(e.ObjectOld) && !managed(e.ObjectNew) {
				return false
			}
			// Status writes by the HPA controller every 15 s change nothing declared here.
			return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
				!maps.Equal(e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()) ||
				!maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) ||
				e.ObjectOld.GetDeletionTimestamp() != e.ObjectNew.GetDeletionTimestamp()
		},
	}
}

func (r *Reconciler) reconcileHPA(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var hpa autoscalingv2.HorizontalPodAutoscaler
	if err := r.Client.Get(ctx, req.NamespacedName, &hpa); err != nil {
		if apierrors.IsNotFound(err) {
			r.gone(modelvariants.SourceHPA, req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	ctx = ctrl.LoggerInto(ctx, log.FromContext(ctx).WithValues("hpa", klog.KObj(&hpa)))
	// KEDA's own HPA carries its ScaledObject's annotations; the ScaledObject is the variant.
	if !hpa.DeletionTimestamp.IsZero() || !modelvariants.IsManaged(&hpa) || modelvariants.ControlledByScaledObject(&hpa) || !r.Scope.Manages(&hpa) {
		r.gone(modelvariants.SourceHPA, req.NamespacedName)
		return ctrl.Result{}, nil
	}
	v, err := modelvariants.FromHPA(&hpa)
	return r.size(ctx, &hpa, modelvariants.SourceHPA, v, err)
}

func (r *Reconciler) reconcileScaledObject(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	so := &unstructured.Unstructured{}
	so.SetGroupVersionKind(modelvariants.ScaledObjectGVK)
	if err := r.Client.Get(ctx, req.NamespacedName, so); err != nil {
		if apierrors.IsNotFound(err) {
			r.gone(modelvariants.SourceScaledObject, req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	ctx = ctrl.LoggerInto(ctx, log.FromContext(ctx).WithValues("scaledobject", klog.KObj(so)))
	if so.GetDeletionTimestamp() != nil || !modelvariants.IsManaged(so) || !r.Scope.Manages(so) {
		r.gone(modelvariants.SourceScaledObject, req.NamespacedName)
		return ctrl.Result{}, nil
	}
	v, err := modelvariants.FromScaledObject(so)
	return r.size(ctx, so, modelvariants.SourceScaledObject, v, err)
}

// size sizes the variant obj declares (parseErr: it declares none) and exports the result.
func (r *Reconciler) size(ctx context.Context, obj client.Object, source modelvariants.Source, v modelvariants.Variant, parseErr error) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}
	if parseErr != nil {
		modelvariants.Forget(key.Namespace, key.Name)
		r.Sizer.Forget(modelvariants.Variant{Source: source, Namespace: key.Namespace, Name: key.Name})
		r.report(obj, source, ReasonInvalidAnnotations, parseErr.Error())
		return ctrl.Result{}, nil // an edit of the annotations brings it back
	}
	if !v.ScalesModelServing() {
		// llm-d's own autoscaler sizes Deployments and LeaderWorkerSets; exporting a
		// second series of the same variant_name would make an HPA see two values.
		logger.V(1).Info("not a ModelServing's: left to llm-d's autoscaler", "target", v.Target)
		r.gone(v.Source, key)
		return ctrl.Result{}, nil
	}
	res, err := r.Sizer.Size(ctx, v)
	if err != nil {
		p, ok := modelvariants.AsProblem(err)
		if !ok {
			return ctrl.Result{}, err
		}
		if p.Reason == modelvariants.ReasonTargetNotFound || p.Reason == modelvariants.ReasonTargetDeclaredTwice {
			modelvariants.Forget(v.Namespace, v.Name) // nothing of this variant to scale
		}
		if p.Reason != modelvariants.ReasonWaitingForMetrics {
			r.report(obj, v.Source, p.Reason, p.Message)
		}
		logger.Info("variant not sized", "reason", p.Reason, "message", p.Message)
		return ctrl.Result{RequeueAfter: r.SyncPeriod}, nil
	}
	modelvariants.Export(v.Namespace, v.Name, res.Accelerator, res.Current, res.Target)
	r.mu.Lock()
	prev, seen := r.last[v.Key()]
	r.last[v.Key()] = state{desired: res.Target}
	r.mu.Unlock()
	if !seen || prev.desired != res.Target || prev.problem != "" {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, ReasonDesiredReplicas, actionSize,
			"%s %s: %s %d -> %d (%d replicas, %d reporting): %s", v.Target.Kind, v.Target.Name, modelvariants.MetricDesiredReplicas, prev.desired, res.Target, res.Current, res.Reporting, res.Reason)
	}
	logger.V(1).Info("variant sized", "current", res.Current, "desired", res.Target, "reason", res.Reason)
	return ctrl.Result{RequeueAfter: r.SyncPeriod}, nil
}

// report sends a warning once per new problem.
func (r *Reconciler) report(obj client.Object, source modelvariants.Source, reason, msg string) {
	key := string(source) + "/" + obj.GetNamespace() + "/" + obj.GetName()
	r.mu.Lock()
	prev := r.last[key]
	r.last[key] = state{problem: reason}
	r.mu.Unlock()
	if prev.problem != reason {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, reason, actionSize, "%s", msg)
	}
}

// gone drops an object's series and what was remembered of it.
func (r *Reconciler) gone(source modelvariants.Source, key types.NamespacedName) {
	v := modelvariants.Variant{Source: source, Namespace: key.Namespace, Name: key.Name}
	r.mu.Lock()
	_, had := r.last[v.Key()]
	delete(r.last, v.Key())
	r.mu.Unlock()
	if had {
		modelvariants.Forget(key.Namespace, key.Name)
	}
	r.Sizer.Forget(v)
}

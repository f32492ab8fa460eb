package binding

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale"
)

// Scale from zero. A target at zero replicas has no pods, so no metric, and the metrics alone
// never bring it back. berth-router, holding requests for it, writes the time into its
// demand annotation (workloadv1alpha1.DemandAnnotation); a demand newer than the target's
// last scale to zero and at most demandWindow old takes it to max(1, minReplicas) (never
// above maxReplicas), and a target with recent demand is not taken to zero meanwhile. The
// answer is the same for one write or many: the replica count, not a count of requests.

// demandWindow is how long a demand counts (the router writes it again every few seconds
// while it holds requests): long enough that the held requests are answered before the
// model may go back to zero, short enough that an old annotation is no demand.
const demandWindow = 30 * time.Second

// recentDemand says whether t's demand asks for replicas at now.
func recentDemand(t *target, st *state, now time.Time) bool {
	if t.demand.IsZero() || now.Sub(t.demand) > demandWindow || t.demand.After(now.Add(demandWindow)) {
		return false
	}
	// Demand from before the autoscaler last took it to zero was for replicas since gone.
	return t.demand.After(st.zeroAt[t.key])
}

// fromZero changes d when demand asks for replicas the metrics cannot: from zero to
// max(1, lo) (at most hi), or keeping one replica where the decision would take the last
// away. It reports whether it scaled from zero.
func (r *Reconciler) fromZero(targets []*target, st *state, current, lo, hi int32, d *autoscale.Decision, now time.Time) bool {
	var demanded *target
	for _, t := range targets {
		if recentDemand(t, st, now) {
			demanded = t
			break
		}
	}
	if demanded == nil || hi < 1 {
		return false
	}
	switch {
	case current == 0 && d.Desired == 0:
		d.Desired = min(max(1, lo), hi)
		st.scaler.Applied(now, d.Desired)
		d.Reason = ReasonScaledFromZero
		d.Message = fmt.Sprintf("scaled from zero to %d: a router holds requests for %s (annotation %s=%s)", d.Desired,
			demanded.key, workloadv1alpha1.DemandAnnotation, demanded.demand.UTC().Format(time.RFC3339))
		return true
	case current > 0 && d.Desired == 0:
		d.Desired = 1
		st.scaler.Applied(now, d.Desired)
		d.Reason = autoscale.ReasonScaleToZeroGrace
		d.Message = fmt.Sprintf("keeping one replica: a router asked for %s at %s, within %s", demanded.key,
			demanded.demand.UTC().Format(time.RFC3339), demandWindow)
	}
	return false
}

// scaledFromZeroEvent reports a scale from zero on the binding or policy.
func (r *Reconciler) scaledFromZeroEvent(j job, t *target, to int32) {
	r.Recorder.Eventf(j.owner, t.ref(), corev1.EventTypeNormal, ReasonScaledFromZero, actionScale,
		"%s: 0 -> %d replicas: a router holds requests for it (%s %s)", t.key, to, workloadv1alpha1.DemandAnnotation, t.demand.UTC().Format(time.RFC3339))
}

// demandChanged lets through the ModelServing updates that change its demand annotation.
func demandChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			a := e.ObjectNew.GetAnnotations()[workloadv1alpha1.DemandAnnotation]
			return a != "" && a != e.ObjectOld.GetAnnotations()[workloadv1alpha1.DemandAnnotation]
		},
	}
}

// bindingsOfTarget are the bindings in obj's namespace that scale the ModelServing obj.
func (r *Reconciler) bindingsOfTarget(ctx context.Context, obj client.Object) []reconcile.Request {
	var list workloadv1alpha1.AutoscalingPolicyBindingList
	if err := r.Client.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	names := func(ref corev1.ObjectReference) bool {
		return ref.Name == obj.GetName() && (ref.Kind == "" || ref.Kind == defaultTargetKind) &&
			(ref.Namespace == "" || ref.Namespace == obj.GetNamespace())
	}
	var out []reconcile.Request
	for _, b := range list.Items {
		hit := b.Spec.ScalingConfiguration != nil && names(b.Spec.ScalingConfiguration.Target.TargetRef)
		if c := b.Spec.OptimizerConfiguration; c != nil {
			for _, p := range c.Params {
				hit = hit || names(p.Target.TargetRef)
			}
		}
		if hit {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Name}})
		}
	}
	return out
}

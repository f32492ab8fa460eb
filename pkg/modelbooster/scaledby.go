package modelbooster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// A backend with fixed replicas (Kthena 1.0's spec.backend) is sized by the ModelBooster,
// and a scale by hand is put back. Kthena 1.0 has no autoscaling in the ModelBooster: its
// users scale the generated ModelServing with an AutoscalingPolicy of their own that names
// it (spec.homogeneousTarget or heterogeneousTarget), or with a binding. Kthena's controller
// writes a ModelServing only when the ModelBooster changes, so such an autoscaler keeps its
// count there; Berth's would put the fixed count back at once and fight it (the autoscaler
// takes a backend at zero to one, the ModelBooster back to zero, ...). So a ModelServing
// that an autoscaler outside the ModelBooster names is autoscaled: its replicas are written
// at creation only, as for a backend with minReplicas and maxReplicas.

// externalScalers maps the name of each ModelServing in mb's namespace that an
// AutoscalingPolicy or AutoscalingPolicyBinding not generated for mb scales to a phrase
// naming that autoscaler ("AutoscalingPolicy qwen-scaler").
func (r *Reconciler) externalScalers(ctx context.Context, mb *workloadv1alpha1.ModelBooster) (map[string]string, error) {
	out := map[string]string{}
	var policies workloadv1alpha1.AutoscalingPolicyList
	if err := r.List(ctx, &policies, client.InNamespace(mb.Namespace)); err != nil {
		return nil, fmt.Errorf("list AutoscalingPolicies: %w", err)
	}
	for i := range policies.Items {
		p := &policies.Items[i]
		if !metav1.IsControlledBy(p, mb) {
			for _, name := range policyTargets(p) {
				out[name] = "AutoscalingPolicy " + p.Name
			}
		}
	}
	var bindings workloadv1alpha1.AutoscalingPolicyBindingList
	if err := r.List(ctx, &bindings, client.InNamespace(mb.Namespace)); err != nil {
		return nil, fmt.Errorf("list AutoscalingPolicyBindings: %w", err)
	}
	for i := range bindings.Items {
		b := &bindings.Items[i]
		if !metav1.IsControlledBy(b, mb) {
			for _, name := range bindingTargets(b) {
				out[name] = "AutoscalingPolicyBinding " + b.Name
			}
		}
	}
	return out, nil
}

// policyTargets are the ModelServings whose replicas a policy's own target scales (a
// disaggregatedTarget scales roles, not the replica count, and is left out).
func policyTargets(p *workloadv1alpha1.AutoscalingPolicy) []string {
	var out []string
	if t := p.Spec.HomogeneousTarget; t != nil {
		out = appendServing(out, t.Target.TargetRef, p.Namespace)
	}
	if t := p.Spec.HeterogeneousTarget; t != nil {
		for _, prm := range t.Params {
			out = appendServing(out, prm.Target.TargetRef, p.Namespace)
		}
	}
	return out
}

// bindingTargets are the ModelServings a binding scales.
func bindingTargets(b *workloadv1alpha1.AutoscalingPolicyBinding) []string {
	var out []string
	if c := b.Spec.ScalingConfiguration; c != nil {
		out = appendServing(out, c.Target.TargetRef, b.Namespace)
	}
	if c := b.Spec.OptimizerConfiguration; c != nil {
		for _, prm := range c.Params {
			out = appendServing(out, prm.Target.TargetRef, b.Namespace)
		}
	}
	return out
}

func appendServing(out []string, ref corev1.ObjectReference, ns string) []string {
	if (ref.Kind == "" || ref.Kind == "ModelServing") && (ref.Namespace == "" || ref.Namespace == ns) && ref.Name != "" {
		out = append(out, ref.Name)
	}
	return out
}

// boostersOfScaler maps an autoscaling policy or binding to the ModelBoosters whose
// ModelServings it names, so adding or removing an autoscaler decides at once who sizes
// a fixed backend.
func (r *Reconciler) boostersOfScaler(ctx context.Context, obj client.Object) []reconcile.Request {
	var names []string
	switch o := obj.(type) {
	case *workloadv1alpha1.AutoscalingPolicy:
		names = policyTargets(o)
	case *workloadv1alpha1.AutoscalingPolicyBinding:
		names = bindingTargets(o)
	}
	seen := map[string]bool{}
	var out []reconcile.Request
	for _, name := range names {
		ms := &workloadv1alpha1.ModelServing{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}, ms); err != nil {
			continue
		}
		if mb := ms.Labels[workloadv1alpha1.ModelBoosterNameLabel]; mb != "" && !seen[mb] {
			seen[mb] = true
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: mb}})
		}
	}
	return out
}

package binding

import (
	"context"
	"fmt"
	"sort"

	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// claim is what one autoscaler (a binding, or a policy with its own target) scales: keys
// "Kind/name" for whole targets, "ModelServing/name#role" for a disaggregatedTarget's roles.
type claim struct {
	obj  client.Object
	kind string // AutoscalingPolicyBinding or AutoscalingPolicy
	what string // how the message names it
	keys []string
}

// checkConflicts refuses to act on a target another autoscaler already scales: two
// autoscalers on one object would undo each other every sync. The oldest keeps it, whether
// it is a binding or a policy with its own target.
func (r *Reconciler) checkConflicts(ctx context.Context, self client.Object, mine []string) error {
	claims, err := r.claims(ctx, self.GetNamespace())
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, k := range mine {
		want[k] = true
	}
	for _, c := range claims {
		if c.obj.GetUID() == self.GetUID() || !c.obj.GetDeletionTimestamp().IsZero() || !olderThan(c, self) {
			continue
		}
		for _, k := range c.keys {
			if want[k] {
				reason := ReasonConflict
				if c.kind == "AutoscalingPolicy" {
					reason = ReasonConflictPolicy
				}
				return &problem{reason, fmt.Sprintf("%s is already scaled by %s; remove one of the two", describeKey(k), c.what)}
			}
		}
	}
	return nil
}

// claims lists the namespace's autoscalers and what each scales. A binding naming a policy
// that has its own target scales nothing (it is refused), so it claims nothing.
func (r *Reconciler) claims(ctx context.Context, ns string) ([]claim, error) {
	var bindings workloadv1alpha1.AutoscalingPolicyBindingList
	if err := r.Client.List(ctx, &bindings, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	var policies workloadv1alpha1.AutoscalingPolicyList
	if err := r.Client.List(ctx, &policies, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	withTarget := map[string]bool{}
	var out []claim
	for i := range policies.Items {
		p := &policies.Items[i]
		if !p.Spec.HasTarget() {
			continue
		}
		withTarget[p.Name] = true
		out = append(out, claim{obj: p, kind: "AutoscalingPolicy", what: fmt.Sprintf("AutoscalingPolicy %s (its %s)", p.Name, ownTargetField(&p.Spec)), keys: policyKeys(p)})
	}
	for i := range bindings.Items {
		b := &bindings.Items[i]
		if withTarget[b.Spec.PolicyRef.Name] {
			continue
		}
		var keys []string
		for _, ref := range bindingRefs(b) {
			if ref.Namespace == "" || ref.Namespace == ns {
				keys = append(keys, refKey(ref.Kind, ref.Name))
			}
		}
		out = append(out, claim{obj: b, kind: "AutoscalingPolicyBinding", what: "AutoscalingPolicyBinding " + b.Name, keys: keys})
	}
	return out, nil
}

// policyKeys are what a policy's own target scales.
func policyKeys(p *workloadv1alpha1.AutoscalingPolicy) []string {
	var out []string
	s := &p.Spec
	switch {
	case s.HomogeneousTarget != nil:
		out = append(out, refKey(s.HomogeneousTarget.Target.TargetRef.Kind, s.HomogeneousTarget.Target.TargetRef.Name))
	case s.HeterogeneousTarget != nil:
		for _, prm := range s.HeterogeneousTarget.Params {
			out = append(out, refKey(prm.Target.TargetRef.Kind, prm.Target.TargetRef.Name))
		}
	case s.DisaggregatedTarget != nil:
		for role := range s.DisaggregatedTarget.Roles {
			out = append(out, roleKey(s.DisaggregatedTarget.TargetRef.Name, role))
		}
		sort.Strings(out)
	}
	return out
}

func bindingRefs(b *workloadv1alpha1.AutoscalingPolicyBinding) []struct{ Kind, Name, Namespace string } {
	var out []struct{ Kind, Name, Namespace string }
	if c := b.Spec.ScalingConfiguration; c != nil {
		r := c.Target.TargetRef
		out = append(out, struct{ Kind, Name, Namespace string }{r.Kind, r.Name, r.Namespace})
	}
	if c := b.Spec.OptimizerConfiguration; c != nil {
		for _, p := range c.Params {
			r := p.Target.TargetRef
			out = append(out, struct{ Kind, Name, Namespace string }{r.Kind, r.Name, r.Namespace})
		}
	}
	return out
}

func refKey(kind, name string) string {
	if kind == "" {
		kind = defaultTargetKind
	}
	return kind + "/" + name
}

func roleKey(modelServing, role string) string {
	return defaultTargetKind + "/" + modelServing + "#" + role
}

// describeKey names a claimed key in a message: "ModelServing chat", "role prefill of ModelServing pd".
func describeKey(k string) string {
	for i := len(k) - 1; i >= 0; i-- {
		if k[i] == '#' {
			return fmt.Sprintf("role %s of %s", k[i+1:], describeKey(k[:i]))
		}
	}
	for i := 0; i < len(k); i++ {
		if k[i] == '/' {
			return k[:i] + " " + k[i+1:]
		}
	}
	return k
}

// olderThan orders autoscalers by creation, then kind and name, so exactly one of two keeps
// a target.
func olderThan(c claim, self client.Object) bool {
	a, b := c.obj.GetCreationTimestamp(), self.GetCreationTimestamp()
	if !a.Equal(&b) {
		return a.Before(&b)
	}
	selfKind := "AutoscalingPolicyBinding"
	if _, ok := self.(*workloadv1alpha1.AutoscalingPolicy); ok {
		selfKind = "AutoscalingPolicy"
	}
	if c.kind != selfKind {
		return c.kind < selfKind
	}
	return c.obj.GetName() < self.GetName()
}

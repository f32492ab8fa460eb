package modelbooster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// applyObjects creates or updates every generated object and deletes the ones the spec no
// longer asks for. Names taken by objects this ModelBooster does not control are returned
// as conflicts, not errors: the rest is still applied.
func (r *Reconciler) applyObjects(ctx context.Context, mb *workloadv1alpha1.ModelBooster, objs *Objects) ([]string, error) {
	var conflicts []string
	apply := func(want, have client.Object, sync func(have, want client.Object) bool) error {
		err := r.ensure(ctx, mb, want, have, sync)
		if errors.As(err, new(*conflictError)) {
			conflicts = append(conflicts, err.Error())
			return nil
		}
		return err
	}
	scalers, err := r.externalScalers(ctx, mb)
	if err != nil {
		return nil, err
	}
	for _, want := range objs.ModelServings {
		if err := apply(want, &workloadv1alpha1.ModelServing{}, func(have, want client.Object) bool {
			h, w := have.(*workloadv1alpha1.ModelServing), want.(*workloadv1alpha1.ModelServing)
			scaler := scalers[w.Name]
			if scaler != "" && h.Spec.Replicas != nil && w.Spec.Replicas != nil && *h.Spec.Replicas != *w.Spec.Replicas &&
				!BackendAutoscaled(mb, backendOf(mb, w.Labels[workloadv1alpha1.ModelBoosterBackendLabel])) {
				r.event(mb, h, corev1.EventTypeNormal, ReasonScaledByAutoscaler, actionSync,
					"ModelServing %s keeps %d replicas (the backend's replicas: %d): %s scales it", h.Name, *h.Spec.Replicas, *w.Spec.Replicas, scaler)
			}
			return syncServing(mb, h, w, scaler)
		}); err != nil {
			return nil, err
		}
	}
	for _, want := range objs.ModelServers {
		if err := apply(want, &networkingv1alpha1.ModelServer{}, func(have, want client.Object) bool {
			h, w := have.(*networkingv1alpha1.ModelServer), want.(*networkingv1alpha1.ModelServer)
			return syncSpec(&h.ObjectMeta, &w.ObjectMeta, &h.Spec, w.Spec)
		}); err != nil {
			return nil, err
		}
	}
	if err := apply(objs.ModelRoute, &networkingv1alpha1.ModelRoute{}, func(have, want client.Object) bool {
		h, w := have.(*networkingv1alpha1.ModelRoute), want.(*networkingv1alpha1.ModelRoute)
		return syncSpec(&h.ObjectMeta, &w.ObjectMeta, &h.Spec, w.Spec)
	}); err != nil {
		return nil, err
	}
	for _, want := range objs.Policies {
		if err := apply(want, &workloadv1alpha1.AutoscalingPolicy{}, func(have, want client.Object) bool {
			h, w := have.(*workloadv1alpha1.AutoscalingPolicy), want.(*workloadv1alpha1.AutoscalingPolicy)
			return syncSpec(&h.ObjectMeta, &w.ObjectMeta, &h.Spec, w.Spec)
		}); err != nil {
			return nil, err
		}
	}
	for _, want := range objs.Bindings {
		if err := apply(want, &workloadv1alpha1.AutoscalingPolicyBinding{}, func(have, want client.Object) bool {
			h, w := have.(*workloadv1alpha1.AutoscalingPolicyBinding), want.(*workloadv1alpha1.AutoscalingPolicyBinding)
			return syncSpec(&h.ObjectMeta, &w.ObjectMeta, &h.Spec, w.Spec)
		}); err != nil {
			return nil, err
		}
	}
	return conflicts, r.deleteStale(ctx, mb, objs)
}

func asObjects[T client.Object](items []T) []client.Object {
	out := make([]client.Object, len(items))
	for i, o := range items {
		out[i] = o
	}
	return out
}

// conflictError says a generated object's name is taken by an object this ModelBooster does
// not control; the controller leaves it alone and reports it.
type conflictError struct{ kind, name, owner string }

func (e *conflictError) Error() string {
	return fmt.Sprintf("%s %s exists and is %s, not this ModelBooster's: rename or delete it", e.kind, e.name, e.owner)
}

// ensure creates want, or brings the live object in line with it (sync copies want's
// generated fields into the live object and says whether anything changed), writing only
// when something did.
func (r *Reconciler) ensure(ctx context.Context, mb *workloadv1alpha1.ModelBooster, want, have client.Object, sync func(have, want client.Object) bool) error {
	kind := kindOf(want)
	err := r.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		if err := r.Create(ctx, want); apierrors.IsAlreadyExists(err) {
			return nil // the cache lags behind our own create; the next pass sees it
		} else if err != nil {
			return fmt.Errorf("create %s %s: %w", kind, want.GetName(), err)
		}
		r.event(mb, want, corev1.EventTypeNormal, ReasonCreated, actionCreate, "created %s %s", kind, want.GetName())
		return nil
	}
	if err != nil {
		return err
	}
	if owner := metav1.GetControllerOf(have); owner == nil || owner.UID != mb.UID {
		if !isPredecessor(owner, mb) {
			who := "not controlled by any object"
			if owner != nil {
				who = fmt.Sprintf("controlled by %s %s", owner.Kind, owner.Name)
			}
			return &conflictError{kind: kind, name: want.GetName(), owner: who}
		}
		// Left by a deleted ModelBooster of this name that the garbage collector has not
		// reached yet: adopt it rather than wait.
	}
	if !sync(have, want) {
		return nil
	}
	if err := r.Update(ctx, have); err != nil {
		return fmt.Errorf("update %s %s: %w", kind, want.GetName(), err)
	}
	r.event(mb, have, corev1.EventTypeNormal, ReasonUpdated, actionUpdate, "updated %s %s", kind, want.GetName())
	return nil
}

// isPredecessor says whether owner is a ModelBooster of mb's name with another UID: one that
// was deleted and recreated.
func isPredecessor(owner *metav1.OwnerReference, mb *workloadv1alpha1.ModelBooster) bool {
	return owner != nil && owner.Kind == "ModelBooster" && owner.Name == mb.Name && owner.UID != mb.UID &&
		strings.HasPrefix(owner.APIVersion, workloadv1alpha1.SchemeGroupVersion.Group+"/")
}

func kindOf(obj client.Object) string {
	switch obj.(type) {
	case *workloadv1alpha1.ModelServing:
		return "ModelServing"
	case *networkingv1alpha1.ModelServer:
		return "ModelServer"
	case *networkingv1alpha1.ModelRoute:
		return "ModelRoute"
	case *workloadv1alpha1.AutoscalingPolicy:
		return "AutoscalingPolicy"
	case *workloadv1alpha1.AutoscalingPolicyBinding:
		return "AutoscalingPolicyBinding"
	}
	return fmt.Sprintf("%T", obj)
}

// syncMeta sets the labels, annotations and controller reference the controller generates,
// keeping labels and annotations others added.
func syncMeta(have, want *metav1.ObjectMeta) bool {
	changed := false
	for k, v := range want.Labels {
		if cur, ok := have.Labels[k]; !ok || cur != v {
			if have.Labels == nil {
				have.Labels = map[string]string{}
			}
			have.Labels[k] = v
			changed = true
		}
	}
	// Annotations the controller owns: present when generated, removed when not.
	for _, k := range []string{boosterSpecHashAnnotation, workloadv1alpha1.ScaleToZeroGracePeriodAnnotation} {
		v, ok := want.Annotations[k]
		cur, has := have.Annotations[k]
		switch {
		case ok && (!has || cur != v):
			if have.Annotations == nil {
				have.Annotations = map[string]string{}
			}
			have.Annotations[k] = v
			changed = true
		case !ok && has:
			delete(have.Annotations, k)
			changed = true
		}
	}
	ref := want.OwnerReferences[0]
	if c := metav1.GetControllerOfNoCopy(have); c == nil || c.UID != ref.UID || !ptrTrue(c.BlockOwnerDeletion) {
		refs := slices.DeleteFunc(have.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Controller != nil && *o.Controller })
		have.OwnerReferences = append(refs, ref)
		changed = true
	}
	return changed
}

func ptrTrue(b *bool) bool { return b != nil && *b }

// syncSpec replaces the live spec with the generated one when the ModelBooster asks for
// something else (the hash differs) or someone changed a field the controller sets. The
// live spec also holds server defaults the generated one never set: DeepDerivative ignores
// what the generated spec leaves empty, so those defaults alone never cause a write.
func syncSpec[S any](haveMeta, wantMeta *metav1.ObjectMeta, have *S, want S) bool {
	stale := haveMeta.Annotations[boosterSpecHashAnnotation] != wantMeta.Annotations[boosterSpecHashAnnotation]
	changed := syncMeta(haveMeta, wantMeta)
	if stale || !equality.Semantic.DeepDerivative(want, *have) {
		*have = want
		changed = true
	}
	return changed
}

// syncServing is syncSpec for a ModelServing, except that an autoscaled backend's replica
// count is never written after creation: the autoscaler owns it (scale subresource). That
// holds too for a fixed backend whose ModelServing an autoscaler outside the ModelBooster
// scales (scaler names it; see scaledby.go).
func syncServing(mb *workloadv1alpha1.ModelBooster, have, want *workloadv1alpha1.ModelServing, scaler string) bool {
	spec := *want.Spec.DeepCopy()
	if b := backendOf(mb, want.Labels[workloadv1alpha1.ModelBoosterBackendLabel]); b != nil && (BackendAutoscaled(mb, b) || scaler != "") {
		spec.Replicas = have.Spec.Replicas
	}
	return syncSpec(&have.ObjectMeta, &want.ObjectMeta, &have.Spec, spec)
}

func backendOf(mb *workloadv1alpha1.ModelBooster, name string) *workloadv1alpha1.ModelBackend {
	for _, b := range Backends(mb) {
		if b.Name == name {
			return b
		}
	}
	return nil
}

// deleteStale deletes what this ModelBooster generated before and no longer asks for: the
// objects of a removed or renamed backend, and policies and bindings of autoscaling that
// was turned off. It does not leave this to the garbage collector, which only acts once
// the ModelBooster itself is gone.
func (r *Reconciler) deleteStale(ctx context.Context, mb *workloadv1alpha1.ModelBooster, objs *Objects) error {
	wanted := map[string]bool{}
	mark := func(items []client.Object) {
		for _, o := range items {
			wanted[kindOf(o)+"/"+o.GetName()] = true
		}
	}
	mark(asObjects(objs.ModelServings))
	mark(asObjects(objs.ModelServers))
	mark([]client.Object{objs.ModelRoute})
	mark(asObjects(objs.Policies))
	mark(asObjects(objs.Bindings))

	sel := client.MatchingLabels{workloadv1alpha1.ModelBoosterNameLabel: mb.Name}
	lists := []client.ObjectList{
		&workloadv1alpha1.ModelServingList{}, &networkingv1alpha1.ModelServerList{}, &networkingv1alpha1.ModelRouteList{},
		&workloadv1alpha1.AutoscalingPolicyList{}, &workloadv1alpha1.AutoscalingPolicyBindingList{},
	}
	for _, list := range lists {
		if err := r.List(ctx, list, client.InNamespace(mb.Namespace), sel); err != nil {
			return err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return err
		}
		for _, item := range items {
			obj := item.(client.Object)
			if wanted[kindOf(obj)+"/"+obj.GetName()] {
				continue
			}
			// Only what this ModelBooster (or its deleted predecessor) controls: a label
			// alone does not make an object ours.
			if owner := metav1.GetControllerOf(obj); owner == nil || (owner.UID != mb.UID && !isPredecessor(owner, mb)) {
				continue
			}
			uid := obj.GetUID()
			err := r.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				continue // gone already, or replaced by an object we have not seen yet
			}
			if err != nil {
				return fmt.Errorf("delete %s %s: %w", kindOf(obj), obj.GetName(), err)
			}
			r.event(mb, obj, corev1.EventTypeNormal, ReasonDeleted, actionDelete, "deleted %s %s: %s", kindOf(obj), obj.GetName(), staleWhy(mb, obj))
		}
	}
	return nil
}

func staleWhy(mb *workloadv1alpha1.ModelBooster, obj client.Object) string {
	if b := obj.GetLabels()[workloadv1alpha1.ModelBoosterBackendLabel]; b != "" && backendOf(mb, b) == nil {
		return fmt.Sprintf("backend %s is no longer in the spec", b)
	}
	return "the spec no longer asks for it"
}

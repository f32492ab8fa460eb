package llmazserving

import (
	"context"
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// ensureOwned creates want controlled by owner, or brings the live object of that name in
// line with it, and returns the live object. The live spec holds server defaults want never
// set: DeepDerivative ignores what want leaves empty, so defaults alone never cause a write.
// An object of that name controlled by someone else is a NameConflict problem, left alone.
func ensureOwned(ctx context.Context, c client.Client, rec events.EventRecorder, owner, want client.Object) (client.Object, error) {
	live := want.DeepCopyObject().(client.Object)
	err := c.Get(ctx, client.ObjectKeyFromObject(want), live)
	if apierrors.IsNotFound(err) {
		if err := controllerutil.SetControllerReference(owner, want, c.Scheme()); err != nil {
			return nil, err
		}
		if err := c.Create(ctx, want); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return want, nil // the cache lags behind our own create; the next pass sees it
			}
			return nil, fmt.Errorf("create %s %s: %w", kindName(c, want), want.GetName(), err)
		}
		rec.Eventf(owner, want, corev1.EventTypeNormal, ReasonCreated, actionCreate, "created %s %s", kindName(c, want), want.GetName())
		return want, nil
	}
	if err != nil {
		return nil, err
	}
	if !metav1.IsControlledBy(live, owner) {
		return nil, &problem{ReasonNameConflict, fmt.Sprintf("%s %s already exists and is not controlled by %s %s: rename one of them",
			kindName(c, want), want.GetName(), kindName(c, owner), owner.GetName())}
	}
	changed := false
	labels := live.GetLabels()
	for k, v := range want.GetLabels() {
		if labels[k] != v {
			if labels == nil {
				labels = map[string]string{}
			}
			labels[k], changed = v, true
		}
	}
	annotations := live.GetAnnotations()
	for k, v := range want.GetAnnotations() {
		if annotations[k] != v {
			if annotations == nil {
				annotations = map[string]string{}
			}
			annotations[k], changed = v, true
		}
	}
	live.SetLabels(labels)
	live.SetAnnotations(annotations)
	ws, ls := reflect.ValueOf(want).Elem().FieldByName("Spec"), reflect.ValueOf(live).Elem().FieldByName("Spec")
	if !equality.Semantic.DeepDerivative(ws.Interface(), ls.Interface()) {
		ls.Set(ws)
		changed = true
	}
	if !changed {
		return live, nil
	}
	if err := c.Update(ctx, live); err != nil {
		return nil, fmt.Errorf("update %s %s: %w", kindName(c, want), want.GetName(), err)
	}
	rec.Eventf(owner, live, corev1.EventTypeNormal, ReasonUpdated, actionUpdate, "updated %s %s", kindName(c, want), want.GetName())
	return live, nil
}

func kindName(c client.Client, obj client.Object) string {
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return reflect.TypeOf(obj).Elem().Name()
	}
	return gvk.Kind
}

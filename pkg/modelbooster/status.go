package modelbooster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// ModelBooster condition types.
const (
	// ConditionReady is true when every backend's ModelServing is Available and the route exists.
	ConditionReady = "Ready"
	// ConditionLoRAAdaptersLoaded is true when every Ready engine of every backend with LoRA
	// adapters has exactly the backend's adapters loaded. Absent when no backend has any.
	ConditionLoRAAdaptersLoaded = "LoRAAdaptersLoaded"
)

// Reasons of the ModelBooster's conditions. InvalidSpec and AdapterLoadFailed are also
// the reasons of the warning events that report them.
const (
	ReasonInvalidSpec       = "InvalidSpec"
	ReasonNameConflict      = "NameConflict"
	ReasonBackendsNotReady  = "BackendsNotReady"
	ReasonRouteNotReady     = "RouteNotReady"
	ReasonBackendsAvailable = "BackendsAvailable"
	ReasonAdaptersLoaded    = "AdaptersLoaded"
	ReasonAdapterLoadFailed = "AdapterLoadFailed"
	ReasonWaitingForPods    = "WaitingForPods"
)

// readyCondition derives Ready from the backends' ModelServings (each Available by its own
// condition, for its current generation) and the route.
func (r *Reconciler) readyCondition(ctx context.Context, mb *workloadv1alpha1.ModelBooster, conflicts []string) (metav1.Condition, error) {
	if len(conflicts) > 0 {
		return metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonNameConflict, Message: strings.Join(conflicts, "; ")}, nil
	}
	var notReady []string
	for _, b := range Backends(mb) {
		ms := &workloadv1alpha1.ModelServing{}
		name := ObjectName(mb.Name, b.Name)
		if err := r.Get(ctx, types.NamespacedName{Namespace: mb.Namespace, Name: name}, ms); apierrors.IsNotFound(err) {
			notReady = append(notReady, fmt.Sprintf("backend %s: ModelServing %s not created yet", b.Name, name))
			continue
		} else if err != nil {
			return metav1.Condition{}, err
		}
		if why := servingNotAvailable(ms); why != "" {
			notReady = append(notReady, fmt.Sprintf("backend %s: %s", b.Name, why))
		}
	}
	if len(notReady) > 0 {
		return metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonBackendsNotReady, Message: strings.Join(notReady, "; ")}, nil
	}
	route := &networkingv1alpha1.ModelRoute{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: mb.Namespace, Name: mb.Name}, route); apierrors.IsNotFound(err) {
		return metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonRouteNotReady, Message: fmt.Sprintf("ModelRoute %s not created yet", mb.Name)}, nil
	} else if err != nil {
		return metav1.Condition{}, err
	}
	return metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonBackendsAvailable,
		Message: fmt.Sprintf("every backend is available; model %s is routed by ModelRoute %s", ServedModelName(mb), mb.Name)}, nil
}

// servingNotAvailable says why a ModelServing is not Available ("" when it is).
func servingNotAvailable(ms *workloadv1alpha1.ModelServing) string {
	want := int32(1)
	if ms.Spec.Replicas != nil {
		want = *ms.Spec.Replicas
	}
	if ms.Status.ObservedGeneration < ms.Generation {
		return fmt.Sprintf("ModelServing %s has not caught up with its spec yet (generation %d, observed %d)", ms.Name, ms.Generation, ms.Status.ObservedGeneration)
	}
	c := meta.FindStatusCondition(ms.Status.Conditions, workloadv1alpha1.ModelServingAvailable)
	if c != nil && c.Status == metav1.ConditionTrue {
		return ""
	}
	why := fmt.Sprintf("%d of %d ServingGroups available", ms.Status.AvailableReplicas, want)
	if c != nil && c.Message != "" && !strings.Contains(c.Message, "ServingGroups ready") {
		why += " (" + c.Message + ")"
	}
	return why
}

// writeStatus derives the backend statuses, sets conds (dropping LoRAAdaptersLoaded when
// conds has none) and writes the status when it changed.
func (r *Reconciler) writeStatus(ctx context.Context, mb *workloadv1alpha1.ModelBooster, conds []metav1.Condition) (ctrl.Result, error) {
	st := mb.Status.DeepCopy()
	st.ObservedGeneration = mb.Generation
	st.BackendStatuses = nil
	for _, b := range Backends(mb) {
		bs := workloadv1alpha1.ModelBackendStatus{Name: b.Name}
		ms := &workloadv1alpha1.ModelServing{}
		err := r.Get(ctx, types.NamespacedName{Namespace: mb.Namespace, Name: ObjectName(mb.Name, b.Name)}, ms)
		if err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		if err == nil && metav1.IsControlledBy(ms, mb) {
			bs.Replicas = ms.Status.Replicas
		}
		st.BackendStatuses = append(st.BackendStatuses, bs)
	}
	hasLoRA := false
	for _, c := range conds {
		c.ObservedGeneration = mb.Generation
		meta.SetStatusCondition(&st.Conditions, c)
		hasLoRA = hasLoRA || c.Type == ConditionLoRAAdaptersLoaded
	}
	if !hasLoRA {
		meta.RemoveStatusCondition(&st.Conditions, ConditionLoRAAdaptersLoaded)
	}
	if equality.Semantic.DeepEqual(&mb.Status, st) {
		return ctrl.Result{}, nil
	}
	mb.Status = *st
	if err := r.Status().Update(ctx, mb); apierrors.IsConflict(err) {
		// A newer ModelBooster is on its way to the cache; derive again from it.
		return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

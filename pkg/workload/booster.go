package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// ModelBooster condition types.
const (
	// BoosterReady is true when every backend's ModelServing is Available and the route exists.
	BoosterReady = "Ready"
	// BoosterLoRAAdaptersLoaded is true when every Ready engine of every backend with LoRA
	// adapters has exactly the backend's adapters loaded. Absent when no backend has any.
	BoosterLoRAAdaptersLoaded = "LoRAAdaptersLoaded"
)

// Condition reasons and event reasons of the ModelBooster controller.
const (
	ReasonInvalidSpec       = "InvalidSpec"
	ReasonNameConflict      = "NameConflict"
	ReasonBackendsNotReady  = "BackendsNotReady"
	ReasonRouteNotReady     = "RouteNotReady"
	ReasonBackendsAvailable = "BackendsAvailable"
	ReasonAdaptersLoaded    = "AdaptersLoaded"
	ReasonAdapterLoadFailed = "AdapterLoadFailed"
	ReasonWaitingForPods    = "WaitingForPods"

	ReasonCreated    = "Created"
	ReasonUpdated    = "Updated"
	ReasonDeleted    = "Deleted"
	ReasonSyncFailed = "SyncFailed"
	ReasonLoaded     = "AdapterLoaded"
	ReasonUnloaded   = "AdapterUnloaded"
)

const (
	// loraHTTPTimeout bounds one call to an engine's LoRA API: a stuck engine must not hold
	// a reconcile worker.
	loraHTTPTimeout = 3 * time.Second
	// loraRetry is how soon a failed adapter load is tried again.
	loraRetry = 5 * time.Second
	// loraResync is how often the adapters of a healthy backend are checked anyway: an
	// engine that restarted in place forgets its adapters without its pod changing.
	loraResync = 2 * time.Minute
)

// BoosterReconciler compiles ModelBoosters into ModelServings, ModelServers, a ModelRoute
// and autoscaling policies and bindings (booster_objects.go), keeps them in step with the
// spec, deletes those the spec no longer has, loads LoRA adapters into the engines, and
// derives the ModelBooster's status from what exists. It never creates a pod.
type BoosterReconciler struct {
	client.Client
	Recorder events.EventRecorder
	// HTTPClient calls the engines' LoRA API (default: loraHTTPTimeout per request).
	HTTPClient *http.Client
}

// SetupWithManager registers the reconciler and what it watches.
func (r *BoosterReconciler) SetupWithManager(mgr ctrl.Manager) error {
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
		// Entry pods becoming Ready (or restarting) are when adapters must be loaded.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.boosterOfPod), builder.WithPredicates(entryPodChanged())).
		Complete(r)
}

// boosterOfPod maps a pod to the ModelBooster of its ModelServing, if any.
func (r *BoosterReconciler) boosterOfPod(ctx context.Context, obj client.Object) []reconcile.Request {
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

// engineServing says whether a pod's engine can be called: Ready, with an IP, not going away.
func engineServing(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.PodIP != "" && podReady(p)
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// Reconcile brings one ModelBooster's generated objects in line with its spec, loads its
// LoRA adapters and writes its status.
func (r *BoosterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	mb := &workloadv1alpha1.ModelBooster{}
	if err := r.Get(ctx, req.NamespacedName, mb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if mb.DeletionTimestamp != nil {
		return ctrl.Result{}, nil // owner references let the garbage collector remove the rest
	}

	objs, err := BuildBoosterObjects(mb)
	if err != nil {
		// Bad input the schema could not reject: say so and touch nothing, so a typo
		// cannot take down backends that were serving.
		cond := metav1.Condition{Type: BoosterReady, Status: metav1.ConditionFalse, Reason: ReasonInvalidSpec, Message: err.Error()}
		if prev := meta.FindStatusCondition(mb.Status.Conditions, BoosterReady); prev == nil || prev.Reason != ReasonInvalidSpec || prev.Message != cond.Message {
			r.event(mb, nil, corev1.EventTypeWarning, ReasonInvalidSpec, "Validate", "%s", err.Error())
		}
		return r.writeStatus(ctx, mb, []metav1.Condition{cond})
	}

	conflicts, err := r.applyObjects(ctx, mb, objs)
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: time.Second}, nil // an object changed under us: derive again
	} else if err != nil {
		r.event(mb, nil, corev1.EventTypeWarning, ReasonSyncFailed, "Sync", "%v", err)
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

// applyObjects creates or updates every generated object and deletes the ones the spec no
// longer asks for. Names taken by objects this ModelBooster does not control are returned
// as conflicts, not errors: the rest is still applied.
func (r *BoosterReconciler) applyObjects(ctx context.Context, mb *workloadv1alpha1.ModelBooster, objs *BoosterObjects) ([]string, error) {
	var conflicts []string
	apply := func(want, have client.Object, sync func(have, want client.Object) bool) error {
		err := r.ensure(ctx, mb, want, have, sync)
		if errors.As(err, new(*conflictError)) {
			conflicts = append(conflicts, err.Error())
			return nil
		}
		return err
	}
	for _, want := range objs.ModelServings {
		if err := apply(want, &workloadv1alpha1.ModelServing{}, func(have, want client.Object) bool {
			return syncServing(mb, have.(*workloadv1alpha1.ModelServing), want.(*workloadv1alpha1.ModelServing))
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
func (r *BoosterReconciler) ensure(ctx context.Context, mb *workloadv1alpha1.ModelBooster, want, have client.Object, sync func(have, want client.Object) bool) error {
	kind := kindOf(want)
	err := r.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		if err := r.Create(ctx, want); apierrors.IsAlreadyExists(err) {
			return nil // the cache lags behind our own create; the next pass sees it
		} else if err != nil {
			return fmt.Errorf("create %s %s: %w", kind, want.GetName(), err)
		}
		r.event(mb, want, corev1.EventTypeNormal, ReasonCreated, "Create", "created %s %s", kind, want.GetName())
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
	r.event(mb, have, corev1.EventTypeNormal, ReasonUpdated, "Update", "updated %s %s", kind, want.GetName())
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
// count is never written after creation: the autoscaler owns it (scale subresource).
func syncServing(mb *workloadv1alpha1.ModelBooster, have, want *workloadv1alpha1.ModelServing) bool {
	spec := *want.Spec.DeepCopy()
	if b := backendOf(mb, want.Labels[workloadv1alpha1.ModelBoosterBackendLabel]); b != nil && BackendAutoscaled(mb, b) {
		spec.Replicas = have.Spec.Replicas
	}
	return syncSpec(&have.ObjectMeta, &want.ObjectMeta, &have.Spec, spec)
}

func backendOf(mb *workloadv1alpha1.ModelBooster, name string) *workloadv1alpha1.ModelBackend {
	for i := range mb.Spec.Backends {
		if mb.Spec.Backends[i].Name == name {
			return &mb.Spec.Backends[i]
		}
	}
	return nil
}

// deleteStale deletes what this ModelBooster generated before and no longer asks for: the
// objects of a removed or renamed backend, and policies and bindings of autoscaling that
// was turned off. It does not leave this to the garbage collector, which only acts once
// the ModelBooster itself is gone.
func (r *BoosterReconciler) deleteStale(ctx context.Context, mb *workloadv1alpha1.ModelBooster, objs *BoosterObjects) error {
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
			r.event(mb, obj, corev1.EventTypeNormal, ReasonDeleted, "Delete", "deleted %s %s: %s", kindOf(obj), obj.GetName(), staleWhy(mb, obj))
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

// readyCondition derives Ready from the backends' ModelServings (each Available by its own
// condition, for its current generation) and the route.
func (r *BoosterReconciler) readyCondition(ctx context.Context, mb *workloadv1alpha1.ModelBooster, conflicts []string) (metav1.Condition, error) {
	if len(conflicts) > 0 {
		return metav1.Condition{Type: BoosterReady, Status: metav1.ConditionFalse, Reason: ReasonNameConflict, Message: strings.Join(conflicts, "; ")}, nil
	}
	var notReady []string
	for i := range mb.Spec.Backends {
		b := &mb.Spec.Backends[i]
		ms := &workloadv1alpha1.ModelServing{}
		name := BoosterObjectName(mb.Name, b.Name)
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
		return metav1.Condition{Type: BoosterReady, Status: metav1.ConditionFalse, Reason: ReasonBackendsNotReady, Message: strings.Join(notReady, "; ")}, nil
	}
	route := &networkingv1alpha1.ModelRoute{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: mb.Namespace, Name: mb.Name}, route); apierrors.IsNotFound(err) {
		return metav1.Condition{Type: BoosterReady, Status: metav1.ConditionFalse, Reason: ReasonRouteNotReady, Message: fmt.Sprintf("ModelRoute %s not created yet", mb.Name)}, nil
	} else if err != nil {
		return metav1.Condition{}, err
	}
	return metav1.Condition{Type: BoosterReady, Status: metav1.ConditionTrue, Reason: ReasonBackendsAvailable,
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
func (r *BoosterReconciler) writeStatus(ctx context.Context, mb *workloadv1alpha1.ModelBooster, conds []metav1.Condition) (ctrl.Result, error) {
	st := mb.Status.DeepCopy()
	st.ObservedGeneration = mb.Generation
	st.BackendStatuses = nil
	for i := range mb.Spec.Backends {
		b := &mb.Spec.Backends[i]
		bs := workloadv1alpha1.ModelBackendStatus{Name: b.Name}
		ms := &workloadv1alpha1.ModelServing{}
		err := r.Get(ctx, types.NamespacedName{Namespace: mb.Namespace, Name: BoosterObjectName(mb.Name, b.Name)}, ms)
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
		hasLoRA = hasLoRA || c.Type == BoosterLoRAAdaptersLoaded
	}
	if !hasLoRA {
		meta.RemoveStatusCondition(&st.Conditions, BoosterLoRAAdaptersLoaded)
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

// syncAdapters makes every Ready engine of every backend with LoRA adapters hold exactly
// those adapters (loading the missing ones, unloading the ones the spec dropped) and
// reports the result as the LoRAAdaptersLoaded condition (nil when no backend has any).
func (r *BoosterReconciler) syncAdapters(ctx context.Context, mb *workloadv1alpha1.ModelBooster) *metav1.Condition {
	var failures, waiting []string
	engines, hasAdapters := 0, false
	for i := range mb.Spec.Backends {
		b := &mb.Spec.Backends[i]
		if len(b.LoraAdapters) == 0 {
			continue
		}
		hasAdapters = true
		name := BoosterObjectName(mb.Name, b.Name)
		var pods corev1.PodList
		if err := r.List(ctx, &pods, client.InNamespace(mb.Namespace),
			client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: name, workloadv1alpha1.EntryLabel: "true"}); err != nil {
			failures = append(failures, fmt.Sprintf("backend %s: list pods: %v", b.Name, err))
			continue
		}
		ready := 0
		for pi := range pods.Items {
			p := &pods.Items[pi]
			if !engineServing(p) || !servesModel(workloadv1alpha1.ModelWorkerType(p.Labels[workloadv1alpha1.RoleLabel])) {
				continue
			}
			ready++
			if err := r.syncPodAdapters(ctx, mb, b, p); err != nil {
				failures = append(failures, fmt.Sprintf("pod %s: %v", p.Name, err))
				r.event(mb, p, corev1.EventTypeWarning, ReasonAdapterLoadFailed, "LoadAdapter", "pod %s: %v", p.Name, err)
				continue
			}
			engines++
		}
		if ready == 0 {
			ms := &workloadv1alpha1.ModelServing{}
			if err := r.Get(ctx, types.NamespacedName{Namespace: mb.Namespace, Name: name}, ms); err != nil || ms.Spec.Replicas == nil || *ms.Spec.Replicas > 0 {
				waiting = append(waiting, fmt.Sprintf("backend %s has no Ready engine yet", b.Name))
			}
		}
	}
	if !hasAdapters {
		return nil
	}
	c := &metav1.Condition{Type: BoosterLoRAAdaptersLoaded}
	switch {
	case len(failures) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonAdapterLoadFailed, strings.Join(failures, "; ")
	case len(waiting) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonWaitingForPods, strings.Join(waiting, "; ")
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonAdaptersLoaded, fmt.Sprintf("every adapter is loaded on the %d Ready engines that serve it", engines)
	}
	return c
}

// syncPodAdapters compares one engine's adapters (GET /v1/models) with the backend's and
// loads or unloads the difference through vLLM's LoRA API.
func (r *BoosterReconciler) syncPodAdapters(ctx context.Context, mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend, p *corev1.Pod) error {
	base := "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(podEnginePort(p, EnginePort(b.Type)))))
	loaded, err := r.loadedAdapters(ctx, base)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range b.LoraAdapters {
		if slices.Contains(loaded, a.Name) {
			continue
		}
		body := map[string]string{"lora_name": a.Name, "lora_path": LoRAAdapterPath(a.ArtifactURL)}
		status, msg, err := r.post(ctx, base+"/v1/load_lora_adapter", body)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("load %s: %w", a.Name, err))
		case status == http.StatusOK:
			r.event(mb, p, corev1.EventTypeNormal, ReasonLoaded, "LoadAdapter", "loaded LoRA adapter %s into pod %s", a.Name, p.Name)
		case status == http.StatusBadRequest && strings.Contains(msg, "already"):
			// Loaded between our GET and POST (another pass, or the engine's own startup).
		default:
			errs = append(errs, fmt.Errorf("load %s: HTTP %d: %s", a.Name, status, msg))
		}
	}
	for _, name := range loaded {
		if slices.ContainsFunc(b.LoraAdapters, func(a workloadv1alpha1.LoraAdapter) bool { return a.Name == name }) {
			continue
		}
		status, msg, err := r.post(ctx, base+"/v1/unload_lora_adapter", map[string]string{"lora_name": name})
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("unload %s: %w", name, err))
		case status == http.StatusOK:
			r.event(mb, p, corev1.EventTypeNormal, ReasonUnloaded, "UnloadAdapter", "unloaded LoRA adapter %s from pod %s: no longer in the spec", name, p.Name)
		case status == http.StatusNotFound:
		default:
			errs = append(errs, fmt.Errorf("unload %s: HTTP %d: %s", name, status, msg))
		}
	}
	return errors.Join(errs...)
}

// podEnginePort is the port of the pod's "http" container port (what the pod was created
// with, even while a rollout changes the template), else the type's engine port.
func podEnginePort(p *corev1.Pod, fallback int32) int32 {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == "http" && port.ContainerPort > 0 {
				return port.ContainerPort
			}
		}
	}
	return fallback
}

// loadedAdapters lists the adapters an engine serves: the /v1/models entries with a parent
// (vLLM lists an adapter with the base model as its parent).
func (r *BoosterReconciler) loadedAdapters(ctx context.Context, base string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, loraHTTPTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.httpClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list models: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(raw)))
	}
	var models struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &models); err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	var out []string
	for _, m := range models.Data {
		if m.Parent != nil && *m.Parent != "" {
			out = append(out, m.ID)
		}
	}
	return out, nil
}

// post sends a JSON body and returns the status and the (short) response text.
func (r *BoosterReconciler) post(ctx context.Context, url string, body any) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, loraHTTPTimeout)
	defer cancel()
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.httpClient().Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, strings.TrimSpace(string(msg)), nil
}

func (r *BoosterReconciler) httpClient() *http.Client {
	if r.HTTPClient != nil {
		return r.HTTPClient
	}
	return &http.Client{Timeout: loraHTTPTimeout}
}

// event records an event on the ModelBooster, about a related object when there is one.
func (r *BoosterReconciler) event(mb *workloadv1alpha1.ModelBooster, related client.Object, typ, reason, action, note string, args ...any) {
	if r.Recorder == nil {
		return
	}
	if related == nil {
		r.Recorder.Eventf(mb, nil, typ, reason, action, note, args...)
		return
	}
	r.Recorder.Eventf(mb, related, typ, reason, action, note, args...)
}

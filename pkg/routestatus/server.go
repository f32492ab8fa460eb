package routestatus

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	"github.com/berth-sh/berth/pkg/router/view"
	"github.com/berth-sh/berth/pkg/scope"
)

// Condition type and reasons a ModelServer's status carries.
const (
	// ConditionWorkloadsFound: pods match spec.workloadSelector and at least one can serve.
	ConditionWorkloadsFound = "WorkloadsFound"

	ReasonPodsReady      = "PodsReady"
	ReasonNoReadyPods    = "NoReadyPods"
	ReasonNoMatchingPods = "NoMatchingPods"
	// ReasonIncompletePDGroup: a pdGroup server with prefill pods but no decode pods (or
	// the reverse) can pair nothing.
	ReasonIncompletePDGroup = "IncompletePDGroup"
)

// ServerReconciler keeps each ModelServer's WorkloadsFound condition current, woken by the
// server and by pods of its namespace whose labels, readiness or IP change.
type ServerReconciler struct {
	// Scope is which objects it acts on (scope.All when zero).
	Scope    scope.Mode
	Client   client.Client
	Recorder events.EventRecorder
}

func (r *ServerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("modelserver-status").
		For(&networkingv1alpha1.ModelServer{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.serversOfPod),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e ctrlevent.UpdateEvent) bool { return servingChanged(e.ObjectOld, e.ObjectNew) }})).
		Complete(r)
}

// servingChanged is whether an update can change what a ModelServer counts: labels, IP,
// phase, readiness or deletion. Most pod updates (status heartbeats of other fields) don't.
func servingChanged(old, new client.Object) bool {
	o, ok1 := old.(*corev1.Pod)
	n, ok2 := new.(*corev1.Pod)
	if !ok1 || !ok2 {
		return true
	}
	return !equality.Semantic.DeepEqual(o.Labels, n.Labels) || o.Status.PodIP != n.Status.PodIP || o.Status.Phase != n.Status.Phase ||
		podReady(o) != podReady(n) || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (r *ServerReconciler) serversOfPod(ctx context.Context, obj client.Object) []reconcile.Request {
	var servers networkingv1alpha1.ModelServerList
	if err := r.Client.List(ctx, &servers, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, s := range servers.Items {
		if sel := s.Spec.WorkloadSelector; sel != nil && labels.SelectorFromSet(sel.MatchLabels).Matches(labels.Set(obj.GetLabels())) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
		}
	}
	return out
}

func (r *ServerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ms networkingv1alpha1.ModelServer
	if err := r.Client.Get(ctx, req.NamespacedName, &ms); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, log.FromContext(ctx).WithValues("modelserver", klog.KObj(&ms)))
	if !r.Scope.Manages(&ms) {
		return ctrl.Result{}, nil // another project's controller acts on it (--manage=berth)
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(ms.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	list := make([]*corev1.Pod, len(pods.Items))
	for i := range pods.Items {
		list[i] = &pods.Items[i]
	}
	status := ms.Status.DeepCopy()
	status.ObservedGeneration = ms.Generation
	found := WorkloadsFound(&ms, list)
	meta.SetStatusCondition(&status.Conditions, found)
	if equality.Semantic.DeepEqual(&ms.Status, status) {
		return ctrl.Result{}, nil
	}
	if old := meta.FindStatusCondition(ms.Status.Conditions, found.Type); old == nil || old.Status != found.Status || old.Reason != found.Reason {
		record(r.Recorder, &ms, found)
	}
	orig := ms.DeepCopy()
	ms.Status = *status
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Status().Patch(ctx, &ms, client.MergeFrom(orig)))
}

// WorkloadsFound is the server's WorkloadsFound condition. It counts the pods its selector
// matches and, through the router's own resolution (view.Resolve), those berth-router would
// send requests to, so the condition and the router never disagree.
func WorkloadsFound(ms *networkingv1alpha1.ModelServer, pods []*corev1.Pod) metav1.Condition {
	c := metav1.Condition{Type: ConditionWorkloadsFound, ObservedGeneration: ms.Generation}
	var selector map[string]string
	if ms.Spec.WorkloadSelector != nil {
		selector = ms.Spec.WorkloadSelector.MatchLabels
	}
	sel := labels.SelectorFromSet(selector)
	matched := 0
	for _, p := range pods {
		if sel.Matches(labels.Set(p.Labels)) {
			matched++
		}
	}
	s := view.Resolve(ms, pods)
	switch {
	case matched == 0:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonNoMatchingPods
		c.Message = fmt.Sprintf("no pod in namespace %q has the labels of spec.workloadSelector.matchLabels (%s)", ms.Namespace, describe(selector))
	case ms.Spec.WorkloadSelector.PDGroup != nil && (len(s.Prefill) == 0) != (len(s.Decode) == 0):
		c.Status, c.Reason = metav1.ConditionFalse, ReasonIncompletePDGroup
		c.Message = fmt.Sprintf("%d prefill and %d decode pods can serve: spec.workloadSelector.pdGroup needs both to pair a request", len(s.Prefill), len(s.Decode))
	case len(s.Endpoints)+len(s.Prefill)+len(s.Decode) == 0:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonNoReadyPods
		c.Message = fmt.Sprintf("%d pods match spec.workloadSelector, none is Running and Ready with an IP", matched)
	default:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonPodsReady
		if ms.Spec.WorkloadSelector.PDGroup != nil {
			c.Message = fmt.Sprintf("%d pods match spec.workloadSelector; %d prefill and %d decode can serve", matched, len(s.Prefill), len(s.Decode))
		} else {
			c.Message = fmt.Sprintf("%d pods match spec.workloadSelector; %d can serve", matched, len(s.Endpoints))
		}
	}
	return c
}

func describe(set map[string]string) string {
	if len(set) == 0 {
		return "none: every pod"
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + set[k]
	}
	return strings.Join(parts, ",")
}

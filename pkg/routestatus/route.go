// Package routestatus writes the status of ModelRoutes and ModelServers: what the schema
// cannot check because it needs other objects or the router's own compiler. A ModelRoute
// says whether berth-router accepts it (its regexes compile, no older route already serves
// its model name) and whether every target names an existing ModelServer; a ModelServer
// says whether pods match its workload selector and how many can serve. The router reads
// neither condition: they are for the user, who would otherwise only see 404s and 503s.
package routestatus

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	"github.com/berth-sh/berth/pkg/router/match"
	"github.com/berth-sh/berth/pkg/scope"
)

// Condition types and reasons a ModelRoute's status carries.
const (
	// ConditionAccepted: berth-router compiles the route and it is the one serving its model.
	ConditionAccepted = "Accepted"
	// ConditionResolvedRefs: every targetModels[].modelServerName names a ModelServer, every
	// externalModelProviderName an ExternalModelProvider.
	ConditionResolvedRefs = "ResolvedRefs"

	ReasonAccepted            = "Accepted"
	ReasonInvalidMatch        = "InvalidMatch"
	ReasonModelNameInUse      = "ModelNameInUse"
	ReasonAllModelServersSeen = "ModelServersFound"
	ReasonModelServerNotFound = "ModelServerNotFound"
	// ReasonProviderNotFound: a target names no ExternalModelProvider (and every ModelServer
	// it names exists).
	ReasonProviderNotFound = "ExternalModelProviderNotFound"
)

// RouteReconciler keeps each ModelRoute's Accepted and ResolvedRefs conditions current. It
// is woken by its route, by any route (a route created or deleted elsewhere changes which
// route serves a shared model name) and by ModelServers and ExternalModelProviders of the
// route's namespace.
type RouteReconciler struct {
	// Scope is which objects it acts on (scope.All when zero).
	Scope    scope.Mode
	Client   client.Client
	Recorder events.EventRecorder
}

// RBAC: ModelRoute and ModelServer status; a ModelServer's condition counts the pods its
// selector matches.
//
// +kubebuilder:rbac:groups=networking.serving.volcano.sh,resources=modelroutes;modelservers;externalmodelproviders,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.serving.volcano.sh,resources=modelroutes/status;modelservers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

func (r *RouteReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("modelroute-status").
		For(&networkingv1alpha1.ModelRoute{}).
		Watches(&networkingv1alpha1.ModelServer{}, handler.EnqueueRequestsFromMapFunc(r.routesOfNamespace)).
		Watches(&networkingv1alpha1.ExternalModelProvider{}, handler.EnqueueRequestsFromMapFunc(r.routesOfNamespace)).
		// Which route serves a model name is decided across namespaces (the router's table
		// is keyed by name only), so a route's arrival or departure can change another's
		// Accepted condition.
		Watches(&networkingv1alpha1.ModelRoute{}, handler.EnqueueRequestsFromMapFunc(r.routesSharingModel)).
		Complete(r)
}

func (r *RouteReconciler) routesOfNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	var routes networkingv1alpha1.ModelRouteList
	if err := r.Client.List(ctx, &routes, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	return requestsFor(routes.Items, func(*networkingv1alpha1.ModelRoute) bool { return true })
}

func (r *RouteReconciler) routesSharingModel(ctx context.Context, obj client.Object) []reconcile.Request {
	changed, ok := obj.(*networkingv1alpha1.ModelRoute)
	if !ok || changed.Spec.ModelName == "" {
		return nil
	}
	var routes networkingv1alpha1.ModelRouteList
	if err := r.Client.List(ctx, &routes); err != nil {
		return nil
	}
	return requestsFor(routes.Items, func(mr *networkingv1alpha1.ModelRoute) bool {
		return mr.Spec.ModelName == changed.Spec.ModelName && (mr.Namespace != changed.Namespace || mr.Name != changed.Name)
	})
}

func requestsFor(routes []networkingv1alpha1.ModelRoute, keep func(*networkingv1alpha1.ModelRoute) bool) []reconcile.Request {
	var out []reconcile.Request
	for i := range routes {
		if keep(&routes[i]) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: routes[i].Namespace, Name: routes[i].Name}})
		}
	}
	return out
}

func (r *RouteReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var mr networkingv1alpha1.ModelRoute
	if err := r.Client.Get(ctx, req.NamespacedName, &mr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, log.FromContext(ctx).WithValues("modelroute", klog.KObj(&mr)))
	if !r.Scope.Manages(&mr) {
		return ctrl.Result{}, nil // another project's controller acts on it (--manage=berth)
	}
	var servers networkingv1alpha1.ModelServerList
	if err := r.Client.List(ctx, &servers, client.InNamespace(mr.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	var providers networkingv1alpha1.ExternalModelProviderList
	if err := r.Client.List(ctx, &providers, client.InNamespace(mr.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	var routes networkingv1alpha1.ModelRouteList
	if err := r.Client.List(ctx, &routes); err != nil {
		return ctrl.Result{}, err
	}
	existing := Existing{Servers: make(map[string]bool, len(servers.Items)), Providers: make(map[string]bool, len(providers.Items))}
	for _, s := range servers.Items {
		existing.Servers[s.Name] = true
	}
	for _, p := range providers.Items {
		existing.Providers[p.Name] = true
	}
	status := mr.Status.DeepCopy()
	status.ObservedGeneration = mr.Generation
	accepted := Accepted(&mr, routes.Items)
	resolved := ResolvedRefs(&mr, existing)
	meta.SetStatusCondition(&status.Conditions, accepted)
	meta.SetStatusCondition(&status.Conditions, resolved)
	if equality.Semantic.DeepEqual(&mr.Status, status) {
		return ctrl.Result{}, nil
	}
	for _, c := range []metav1.Condition{accepted, resolved} {
		if old := meta.FindStatusCondition(mr.Status.Conditions, c.Type); old == nil || old.Status != c.Status || old.Reason != c.Reason {
			record(r.Recorder, &mr, c)
		}
	}
	orig := mr.DeepCopy()
	mr.Status = *status
	log.FromContext(ctx).V(2).Info("ModelRoute status", "accepted", accepted.Reason, "resolvedRefs", resolved.Reason)
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Status().Patch(ctx, &mr, client.MergeFrom(orig)))
}

// Accepted is the route's Accepted condition: False when berth-router would leave it out of
// its table (a regex that does not compile) or when an older route (anywhere: the router's
// table is keyed by model name only) already serves its model name, as the router tries
// routes sharing a name oldest first and so never reaches this one.
func Accepted(mr *networkingv1alpha1.ModelRoute, all []networkingv1alpha1.ModelRoute) metav1.Condition {
	c := metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionTrue, Reason: ReasonAccepted, ObservedGeneration: mr.Generation,
		Message: "berth-router serves this route"}
	if _, errs := match.NewTable([]*networkingv1alpha1.ModelRoute{mr}); len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, err := range errs {
			// The router's error reads "ModelRoute ns/name: rules[0]...": name the field as
			// the apiserver would, spec.rules[0]...
			_, field, _ := strings.Cut(err.Error(), ": ")
			msgs[i] = "spec." + field
		}
		c.Status, c.Reason = metav1.ConditionFalse, ReasonInvalidMatch
		c.Message = strings.Join(msgs, "; ") + "; berth-router ignores this route until it is fixed"
		return c
	}
	if mr.Spec.ModelName == "" {
		return c
	}
	routes := make([]*networkingv1alpha1.ModelRoute, 0, len(all))
	for i := range all {
		if all[i].Spec.ModelName == mr.Spec.ModelName {
			routes = append(routes, &all[i])
		}
	}
	sort.SliceStable(routes, func(i, j int) bool { return match.ServedBefore(routes[i], routes[j]) })
	if len(routes) > 0 && match.ServedBefore(routes[0], mr) {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonModelNameInUse
		c.Message = fmt.Sprintf("spec.modelName: model %q is already served by the older ModelRoute %s/%s; berth-router sends this model's requests there, never here",
			mr.Spec.ModelName, routes[0].Namespace, routes[0].Name)
	}
	return c
}

// Existing are the names of the ModelServers and ExternalModelProviders of a namespace.
type Existing struct {
	Servers, Providers map[string]bool
}

// ResolvedRefs is the route's ResolvedRefs condition: False, naming each field, when a
// target names a ModelServer or an ExternalModelProvider that does not exist in the route's
// namespace (the router answers 503 for that target's share of the traffic).
func ResolvedRefs(mr *networkingv1alpha1.ModelRoute, existing Existing) metav1.Condition {
	c := metav1.Condition{Type: ConditionResolvedRefs, Status: metav1.ConditionTrue, Reason: ReasonAllModelServersSeen, ObservedGeneration: mr.Generation}
	var missing []string
	targets, missingServers := 0, 0
	for i, rule := range mr.Spec.Rules {
		for j, tm := range rule.TargetModels {
			targets++
			switch {
			case tm.ExternalModelProviderName != "":
				if !existing.Providers[tm.ExternalModelProviderName] {
					missing = append(missing, fmt.Sprintf("spec.rules[%d].targetModels[%d].externalModelProviderName: ExternalModelProvider %q not found in namespace %q",
						i, j, tm.ExternalModelProviderName, mr.Namespace))
				}
			case !existing.Servers[tm.ModelServerName]:
				missingServers++
				missing = append(missing, fmt.Sprintf("spec.rules[%d].targetModels[%d].modelServerName: ModelServer %q not found in namespace %q",
					i, j, tm.ModelServerName, mr.Namespace))
			}
		}
	}
	if len(missing) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonModelServerNotFound
		if missingServers == 0 {
			c.Reason = ReasonProviderNotFound
		}
		c.Message = strings.Join(missing, "; ")
		return c
	}
	c.Message = fmt.Sprintf("every target (%d) names an existing ModelServer or ExternalModelProvider", targets)
	return c
}

// actionStatus is the action of the events a changed condition sends (events.k8s.io/v1
// requires one); their reason is the condition's.
const actionStatus = "Status"

// record sends an event for a condition that changed: Normal when it holds, Warning when not.
func record(rec events.EventRecorder, obj client.Object, c metav1.Condition) {
	if rec == nil {
		return
	}
	typ := "Normal"
	if c.Status != metav1.ConditionTrue {
		typ = "Warning"
	}
	rec.Eventf(obj, nil, typ, c.Reason, actionStatus, "%s", c.Message)
}

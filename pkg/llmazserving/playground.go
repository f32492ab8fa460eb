package llmazserving

import (
	"context"
	"fmt"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	coreapi "github.com/berth-sh/berth/pkg/apis/llmaz/core/v1alpha1"
	inferenceapi "github.com/berth-sh/berth/pkg/apis/llmaz/inference/v1alpha1"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/scope"
)

// PlaygroundReconciler turns Playgrounds into llmaz Services, ModelServers, ModelRoutes and
// HorizontalPodAutoscalers.
type PlaygroundReconciler struct {
	// Scope is which objects it acts on (scope.All when zero).
	Scope    scope.Mode
	Client   client.Client
	Recorder events.EventRecorder
}

// SetupWithManager watches Playgrounds, what they own, and the OpenModels and
// BackendRuntimes they name (a Playground waiting for one starts when it appears).
func (r *PlaygroundReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("playground").
		For(&inferenceapi.Playground{}).
		Owns(&inferenceapi.Service{}).
		Owns(&networkingv1alpha1.ModelServer{}).
		Owns(&networkingv1alpha1.ModelRoute{}).
		Owns(&autoscalingv2.HorizontalPodAutoscaler{}).
		Watches(&coreapi.OpenModel{}, handler.EnqueueRequestsFromMapFunc(r.allPlaygrounds)).
		Watches(&inferenceapi.BackendRuntime{}, handler.EnqueueRequestsFromMapFunc(r.allPlaygrounds)).
		Complete(r)
}

// allPlaygrounds: models and runtimes are cluster-scoped and few; any change may unblock or
// change any Playground naming them.
func (r *PlaygroundReconciler) allPlaygrounds(ctx context.Context, _ client.Object) []reconcile.Request {
	var list inferenceapi.PlaygroundList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, pg := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pg.Namespace, Name: pg.Name}})
	}
	return out
}

// problem is a reason a Playground or Service cannot be built; nothing is created for it.
type problem struct{ reason, message string }

func (p *problem) Error() string { return p.message }

func (r *PlaygroundReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pg inferenceapi.Playground
	if err := r.Client.Get(ctx, req.NamespacedName, &pg); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, log.FromContext(ctx).WithValues("playground", klog.KObj(&pg)))
	if !r.Scope.Manages(&pg) {
		return ctrl.Result{}, nil // another project's controller acts on it (--manage=berth)
	}
	if !pg.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	status := pg.Status.DeepCopy()
	svc, err := r.sync(ctx, &pg)
	switch {
	case recordProblem(ctx, r.Recorder, &pg, pg.Status.Conditions, &status.Conditions, err):
	case err != nil:
		return ctrl.Result{}, err
	default:
		status.Replicas = svc.Status.Replicas
		status.Selector = svc.Status.Selector
		if c := meta.FindStatusCondition(svc.Status.Conditions, inferenceapi.ServiceAvailable); c != nil && c.Status == metav1.ConditionTrue && svc.Status.Replicas == *svc.Spec.Replicas {
			setProgress(&status.Conditions, pg.Generation, true, ReasonAvailable, fmt.Sprintf("Service %s is available with %d replicas", svc.Name, svc.Status.Replicas))
		} else {
			msg := fmt.Sprintf("waiting for Service %s", svc.Name)
			if c != nil && c.Message != "" {
				msg += ": " + c.Message
			}
			setProgress(&status.Conditions, pg.Generation, false, ReasonWaiting, msg)
		}
	}
	if !equality.Semantic.DeepEqual(&pg.Status, status) {
		// An update, not a merge patch: status.replicas is required, and a patch of an object
		// that never had a status would leave it out. A conflict is retried.
		pg.Status = *status
		if err := r.Client.Status().Update(ctx, &pg); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	return ctrl.Result{}, nil
}

// sync resolves what the Playground names and creates or updates what it becomes.
func (r *PlaygroundReconciler) sync(ctx context.Context, pg *inferenceapi.Playground) (*inferenceapi.Service, error) {
	refs, flavors := Claims(pg)
	field := "spec.modelClaims.models"
	if pg.Spec.ModelClaim != nil {
		field = "spec.modelClaim.modelName"
	}
	m, err := resolveModels(ctx, r.Client, refs, flavors, field)
	if err != nil {
		return nil, err
	}
	backend := BackendName(pg)
	var br inferenceapi.BackendRuntime
	if err := r.Client.Get(ctx, types.NamespacedName{Name: backend}, &br); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &problem{ReasonRuntimeNotFound, fmt.Sprintf("spec.backendRuntimeConfig.backendName: BackendRuntime %q not found", backend)}
		}
		return nil, err
	}
	name := ConfigName(pg, m)
	var cfg *inferenceapi.RecommendedConfig
	for i := range br.Spec.RecommendedConfigs {
		if br.Spec.RecommendedConfigs[i].Name == name {
			cfg = &br.Spec.RecommendedConfigs[i]
		}
	}
	if cfg == nil {
		var names []string
		for _, c := range br.Spec.RecommendedConfigs {
			names = append(names, c.Name)
		}
		return nil, &problem{ReasonConfigNotFound, fmt.Sprintf("spec.backendRuntimeConfig.configName: BackendRuntime %s has no recommended config %q (it has: %s)", backend, name, strings.Join(names, ", "))}
	}
	if bc := pg.Spec.BackendRuntimeConfig; bc != nil {
		if bad := LimitsBelowRequests(bc.Resources); len(bad) > 0 {
			return nil, &problem{ReasonInvalidResources, "spec.backendRuntimeConfig.resources: " + strings.Join(bad, "; ")}
		}
	}
	if _, err := Flavors(m); err != nil {
		return nil, &problem{ReasonFlavorNotFound, fmt.Sprintf("%s inferenceFlavors: %v", strings.TrimSuffix(strings.TrimSuffix(field, ".modelName"), ".models"), err)}
	}
	want, err := BuildService(pg, m, &br, cfg)
	if err != nil {
		return nil, &problem{ReasonInvalidArgs, err.Error()}
	}

	// The Service: its spec follows the Playground; replicas too (kubectl scale and the HPA
	// scale the Playground, which passes them on).
	live, err := ensureOwned(ctx, r.Client, r.Recorder, pg, want)
	if err != nil {
		return nil, err
	}
	svc := live.(*inferenceapi.Service)
	if _, err := ensureOwned(ctx, r.Client, r.Recorder, pg, BuildModelServer(pg, ModelName(m.Main), EngineOf(backend), Port(want))); err != nil {
		return nil, err
	}
	var loras []string
	for _, l := range m.LoRAs {
		loras = append(loras, l.Name)
	}
	if _, err := ensureOwned(ctx, r.Client, r.Recorder, pg, BuildModelRoute(pg, m.Main.Name, loras)); err != nil {
		return nil, err
	}
	if trigger := ScaleTrigger(pg, cfg); trigger != nil {
		if _, err := ensureOwned(ctx, r.Client, r.Recorder, pg, BuildHPA(pg, trigger)); err != nil {
			return nil, err
		}
	} else if err := r.deleteOwned(ctx, pg, &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: pg.Name, Namespace: pg.Namespace}}); err != nil {
		return nil, err
	}
	return svc, nil
}

func (r *PlaygroundReconciler) deleteOwned(ctx context.Context, pg *inferenceapi.Playground, obj client.Object) error {
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(obj, pg) {
		return nil
	}
	return client.IgnoreNotFound(r.Client.Delete(ctx, obj))
}

// resolveModels reads the claimed OpenModels; a missing one is a problem naming the field.
func resolveModels(ctx context.Context, c client.Client, refs []coreapi.ModelRef, flavors []coreapi.FlavorName, field string) (*Models, error) {
	if len(refs) == 0 {
		return nil, &problem{ReasonModelNotFound, field + ": no model claimed"}
	}
	m := &Models{Claims: refs, Flavors: flavors}
	for i, ref := range refs {
		var om coreapi.OpenModel
		if err := c.Get(ctx, types.NamespacedName{Name: string(ref.Name)}, &om); err != nil {
			if apierrors.IsNotFound(err) {
				f := field
				if strings.HasSuffix(field, ".models") {
					f = fmt.Sprintf("%s[%d].name", field, i)
				}
				return nil, &problem{ReasonModelNotFound, fmt.Sprintf("%s: OpenModel %q not found", f, ref.Name)}
			}
			return nil, err
		}
		switch roleOf(ref) {
		case coreapi.MainRole:
			m.Main = &om
		case coreapi.DraftRole:
			m.Draft = &om
		default:
			m.LoRAs = append(m.LoRAs, &om)
		}
	}
	if m.Main == nil {
		return nil, &problem{ReasonModelNotFound, field + ": no main model claimed"}
	}
	return m, nil
}

// selectorOf is the label selector of a ModelServing's serving (entry) pods, as its scale
// subresource reports it.
func selectorOf(name string) string {
	return labels.SelectorFromSet(labels.Set{workloadv1alpha1.ModelServingNameLabel: name, workloadv1alpha1.EntryLabel: "true"}).String()
}

// Package binding is berth-controller's autoscaler. It decides every sync period for each
// AutoscalingPolicyBinding (the spec's shape: a binding applies a policy to its targets) and
// for each AutoscalingPolicy that names its own target (Kthena 1.0's shape: homogeneous,
// heterogeneous or disaggregated), reading the targets' metrics from their pods (podmetrics)
// or from Prometheus (promsource), deciding with pkg/autoscale, and acting through the
// targets' scale subresource (a disaggregated target's roles through the ModelServing's
// role replicas), so it scales a ModelServing, a Deployment or anything else with a scale
// subresource alike.
package binding

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/scale"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale"
	"github.com/berth-sh/berth/pkg/autoscale/podmetrics"
	"github.com/berth-sh/berth/pkg/autoscale/promsource"
	"github.com/berth-sh/berth/pkg/scope"
)

// Condition types and reasons on an AutoscalingPolicyBinding, and on an AutoscalingPolicy
// with its own target.
const (
	// ConditionReady is True while the autoscaler can read its metrics and act; its reason
	// is the last decision's (autoscale.Reason*) and its message says why.
	ConditionReady = "Ready"
	// ConditionPanicMode is True while the panic policy governs scale-up (bindings).
	ConditionPanicMode = "PanicMode"

	ReasonPolicyNotFound     = "PolicyNotFound"
	ReasonInvalidPolicy      = "InvalidPolicy"
	ReasonPolicyHasTarget    = "PolicyHasTarget"
	ReasonTargetNotFound     = "TargetNotFound"
	ReasonTargetNotScalable  = "TargetNotScalable"
	ReasonCrossNamespace     = "TargetInOtherNamespace"
	ReasonConflict           = "TargetScaledByAnotherBinding"
	ReasonConflictPolicy     = "TargetScaledByAnotherPolicy"
	ReasonUnknownMetric      = "UnknownMetric"
	ReasonMetricSource       = "InvalidMetricSource"
	ReasonInvalidBounds      = "InvalidBounds"
	ReasonScaleFailed        = "ScaleFailed"
	ReasonPanicModeOff       = "Stable"
	ReasonPanicModeOn        = "Burst"
	defaultTargetAPIVersion  = "workload.serving.volcano.sh/v1alpha1"
	defaultTargetKind        = "ModelServing"
	defaultMetricPort        = 8100
	defaultMetricPath        = "/metrics"
	defaultSyncPeriod        = 5 * time.Second
	defaultMetricReadTimeout = 2 * time.Second
)

// Reconciler scales the targets of AutoscalingPolicyBindings and of AutoscalingPolicies
// that name their own.
type Reconciler struct {
	// Scope is which objects it acts on (scope.All when zero).
	Scope  scope.Mode
	Client client.Client
	// APIReader reads a target's metadata (its scale-to-zero annotation) and the Secrets a
	// Prometheus source authenticates with, without a cache, so the controller needs only
	// "get" on kinds it does not otherwise watch.
	APIReader client.Reader
	Scales    scale.ScalesGetter
	Mapper    meta.RESTMapper
	Recorder  events.EventRecorder
	// SyncPeriod is how often each binding or policy decides (default 5 s: a third of the
	// HPA's 15 s, so a burst is seen sooner; status is written only on change, so it costs
	// reads only).
	SyncPeriod time.Duration
	// MetricReadTimeout bounds one pod's metrics read and one Prometheus query (default 2 s).
	MetricReadTimeout time.Duration
	// BlindScaling ignores berth-scheduler's groups-that-fit counts (capacity.go): scale-ups
	// are made whether or not they can land, as before placement-aware scale-up
	// (--placement-aware-scaling=false).
	BlindScaling bool
	// Now is the clock (tests and benchmarks replace it).
	Now func() time.Time

	prom   *promsource.Client
	mu     sync.Mutex
	states map[stateKey]*state
}

// stateKey is a binding's or a policy's.
type stateKey struct {
	policy bool
	types.NamespacedName
}

// state is what the autoscaler remembers of one binding or policy between decisions.
type state struct {
	uid       types.UID
	policyGen int64
	policyUID types.UID
	scaler    *autoscale.Scaler
	// roles are a disaggregatedTarget's scalers, by role.
	roles map[string]*autoscale.Scaler
	// readers remember each pod's previous read (for rates), one per target, endpoint and
	// pod selector.
	readers     map[string]*podmetrics.Reader
	lastApplied map[string]int32     // target (or role) key -> replicas the autoscaler last set
	zeroSince   map[string]time.Time // optimizer targets whose share has been zero since
	// zeroAt is when the autoscaler last took each target to zero replicas: demand older
	// than that was answered before it went (fromzero.go).
	zeroAt map[string]time.Time
	// record is a policy's last decision in a binding's terms (homogeneous and
	// heterogeneous targets decide exactly as a binding does).
	record *workloadv1alpha1.AutoscalingPolicyBindingStatus
	// lastWrite is when a policy's status was last written.
	lastWrite time.Time
}

func (st *state) reader(key string, timeout time.Duration) *podmetrics.Reader {
	rd := st.readers[key]
	if rd == nil {
		rd = podmetrics.NewReader(timeout)
		st.readers[key] = rd
	}
	return rd
}

func (st *state) close() {
	for _, rd := range st.readers {
		rd.Close()
	}
}

// RBAC: the autoscaler reads its bindings, their policies and the targets' pods, writes the
// bindings' and policies' status, and acts only through scale subresources (ModelServings,
// and the apps kinds a binding may name), reading the target itself only for its
// scale-to-zero annotation; a disaggregatedTarget's roles are scaled by patching their
// replicas in the ModelServing. A Prometheus source's bearer token and CA are read from the
// Secrets it names, in the policy's (or binding's) namespace. To scale another kind with a
// scale subresource, add <resource>/scale get and update and <resource> get below (or bind a
// role of your own to the berth-controller ServiceAccount, docs/autoscaling.md).
//
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=autoscalingpolicybindings;autoscalingpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=autoscalingpolicybindings/status;autoscalingpolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=modelservings/scale,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments/scale;statefulsets/scale;replicasets/scale,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;replicasets,verbs=get
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=modelservings,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// SetupWithManager registers two controllers: bindings (policy changes reach the bindings
// that use them) and policies (their Valid condition, and the targets of those that name
// their own). Each binding and each policy with a target requeues itself every sync period.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.SyncPeriod <= 0 {
		r.SyncPeriod = defaultSyncPeriod
	}
	if r.MetricReadTimeout <= 0 {
		r.MetricReadTimeout = defaultMetricReadTimeout
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	r.init()
	err := ctrl.NewControllerManagedBy(mgr).
		Named("autoscalingpolicybinding").
		// Status writes every sync must not trigger another decision at once.
		For(&workloadv1alpha1.AutoscalingPolicyBinding{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&workloadv1alpha1.AutoscalingPolicy{}, handler.EnqueueRequestsFromMapFunc(r.bindingsOfPolicy),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A router's demand for a ModelServing at zero (fromzero.go) is acted on at once, not
		// at the binding's next sync.
		Watches(&workloadv1alpha1.ModelServing{}, handler.EnqueueRequestsFromMapFunc(r.bindingsOfTarget),
			builder.WithPredicates(demandChanged())).
		Complete(r)
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("autoscalingpolicy").
		For(&workloadv1alpha1.AutoscalingPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(reconcile.Func(r.ReconcilePolicy))
}

func (r *Reconciler) init() {
	if r.states == nil {
		r.states = map[stateKey]*state{}
	}
	if r.prom == nil {
		r.prom = promsource.New(r.MetricReadTimeout)
	}
}

func (r *Reconciler) bindingsOfPolicy(ctx context.Context, obj client.Object) []reconcile.Request {
	var list workloadv1alpha1.AutoscalingPolicyBindingList
	if err := r.Client.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, b := range list.Items {
		if b.Spec.PolicyRef.Name == obj.GetName() {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: b.Namespace, Name: b.Name}})
		}
	}
	return out
}

// problem is a reason the binding or policy cannot act; nothing is changed while one exists.
type problem struct {
	reason, message string
}

func (p *problem) Error() string { return p.message }

// Reconcile decides for one AutoscalingPolicyBinding.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := stateKey{NamespacedName: req.NamespacedName}
	var b workloadv1alpha1.AutoscalingPolicyBinding
	if err := r.Client.Get(ctx, req.NamespacedName, &b); err != nil {
		if apierrors.IsNotFound(err) {
			r.drop(key)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	logger := log.FromContext(ctx).WithValues("autoscalingpolicybinding", klog.KObj(&b))
	ctx = ctrl.LoggerInto(ctx, logger)
	if !r.Scope.Manages(&b) {
		// Another project's controller acts on it (--manage=berth). It may have been Berth's
		// until its label was removed: drop what Berth kept for it (its metrics reader and
		// series), or /metrics keeps publishing Berth's last decision beside the other
		// controller's.
		r.drop(key)
		return ctrl.Result{}, nil
	}
	if !b.DeletionTimestamp.IsZero() {
		r.drop(key)
		return ctrl.Result{}, nil
	}
	now := r.Now()
	st := r.stateFor(key, b.UID, now)
	status := b.Status.DeepCopy()
	status.ObservedGeneration = b.Generation
	status.LastDecisionTime = &metav1.Time{Time: now}

	err := r.decideBinding(ctx, &b, st, status, now)
	decisions.WithLabelValues(b.Namespace, seriesLabel(key)).Inc()
	r.reportDecision(logger, &b, b.Status.Conditions, &status.Conditions, err)
	if !equalStatus(&b.Status, status) {
		// A merge patch, not an update: the cache may not show this controller's last write
		// yet, and a conflict would drop this decision's status until the next change.
		orig := b.DeepCopy()
		b.Status = *status
		if perr := r.Client.Status().Patch(ctx, &b, client.MergeFrom(orig)); perr != nil && !apierrors.IsNotFound(perr) {
			return ctrl.Result{}, perr
		}
	}
	return ctrl.Result{RequeueAfter: r.SyncPeriod}, nil
}

// decideBinding finds the binding's policy and decides for its targets.
func (r *Reconciler) decideBinding(ctx context.Context, b *workloadv1alpha1.AutoscalingPolicyBinding, st *state, status *workloadv1alpha1.AutoscalingPolicyBindingStatus, now time.Time) error {
	var pol workloadv1alpha1.AutoscalingPolicy
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.PolicyRef.Name}, &pol); err != nil {
		if apierrors.IsNotFound(err) {
			return &problem{ReasonPolicyNotFound, fmt.Sprintf("spec.policyRef.name: AutoscalingPolicy %q not found in namespace %s", b.Spec.PolicyRef.Name, b.Namespace)}
		}
		return err
	}
	if field := ownTargetField(&pol.Spec); field != "" {
		// Two autoscalers would act on one policy's decisions: the policy on its own target,
		// and the binding on its targets, each undoing the other's scaling history.
		return &problem{ReasonPolicyHasTarget, fmt.Sprintf("spec.policyRef.name: AutoscalingPolicy %s names its own target (%s, Kthena 1.0's shape) and scales it itself; "+
			"a binding cannot apply it too: remove this binding, or point it at a policy without a target", pol.Name, field)}
	}
	j := job{owner: b, namespace: b.Namespace, label: b.Name, generation: b.Generation, policy: &pol,
		single: b.Spec.ScalingConfiguration, optimizer: b.Spec.OptimizerConfiguration}
	if j.single != nil {
		j.field = "spec.scalingConfiguration"
	} else {
		j.field = "spec.optimizerConfiguration"
	}
	return r.decide(ctx, j, st, status, now)
}

// ownTargetField names the target a policy names itself, or "".
func ownTargetField(spec *workloadv1alpha1.AutoscalingPolicySpec) string {
	switch {
	case spec.HomogeneousTarget != nil:
		return "spec.homogeneousTarget"
	case spec.HeterogeneousTarget != nil:
		return "spec.heterogeneousTarget"
	case spec.DisaggregatedTarget != nil:
		return "spec.disaggregatedTarget"
	}
	return ""
}

func (r *Reconciler) stateFor(key stateKey, uid types.UID, now time.Time) *state {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	st := r.states[key]
	if st == nil || st.uid != uid {
		if st != nil {
			st.close()
		}
		st = &state{uid: uid, scaler: autoscale.NewScaler(autoscale.Policy{}, now), roles: map[string]*autoscale.Scaler{},
			readers: map[string]*podmetrics.Reader{}, lastApplied: map[string]int32{}, zeroSince: map[string]time.Time{},
			zeroAt: map[string]time.Time{}}
		r.states[key] = st
	}
	return st
}

func (r *Reconciler) drop(key stateKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.states[key]; st != nil {
		st.close()
		delete(r.states, key)
	}
	forget(key.Namespace, seriesLabel(key))
}

// seriesLabel is the "binding" label of a binding's or a policy's metric series.
func seriesLabel(key stateKey) string {
	if key.policy {
		return policySeriesPrefix + key.Name
	}
	return key.Name
}

// policySeriesPrefix marks a policy's own series in the "binding" label of the metrics.
const policySeriesPrefix = "autoscalingpolicy/"

func setCondition(conds *[]metav1.Condition, gen int64, typ string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(conds, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// hasConditionReason: one warning event per new problem, not one per sync.
func hasConditionReason(conds []metav1.Condition, typ, reason string) bool {
	c := meta.FindStatusCondition(conds, typ)
	return c != nil && c.Reason == reason
}

// reportDecision records a decision's outcome on a binding or a policy with its own target:
// a problem sets Ready=False with its reason (and an event when the reason is new, so a
// standing problem is not repeated every period); any other error is logged.
func (r *Reconciler) reportDecision(logger logr.Logger, obj client.Object, old []metav1.Condition, conditions *[]metav1.Condition, err error) {
	var p *problem
	switch {
	case errors.As(err, &p):
		decisionErrors.WithLabelValues(p.reason).Inc()
		setCondition(conditions, obj.GetGeneration(), ConditionReady, metav1.ConditionFalse, p.reason, p.message)
		if !hasConditionReason(old, ConditionReady, p.reason) {
			r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, p.reason, actionDecide, "%s", p.message)
		}
		logger.Info("autoscaler cannot act", "reason", p.reason, "message", p.message)
	case err != nil:
		decisionErrors.WithLabelValues("Error").Inc()
		logger.Error(err, "autoscaler decision failed")
	}
}

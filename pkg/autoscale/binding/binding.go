// Package binding is berth-controller's autoscaler: it reconciles AutoscalingPolicyBindings
// every sync period, reading the targets' pods' metrics (podmetrics), deciding with
// pkg/autoscale, and acting only through the targets' scale subresource, so it scales a
// ModelServing, a Deployment or anything else with a scale subresource alike.
package binding

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
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
	"github.com/berth-sh/berth/pkg/scope"
)

// Condition types and reasons on an AutoscalingPolicyBinding.
const (
	// ConditionReady is True while the autoscaler can read its metrics and act; its reason
	// is the last decision's (autoscale.Reason*) and its message says why.
	ConditionReady = "Ready"
	// ConditionPanicMode is True while the panic policy governs scale-up.
	ConditionPanicMode = "PanicMode"

	ReasonPolicyNotFound     = "PolicyNotFound"
	ReasonInvalidPolicy      = "InvalidPolicy"
	ReasonTargetNotFound     = "TargetNotFound"
	ReasonTargetNotScalable  = "TargetNotScalable"
	ReasonCrossNamespace     = "TargetInOtherNamespace"
	ReasonConflict           = "TargetScaledByAnotherBinding"
	ReasonUnknownMetric      = "UnknownMetric"
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

// Reconciler scales the targets of AutoscalingPolicyBindings.
type Reconciler struct {
	// Scope is which objects it acts on (scope.All when zero).
	Scope  scope.Mode
	Client client.Client
	// APIReader reads a target's metadata (its scale-to-zero annotation) without a cache,
	// so the controller needs only "get" on kinds it does not otherwise watch.
	APIReader client.Reader
	Scales    scale.ScalesGetter
	Mapper    meta.RESTMapper
	Recorder  events.EventRecorder
	// SyncPeriod is how often each binding decides (default 5 s: a third of the HPA's 15 s,
	// so a burst is seen sooner; status is written only on change, so it costs reads only).
	SyncPeriod time.Duration
	// MetricReadTimeout bounds one pod's metrics read (default 2 s).
	MetricReadTimeout time.Duration
	// Now is the clock (tests and benchmarks replace it).
	Now func() time.Time

	mu     sync.Mutex
	states map[types.NamespacedName]*state
}

// state is what the autoscaler remembers of one binding between decisions.
type state struct {
	uid         types.UID
	policyGen   int64
	policyUID   types.UID
	scaler      *autoscale.Scaler
	reader      *podmetrics.Reader
	lastApplied map[string]int32     // target key -> replicas the autoscaler last set
	zeroSince   map[string]time.Time // optimizer targets whose share has been zero since
}

// RBAC: the autoscaler reads its bindings, their policies and the targets' pods, writes the
// bindings' status, and acts only through scale subresources (ModelServings, and the apps
// kinds a binding may name), reading the target itself only for its scale-to-zero
// annotation. To scale another kind with a scale subresource, add <resource>/scale get and
// update and <resource> get below (or bind a role of your own to the berth-controller
// ServiceAccount, docs/autoscaling.md).
//
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=autoscalingpolicybindings;autoscalingpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=autoscalingpolicybindings/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=modelservings/scale,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments/scale;statefulsets/scale;replicasets/scale,verbs=get;update;patch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;replicasets,verbs=get
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=modelservings,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// SetupWithManager registers the reconciler: bindings drive it, policy changes reach the
// bindings that use them, and every binding requeues itself each sync period.
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
	r.states = map[types.NamespacedName]*state{}
	return ctrl.NewControllerManagedBy(mgr).
		Named("autoscalingpolicybinding").
		// Status writes every sync must not trigger another decision at once.
		For(&workloadv1alpha1.AutoscalingPolicyBinding{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&workloadv1alpha1.AutoscalingPolicy{}, handler.EnqueueRequestsFromMapFunc(r.bindingsOfPolicy),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(r)
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

// target is one scale target of a binding with what the optimizer knows of it.
type target struct {
	spec     workloadv1alpha1.Target
	key      string // name, or namespace/name
	gvk      schema.GroupVersionKind
	gr       schema.GroupResource
	ns, name string
	min, max int32
	cost     int32
	scale    *autoscalingv1.Scale
	pods     []podmetrics.Pod
	grace    time.Duration
}

// problem is a reason the binding cannot act; nothing is changed while one exists.
type problem struct {
	reason, message string
}

func (p *problem) Error() string { return p.message }

func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var b workloadv1alpha1.AutoscalingPolicyBinding
	if err := r.Client.Get(ctx, req.NamespacedName, &b); err != nil {
		if apierrors.IsNotFound(err) {
			r.drop(req.NamespacedName)
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
		r.drop(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if !b.DeletionTimestamp.IsZero() {
		r.drop(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	now := r.Now()
	st := r.stateFor(req.NamespacedName, b.UID, now)
	status := b.Status.DeepCopy()
	status.ObservedGeneration = b.Generation
	status.LastDecisionTime = &metav1.Time{Time: now}

	err := r.decide(ctx, &b, st, status, now)
	var p *problem
	switch {
	case errors.As(err, &p):
		decisionErrors.WithLabelValues(p.reason).Inc()
		setCondition(status, b.Generation, ConditionReady, metav1.ConditionFalse, p.reason, p.message)
		if !hasConditionReason(b.Status.Conditions, ConditionReady, p.reason) {
			r.Recorder.Eventf(&b, nil, corev1.EventTypeWarning, p.reason, actionDecide, "%s", p.message)
		}
		logger.Info("autoscaler cannot act", "reason", p.reason, "message", p.message)
	case err != nil:
		decisionErrors.WithLabelValues("Error").Inc()
		logger.Error(err, "autoscaler decision failed")
	}
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

// decide reads, decides and applies for one binding, writing what it did into status.
func (r *Reconciler) decide(ctx context.Context, b *workloadv1alpha1.AutoscalingPolicyBinding, st *state, status *workloadv1alpha1.AutoscalingPolicyBindingStatus, now time.Time) error {
	var pol workloadv1alpha1.AutoscalingPolicy
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: b.Namespace, Name: b.Spec.PolicyRef.Name}, &pol); err != nil {
		if apierrors.IsNotFound(err) {
			return &problem{ReasonPolicyNotFound, fmt.Sprintf("spec.policyRef.name: AutoscalingPolicy %q not found in namespace %s", b.Spec.PolicyRef.Name, b.Namespace)}
		}
		return err
	}
	policy, err := autoscale.NewPolicy(&pol.Spec)
	if err != nil {
		return &problem{ReasonInvalidPolicy, fmt.Sprintf("AutoscalingPolicy %s: %v", pol.Name, err)}
	}
	if st.policyUID != pol.UID || st.policyGen != pol.Generation {
		st.scaler.SetPolicy(policy)
		st.policyUID, st.policyGen = pol.UID, pol.Generation
	}

	targets, rate, err := r.targets(ctx, b)
	if err != nil {
		return err
	}
	if err := r.checkConflicts(ctx, b, targets); err != nil {
		return err
	}
	names := make([]string, len(policy.Metrics))
	for i, m := range policy.Metrics {
		names[i] = m.Name
	}
	// Read every target's pods; an optimizer pools them (its targets serve one model).
	samples := map[string]autoscale.Sample{}
	var current int32
	var answered, podsTotal int
	var readErrors []string
	for _, t := range targets {
		current += t.scale.Spec.Replicas
		podsTotal += len(t.pods)
		port, path := int32(defaultMetricPort), defaultMetricPath
		if ep := t.spec.MetricEndpoint; ep != nil {
			if ep.Port != 0 {
				port = ep.Port
			}
			if ep.URI != "" {
				path = ep.URI
			}
		}
		res := st.reader.Read(ctx, t.pods, podmetrics.Endpoint{Port: port, Path: path}, names, now)
		answered += res.Answered
		readErrors = append(readErrors, res.Errors...)
		if len(res.Unexposed) > 0 {
			return &problem{ReasonUnknownMetric, fmt.Sprintf("metric %s is not exposed by any of the %d ready pods of %s at :%d%s; check the policy's metricName",
				strings.Join(quoteAll(res.Unexposed), ", "), res.Answered, t.key, port, path)}
		}
		for n, s := range res.Samples {
			acc := samples[n]
			acc.Sum += s.Sum
			acc.Reported += s.Reported
			acc.Missing += s.Missing
			samples[n] = acc
		}
	}
	rec, perMetric, ok := autoscale.RecommendAll(current, policy, samples)

	var lo, hi int32
	var shares []autoscale.Share
	if b.Spec.ScalingConfiguration != nil {
		lo, hi = targets[0].min, targets[0].max
	} else {
		for _, t := range targets {
			shares = append(shares, autoscale.Share{Cost: t.cost, Min: t.min, Max: t.max})
		}
		lo, hi = autoscale.Bounds(shares)
	}
	in := autoscale.Input{Now: now, Current: current, Recommended: rec, HasRecommendation: ok, Min: lo, Max: hi}
	if len(targets) == 1 {
		in.ScaleToZeroGrace = targets[0].grace
	}
	d := st.scaler.Decide(in)

	// What each target gets.
	want := make([]int32, len(targets))
	if shares == nil {
		want[0] = d.Desired
	} else {
		want = autoscale.Distribute(d.Desired, shares, rate)
		holdForGrace(targets, want, st, now)
	}

	// Status before acting, so a failed scale still explains what was decided.
	status.CurrentReplicas = current
	status.RecommendedReplicas = nil
	if ok {
		status.RecommendedReplicas = ptrTo(d.Recommended)
	}
	status.Metrics = status.Metrics[:0]
	for i, m := range policy.Metrics {
		s := samples[m.Name]
		ms := workloadv1alpha1.AutoscalingMetricStatus{Name: m.Name, Target: *resource.NewMilliQuantity(int64(m.Target*1000), resource.DecimalSI), Pods: int32(s.Reported)}
		if s.Reported > 0 {
			ms.Current = resource.NewMilliQuantity(int64(s.Average()*1000), resource.DecimalSI)
			metricValue.WithLabelValues(b.Namespace, b.Name, m.Name).Set(s.Average())
		}
		if perMetric[i] >= 0 {
			ms.DesiredReplicas = ptrTo(perMetric[i])
		}
		metricTarget.WithLabelValues(b.Namespace, b.Name, m.Name).Set(m.Target)
		status.Metrics = append(status.Metrics, ms)
	}
	status.PanicMode = d.Panic
	status.PanicUntil = nil
	if d.Panic {
		status.PanicUntil = &metav1.Time{Time: d.PanicUntil}
	}
	panicMode.WithLabelValues(b.Namespace, b.Name).Set(boolGauge(d.Panic))
	if ok {
		recommendedReplicas.WithLabelValues(b.Namespace, b.Name).Set(float64(d.Recommended))
	}
	switch {
	case d.PanicStarted:
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, ReasonPanicModeStarted, actionDecide, "recommendation %d is at least %d%% of %d replicas: panic mode until %s",
			d.Recommended, policy.Panic.ThresholdPercent, current, d.PanicUntil.UTC().Format(time.RFC3339))
	case d.PanicEnded:
		r.Recorder.Eventf(b, nil, corev1.EventTypeNormal, ReasonPanicModeEnded, actionDecide, "no burst for the panic mode hold: back to the stable policy")
	}
	if d.Panic {
		setCondition(status, b.Generation, ConditionPanicMode, metav1.ConditionTrue, ReasonPanicModeOn, fmt.Sprintf("scale-up by the panic policy until %s; no scale-down meanwhile", d.PanicUntil.UTC().Format(time.RFC3339)))
	} else {
		setCondition(status, b.Generation, ConditionPanicMode, metav1.ConditionFalse, ReasonPanicModeOff, "scale-up by the stable policy")
	}

	metricsText := metricsSummary(policy, samples, perMetric)
	msg := fmt.Sprintf("%s; %s", d.Message, metricsText)
	if !ok {
		msg = d.Message
		if podsTotal == 0 {
			msg += "; the target has no pods"
		} else {
			msg += fmt.Sprintf("; %d of %d pods answered", answered, podsTotal)
		}
		if len(readErrors) > 0 {
			msg += ": " + strings.Join(readErrors, "; ")
		}
	}

	// Act: scale-downs first (they free capacity), then scale-ups cheapest first, so an
	// optimizer's cheap target is never behind a dear one even between two writes.
	status.Targets = status.Targets[:0]
	var total int32
	var applyErr error
	order := make([]int, len(targets))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		da, db := want[order[a]] < targets[order[a]].scale.Spec.Replicas, want[order[b]] < targets[order[b]].scale.Spec.Replicas
		if da != db {
			return da
		}
		return targets[order[a]].cost < targets[order[b]].cost
	})
	for _, i := range order {
		t := targets[i]
		cur := t.scale.Spec.Replicas
		if last, had := st.lastApplied[t.key]; had && last != cur {
			r.Recorder.Eventf(b, t.ref(), corev1.EventTypeNormal, ReasonManualScaleObserved, actionDecide,
				"%s has %d replicas, not the %d the autoscaler last saw or set: someone else scaled it; the autoscaler now decides from %d (it owns the replicas while this binding exists)", t.key, cur, last, cur)
		}
		if want[i] != cur {
			sc := t.scale.DeepCopy()
			sc.Spec.Replicas = want[i]
			if _, err := r.Scales.Scales(t.ns).Update(ctx, t.gr, sc, metav1.UpdateOptions{}); err != nil {
				applyErr = errors.Join(applyErr, fmt.Errorf("scale %s to %d: %w", t.key, want[i], err))
				want[i] = cur
			} else {
				dir, reason := "up", ReasonScaledUp
				if want[i] < cur {
					dir, reason = "down", ReasonScaledDown
				}
				scaleEvents.WithLabelValues(b.Namespace, b.Name, dir).Inc()
				r.Recorder.Eventf(b, t.ref(), corev1.EventTypeNormal, reason, actionScale, "%s: %d -> %d replicas: %s", t.key, cur, want[i], msg)
				status.LastScaleTime = &metav1.Time{Time: now}
			}
		}
		st.lastApplied[t.key] = want[i]
		total += want[i]
		currentReplicas.WithLabelValues(b.Namespace, b.Name, t.key).Set(float64(cur))
		desiredReplicas.WithLabelValues(b.Namespace, b.Name, t.key).Set(float64(want[i]))
	}
	for i, t := range targets {
		status.Targets = append(status.Targets, workloadv1alpha1.AutoscalingTargetStatus{Name: t.key, Kind: t.gvk.Kind, CurrentReplicas: t.scale.Spec.Replicas, DesiredReplicas: want[i]})
	}
	status.DesiredReplicas = ptrTo(total)
	if applyErr != nil {
		return &problem{ReasonScaleFailed, applyErr.Error()}
	}
	if !ok && current >= lo && current <= hi {
		setCondition(status, b.Generation, ConditionReady, metav1.ConditionFalse, autoscale.ReasonNoRecommendation, msg)
		return nil
	}
	setCondition(status, b.Generation, ConditionReady, metav1.ConditionTrue, d.Reason, msg)
	return nil
}

// targets resolves the binding's targets: their scale subresources, pods and bounds.
func (r *Reconciler) targets(ctx context.Context, b *workloadv1alpha1.AutoscalingPolicyBinding) ([]*target, int32, error) {
	var out []*target
	rate := int32(autoscale.DefaultCostExpansionRatePercent)
	if c := b.Spec.ScalingConfiguration; c != nil {
		t, err := r.resolve(ctx, b, c.Target, "spec.scalingConfiguration.target")
		if err != nil {
			return nil, 0, err
		}
		t.min, t.max = c.MinReplicas, c.MaxReplicas
		out = append(out, t)
	} else if c := b.Spec.OptimizerConfiguration; c != nil {
		if c.CostExpansionRatePercent != nil {
			rate = *c.CostExpansionRatePercent
		}
		seen := map[string]int{}
		for i, p := range c.Params {
			field := fmt.Sprintf("spec.optimizerConfiguration.params[%d].target", i)
			t, err := r.resolve(ctx, b, p.Target, field)
			if err != nil {
				return nil, 0, err
			}
			if j, dup := seen[t.key]; dup {
				return nil, 0, &problem{ReasonInvalidBounds, fmt.Sprintf("%s: %s is already params[%d]", field, t.key, j)}
			}
			seen[t.key] = i
			t.min, t.max, t.cost = p.MinReplicas, p.MaxReplicas, p.Cost
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, 0, &problem{ReasonInvalidBounds, "set exactly one of spec.scalingConfiguration and spec.optimizerConfiguration"}
	}
	for _, t := range out {
		if t.min > t.max {
			return nil, 0, &problem{ReasonInvalidBounds, fmt.Sprintf("%s: minReplicas %d exceeds maxReplicas %d", t.key, t.min, t.max)}
		}
	}
	return out, rate, nil
}

func (r *Reconciler) resolve(ctx context.Context, b *workloadv1alpha1.AutoscalingPolicyBinding, spec workloadv1alpha1.Target, field string) (*target, error) {
	ref := spec.TargetRef
	ns := ref.Namespace
	if ns == "" {
		ns = b.Namespace
	}
	if ns != b.Namespace {
		// A binding scales only its own namespace: anyone who may write a binding would
		// otherwise scale any namespace's workloads with the controller's rights.
		return nil, &problem{ReasonCrossNamespace, fmt.Sprintf("%s.targetRef.namespace: %q is not the binding's namespace %q", field, ns, b.Namespace)}
	}
	if ref.Name == "" {
		return nil, &problem{ReasonTargetNotFound, field + ".targetRef.name: must be set"}
	}
	apiVersion, kind := ref.APIVersion, ref.Kind
	if apiVersion == "" {
		apiVersion = defaultTargetAPIVersion
	}
	if kind == "" {
		kind = defaultTargetKind
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, &problem{ReasonTargetNotScalable, fmt.Sprintf("%s.targetRef.apiVersion: %v", field, err)}
	}
	t := &target{spec: spec, key: ref.Name, gvk: gv.WithKind(kind), ns: ns, name: ref.Name}
	mapping, err := r.Mapper.RESTMapping(t.gvk.GroupKind(), gv.Version)
	if err != nil {
		return nil, &problem{ReasonTargetNotScalable, fmt.Sprintf("%s.targetRef: kind %s in %s is not served by this cluster: %v", field, kind, apiVersion, err)}
	}
	t.gr = mapping.Resource.GroupResource()
	t.scale, err = r.Scales.Scales(ns).Get(ctx, t.gr, ref.Name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &problem{ReasonTargetNotFound, fmt.Sprintf("%s.targetRef: %s %s not found in namespace %s", field, kind, ref.Name, ns)}
		}
		return nil, &problem{ReasonTargetNotScalable, fmt.Sprintf("%s.targetRef: %s %s has no usable scale subresource: %v", field, kind, ref.Name, err)}
	}
	sel, err := labels.Parse(t.scale.Status.Selector)
	if err != nil {
		return nil, &problem{ReasonTargetNotScalable, fmt.Sprintf("%s %s: scale status selector %q: %v", kind, ref.Name, t.scale.Status.Selector, err)}
	}
	if sel.Empty() {
		// Without a selector (a target not reconciled yet) every pod of the namespace
		// would match: read none instead.
		sel = labels.Nothing()
	} else if t.gvk.GroupKind() == workloadv1alpha1.SchemeGroupVersion.WithKind("ModelServing").GroupKind() {
		// A ModelServing's scale selector holds one pod per ServingGroup (for HPA, as
		// Kthena's); the metrics come from every role replica's entry pod.
		sel = workloadv1alpha1.EntryPodsSelector(ref.Name)
	}
	for k, v := range spec.AdditionalMatchLabels {
		req, err := labels.NewRequirement(k, selection.Equals, []string{v})
		if err != nil {
			return nil, &problem{ReasonTargetNotScalable, fmt.Sprintf("%s.additionalMatchLabels: %v", field, err)}
		}
		sel = sel.Add(*req)
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	t.pods = podmetrics.FromPods(pods.Items)
	var md metav1.PartialObjectMetadata
	md.SetGroupVersionKind(t.gvk)
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, &md); err == nil {
		if v, ok := md.Annotations[workloadv1alpha1.ScaleToZeroGracePeriodAnnotation]; ok {
			if g, err := time.ParseDuration(v); err == nil && g > 0 {
				t.grace = g
			} else {
				return nil, &problem{ReasonTargetNotScalable, fmt.Sprintf("%s %s: annotation %s=%q is not a positive duration", kind, ref.Name, workloadv1alpha1.ScaleToZeroGracePeriodAnnotation, v)}
			}
		}
	}
	return t, nil
}

// checkConflicts refuses to act on a target another binding already scales: two
// autoscalers on one object would undo each other every sync. The oldest binding keeps it.
func (r *Reconciler) checkConflicts(ctx context.Context, b *workloadv1alpha1.AutoscalingPolicyBinding, targets []*target) error {
	var list workloadv1alpha1.AutoscalingPolicyBindingList
	if err := r.Client.List(ctx, &list, client.InNamespace(b.Namespace)); err != nil {
		return err
	}
	mine := map[string]bool{}
	for _, t := range targets {
		mine[t.gvk.Kind+"/"+t.name] = true
	}
	for _, o := range list.Items {
		if o.UID == b.UID || !o.DeletionTimestamp.IsZero() || !olderThan(&o, b) {
			continue
		}
		for _, ref := range targetRefs(&o) {
			kind := ref.Kind
			if kind == "" {
				kind = defaultTargetKind
			}
			if (ref.Namespace == "" || ref.Namespace == b.Namespace) && mine[kind+"/"+ref.Name] {
				return &problem{ReasonConflict, fmt.Sprintf("%s %s is already scaled by AutoscalingPolicyBinding %s; remove one of the two", kind, ref.Name, o.Name)}
			}
		}
	}
	return nil
}

func olderThan(a, b *workloadv1alpha1.AutoscalingPolicyBinding) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

func targetRefs(b *workloadv1alpha1.AutoscalingPolicyBinding) []corev1.ObjectReference {
	if c := b.Spec.ScalingConfiguration; c != nil {
		return []corev1.ObjectReference{c.Target.TargetRef}
	}
	var out []corev1.ObjectReference
	if c := b.Spec.OptimizerConfiguration; c != nil {
		for _, p := range c.Params {
			out = append(out, p.Target.TargetRef)
		}
	}
	return out
}

// holdForGrace keeps one replica on an optimizer target whose share fell to zero until the
// share has been zero for the target's scale-to-zero grace period.
func holdForGrace(targets []*target, want []int32, st *state, now time.Time) {
	for i, t := range targets {
		if want[i] > 0 {
			delete(st.zeroSince, t.key)
			continue
		}
		since, ok := st.zeroSince[t.key]
		if !ok {
			since = now
			st.zeroSince[t.key] = now
		}
		if t.scale.Spec.Replicas > 0 && now.Sub(since) < t.grace {
			want[i] = 1
		}
	}
}

func (r *Reconciler) stateFor(key types.NamespacedName, uid types.UID, now time.Time) *state {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.states[key]
	if st == nil || st.uid != uid {
		if st != nil {
			st.reader.Close()
		}
		st = &state{uid: uid, scaler: autoscale.NewScaler(autoscale.Policy{}, now), reader: podmetrics.NewReader(r.MetricReadTimeout),
			lastApplied: map[string]int32{}, zeroSince: map[string]time.Time{}}
		r.states[key] = st
	}
	return st
}

func (r *Reconciler) drop(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.states[key]; st != nil {
		st.reader.Close()
		delete(r.states, key)
	}
	forget(key.Namespace, key.Name)
}

func metricsSummary(p autoscale.Policy, samples map[string]autoscale.Sample, per []int32) string {
	parts := make([]string, 0, len(p.Metrics))
	for i, m := range p.Metrics {
		s := samples[m.Name]
		if s.Reported == 0 {
			parts = append(parts, fmt.Sprintf("%s unread", m.Name))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s per pod over %d pods (target %s) asks for %d", m.Name,
			strconv.FormatFloat(s.Average(), 'g', 4, 64), s.Reported, strconv.FormatFloat(m.Target, 'g', 4, 64), per[i]))
	}
	return strings.Join(parts, "; ")
}

func setCondition(st *workloadv1alpha1.AutoscalingPolicyBindingStatus, gen int64, typ string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// hasConditionReason: one warning event per new problem, not one per sync.
func hasConditionReason(conds []metav1.Condition, typ, reason string) bool {
	c := meta.FindStatusCondition(conds, typ)
	return c != nil && c.Reason == reason
}

// equalStatus says whether writing b over a would tell the user nothing new: it ignores the
// live readings (metric values, the decision time, the Ready message while its reason holds)
// unless the last write is over a minute old. A binding whose decision does not change is
// then written once a minute, not every sync, so a short sync period costs the apiserver
// nothing; every change of replicas, recommendation, reason or panic mode is written at once.
func equalStatus(a, b *workloadv1alpha1.AutoscalingPolicyBindingStatus) bool {
	if a.LastDecisionTime == nil || b.LastDecisionTime == nil || b.LastDecisionTime.Sub(a.LastDecisionTime.Time) > time.Minute {
		return false
	}
	x, y := a.DeepCopy(), b.DeepCopy()
	for _, st := range []*workloadv1alpha1.AutoscalingPolicyBindingStatus{x, y} {
		st.LastDecisionTime = nil
		for i := range st.Metrics {
			st.Metrics[i].Current, st.Metrics[i].Pods = nil, 0
		}
		for i := range st.Conditions {
			st.Conditions[i].Message, st.Conditions[i].LastTransitionTime = "", metav1.Time{}
		}
	}
	return equality.Semantic.DeepEqual(x, y)
}

func quoteAll(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strconv.Quote(x)
	}
	return out
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func ptrTo[T any](v T) *T { return &v }

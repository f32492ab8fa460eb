package binding

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale"
	"github.com/berth-sh/berth/pkg/autoscale/podmetrics"
)

// job is one decision over one target (single) or several spread by cost (optimizer), the
// same whether a binding or a policy's own homogeneousTarget or heterogeneousTarget asks.
type job struct {
	// owner is the binding or policy: events are recorded on it.
	owner      client.Object
	namespace  string
	label      string // the "binding" label of its metric series
	generation int64
	policy     *workloadv1alpha1.AutoscalingPolicy
	single     *workloadv1alpha1.ScalingConfiguration
	optimizer  *workloadv1alpha1.OptimizerConfiguration
	field      string // where single or optimizer is written, for messages
}

// target is one scale target of a job with what the optimizer knows of it.
type target struct {
	spec     workloadv1alpha1.Target
	field    string
	key      string // name, or namespace/name
	gvk      schema.GroupVersionKind
	gr       schema.GroupResource
	ns, name string
	min, max int32
	cost     int32
	scale    *autoscalingv1.Scale
	// podList are the target's pods (its selector and additionalMatchLabels); pods the same,
	// as the metrics reader sees them.
	podList []corev1.Pod
	pods    []podmetrics.Pod
	grace   time.Duration
	// demand is the time in the target's demand annotation (zero without one): a router
	// held a request for it at zero replicas (fromzero.go).
	demand time.Time
	// annotations are the target's own; fits the groups that fit it as berth-scheduler last
	// published (-1: no fresh count; capacity.go).
	annotations map[string]string
	fits        int32
	fitsBase    int32 // the replicas the count was made against
}

// decide reads, decides and applies for one job, writing what it did into status.
func (r *Reconciler) decide(ctx context.Context, j job, st *state, status *workloadv1alpha1.AutoscalingPolicyBindingStatus, now time.Time) error {
	pol := j.policy
	policy, err := autoscale.NewPolicy(&pol.Spec)
	if err != nil {
		return &problem{ReasonInvalidPolicy, fmt.Sprintf("AutoscalingPolicy %s: %v", pol.Name, err)}
	}
	if st.policyUID != pol.UID || st.policyGen != pol.Generation {
		st.scaler.SetPolicy(policy)
		st.policyUID, st.policyGen = pol.UID, pol.Generation
	}

	targets, rate, err := r.targets(ctx, j)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(targets))
	for _, t := range targets {
		keys = append(keys, t.gvk.Kind+"/"+t.name)
	}
	if err := r.checkConflicts(ctx, j.owner, keys); err != nil {
		return err
	}
	names := make([]string, len(policy.Metrics))
	policyKeys := map[string]bool{}
	for i, m := range policy.Metrics {
		names[i] = m.Name
		policyKeys[m.Name] = true
	}
	// Read every target's pods; an optimizer pools them (its targets serve one model).
	samples := map[string]autoscale.Sample{}
	var current int32
	var answered, podsTotal int
	var readErrors []string
	for _, t := range targets {
		current += t.scale.Spec.Replicas
		podsTotal += len(t.pods)
		if errs := autoscale.ValidateSources(t.spec.MetricSources, policyKeys, t.field+".metricSources"); len(errs) > 0 {
			return &problem{ReasonMetricSource, errors.Join(errs...).Error()}
		}
		reads, err := planReads(t.spec, names, t.field)
		if err != nil {
			return err
		}
		tr, err := r.readTarget(ctx, j.namespace, st, t, reads, now)
		if err != nil {
			return err
		}
		answered = max(answered, tr.answered)
		readErrors = append(readErrors, tr.errors...)
		for n, s := range tr.samples {
			acc, seen := samples[n]
			if seen && acc.External != s.External {
				return &problem{ReasonMetricSource, fmt.Sprintf("metric %q is read from Prometheus for one target and from pods for another: the targets of %s must read each metric from one kind of source", n, j.field)}
			}
			acc.External = s.External
			acc.Sum += s.Sum
			if s.External {
				// A query's value is its target's whole; the pool's is the sum of them.
				acc.Reported = max(acc.Reported, s.Reported)
			} else {
				acc.Reported += s.Reported
			}
			acc.Missing += s.Missing
			samples[n] = acc
		}
	}
	rec, perMetric, ok := autoscale.RecommendAll(current, policy, samples)

	// Placement-aware scale-up (capacity.go): each ModelServing target's max is lowered to
	// what can land, so the decision's bounds and the optimizer's shares never ask for a
	// group the scheduler could not place.
	for _, t := range targets {
		if !r.BlindScaling && t.gvk.GroupKind() == workloadv1alpha1.SchemeGroupVersion.WithKind("ModelServing").GroupKind() {
			readFits(t, t.annotations, now)
		}
	}
	var lo, hi, blindHi int32
	var shares []autoscale.Share
	if j.single != nil {
		lo, blindHi = targets[0].min, targets[0].max
		hi = capped(blindHi, lo, capOf(targets[0]))
	} else {
		for _, t := range targets {
			shares = append(shares, autoscale.Share{Cost: t.cost, Min: t.min, Max: capped(t.max, t.min, capOf(t))})
			blindHi += max(t.max, t.min)
		}
		lo, hi = autoscale.Bounds(shares)
	}
	in := autoscale.Input{Now: now, Current: current, Recommended: rec, HasRecommendation: ok, Min: lo, Max: hi}
	if len(targets) == 1 {
		in.ScaleToZeroGrace = targets[0].grace
	}
	d := st.scaler.Decide(in)
	fromZero := r.fromZero(targets, st, current, lo, hi, &d, now)

	// What each target gets.
	want := make([]int32, len(targets))
	if shares == nil {
		want[0] = d.Desired
	} else {
		want = autoscale.Distribute(d.Desired, shares, rate)
		holdForGrace(targets, want, st, now)
	}
	// What the decision would have been blind: when the lowered bound held it, the
	// recommendation (or the one replica demand asks for), up to the blind bound.
	blindTotal := d.Desired
	if hi < blindHi && d.Desired >= hi {
		asked := d.Desired
		if ok {
			asked = max(asked, rec) // d.Recommended is clamped to the lowered bound
		}
		for _, t := range targets {
			if current == 0 && recentDemand(t, st, now) {
				asked = max(asked, max(1, lo))
			}
		}
		blindTotal = min(asked, blindHi)
	}
	blind := blindWant(targets, blindTotal, rate, shares == nil)
	for i, t := range targets {
		// The scale-to-zero grace holds a replica either way (holdForGrace, without its state).
		if shares != nil && blind[i] == 0 && want[i] == 1 && t.scale.Spec.Replicas > 0 {
			blind[i] = 1
		}
	}
	r.applyCapacityReport(j, targets, want, blind, status)

	// Status before acting, so a failed scale still explains what was decided.
	status.CurrentReplicas = current
	status.RecommendedReplicas = nil
	if ok {
		status.RecommendedReplicas = ptrTo(d.Recommended)
	}
	status.Metrics = status.Metrics[:0]
	for i, m := range policy.Metrics {
		s := samples[m.Name]
		ms := workloadv1alpha1.AutoscalingMetricStatus{Name: m.Name, Target: *resource.NewMilliQuantity(int64(m.Target*1000), resource.DecimalSI)}
		if !s.External {
			ms.Pods = int32(s.Reported)
		}
		if s.Reported > 0 {
			ms.Current = resource.NewMilliQuantity(int64(s.Average()*1000), resource.DecimalSI)
			metricValue.WithLabelValues(j.namespace, j.label, m.Name).Set(s.Average())
		}
		if perMetric[i] >= 0 {
			ms.DesiredReplicas = ptrTo(perMetric[i])
		}
		metricTarget.WithLabelValues(j.namespace, j.label, m.Name).Set(m.Target)
		status.Metrics = append(status.Metrics, ms)
	}
	status.PanicMode = d.Panic
	status.PanicUntil = nil
	if d.Panic {
		status.PanicUntil = &metav1.Time{Time: d.PanicUntil}
	}
	panicMode.WithLabelValues(j.namespace, j.label).Set(boolGauge(d.Panic))
	if ok {
		recommendedReplicas.WithLabelValues(j.namespace, j.label).Set(float64(d.Recommended))
	}
	r.panicEvents(j.owner, d, policy, current)
	if d.Panic {
		setCondition(&status.Conditions, j.generation, ConditionPanicMode, metav1.ConditionTrue, ReasonPanicModeOn, fmt.Sprintf("scale-up by the panic policy until %s; no scale-down meanwhile", d.PanicUntil.UTC().Format(time.RFC3339)))
	} else {
		setCondition(&status.Conditions, j.generation, ConditionPanicMode, metav1.ConditionFalse, ReasonPanicModeOff, "scale-up by the stable policy")
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
	} else if len(readErrors) > 0 {
		msg += "; " + strings.Join(readErrors, "; ")
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
	// A scale-up that failed holds back the dearer targets' scale-ups of this decision:
	// scaling them past a cheap target left behind is what the order is there to prevent
	// (seen under -race: a conflict on the cheap target, then the dear one scaled up).
	upFailed := false
	for _, i := range order {
		t := targets[i]
		cur := t.scale.Spec.Replicas
		r.observeManualScale(j.owner, st, t.key, t.ref(), cur)
		if want[i] > cur && upFailed {
			want[i] = cur
		}
		if want[i] != cur {
			if err := r.writeScale(ctx, t, want[i]); err != nil {
				applyErr = errors.Join(applyErr, fmt.Errorf("scale %s to %d: %w", t.key, want[i], err))
				upFailed = upFailed || want[i] > cur
				want[i] = cur
			} else {
				if fromZero && cur == 0 {
					r.scaledFromZeroEvent(j, t, want[i])
				}
				r.scaledEvent(j, t.key, t.ref(), cur, want[i], msg)
				status.LastScaleTime = &metav1.Time{Time: now}
				if want[i] == 0 {
					st.zeroAt[t.key] = now
				}
			}
		}
		st.lastApplied[t.key] = want[i]
		total += want[i]
		currentReplicas.WithLabelValues(j.namespace, j.label, t.key).Set(float64(cur))
		desiredReplicas.WithLabelValues(j.namespace, j.label, t.key).Set(float64(want[i]))
	}
	for i, t := range targets {
		status.Targets = append(status.Targets, workloadv1alpha1.AutoscalingTargetStatus{Name: t.key, Kind: t.gvk.Kind, CurrentReplicas: t.scale.Spec.Replicas, DesiredReplicas: want[i]})
	}
	status.DesiredReplicas = ptrTo(total)
	if applyErr != nil {
		return &problem{ReasonScaleFailed, applyErr.Error()}
	}
	if !ok && current >= lo && current <= hi && !fromZero {
		setCondition(&status.Conditions, j.generation, ConditionReady, metav1.ConditionFalse, autoscale.ReasonNoRecommendation, msg)
		return nil
	}
	setCondition(&status.Conditions, j.generation, ConditionReady, metav1.ConditionTrue, d.Reason, msg)
	return nil
}

// panicEvents reports a change of panic mode on the owner.
func (r *Reconciler) panicEvents(owner client.Object, d autoscale.Decision, policy autoscale.Policy, current int32) {
	switch {
	case d.PanicStarted:
		r.Recorder.Eventf(owner, nil, corev1.EventTypeNormal, ReasonPanicModeStarted, actionDecide, "recommendation %d is at least %d%% of %d replicas: panic mode until %s",
			d.Recommended, policy.Panic.ThresholdPercent, current, d.PanicUntil.UTC().Format(time.RFC3339))
	case d.PanicEnded:
		r.Recorder.Eventf(owner, nil, corev1.EventTypeNormal, ReasonPanicModeEnded, actionDecide, "no burst for the panic mode hold: back to the stable policy")
	}
}

// observeManualScale reports replicas someone else set since the autoscaler's last decision.
func (r *Reconciler) observeManualScale(owner client.Object, st *state, key string, related *corev1.ObjectReference, cur int32) {
	if last, had := st.lastApplied[key]; had && last != cur {
		r.Recorder.Eventf(owner, related, corev1.EventTypeNormal, ReasonManualScaleObserved, actionDecide,
			"%s has %d replicas, not the %d the autoscaler last saw or set: someone else scaled it; the autoscaler now decides from %d (it owns the replicas while this %s exists)",
			key, cur, last, cur, ownerKind(owner))
	}
}

// scaledEvent reports one applied change of replicas.
func (r *Reconciler) scaledEvent(j job, key string, related *corev1.ObjectReference, from, to int32, why string) {
	dir, reason := "up", ReasonScaledUp
	if to < from {
		dir, reason = "down", ReasonScaledDown
	}
	scaleEvents.WithLabelValues(j.namespace, j.label, dir).Inc()
	r.Recorder.Eventf(j.owner, related, corev1.EventTypeNormal, reason, actionScale, "%s: %d -> %d replicas: %s", key, from, to, why)
}

func ownerKind(owner client.Object) string {
	if _, ok := owner.(*workloadv1alpha1.AutoscalingPolicy); ok {
		return "policy"
	}
	return "binding"
}

// targets resolves the job's targets: their scale subresources, pods and bounds.
func (r *Reconciler) targets(ctx context.Context, j job) ([]*target, int32, error) {
	var out []*target
	rate := int32(autoscale.DefaultCostExpansionRatePercent)
	if c := j.single; c != nil {
		t, err := r.resolve(ctx, j, c.Target, j.field+".target")
		if err != nil {
			return nil, 0, err
		}
		t.min, t.max = c.MinReplicas, c.MaxReplicas
		out = append(out, t)
	} else if c := j.optimizer; c != nil {
		if c.CostExpansionRatePercent != nil {
			rate = *c.CostExpansionRatePercent
		}
		seen := map[string]int{}
		for i, p := range c.Params {
			field := fmt.Sprintf("%s.params[%d].target", j.field, i)
			t, err := r.resolve(ctx, j, p.Target, field)
			if err != nil {
				return nil, 0, err
			}
			if k, dup := seen[t.key]; dup {
				return nil, 0, &problem{ReasonInvalidBounds, fmt.Sprintf("%s: %s is already params[%d]", field, t.key, k)}
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

func (r *Reconciler) resolve(ctx context.Context, j job, spec workloadv1alpha1.Target, field string) (*target, error) {
	namespace := j.namespace
	ref := spec.TargetRef
	ns := ref.Namespace
	if ns == "" {
		ns = namespace
	}
	if ns != namespace {
		// A binding (or policy) scales only its own namespace: anyone who may write one
		// would otherwise scale any namespace's workloads with the controller's rights.
		return nil, &problem{ReasonCrossNamespace, fmt.Sprintf("%s.targetRef.namespace: %q is not the %s's namespace %q", field, ns, ownerKind(j.owner), namespace)}
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
	t := &target{spec: spec, field: field, key: ref.Name, gvk: gv.WithKind(kind), ns: ns, name: ref.Name, fits: -1}
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
	t.podList = pods.Items
	t.pods = podmetrics.FromPods(pods.Items)
	var md metav1.PartialObjectMetadata
	md.SetGroupVersionKind(t.gvk)
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, &md); err == nil {
		t.annotations = md.Annotations
		if t.grace, err = scaleToZeroGrace(md.Annotations); err != nil {
			return nil, &problem{ReasonTargetNotScalable, fmt.Sprintf("%s %s: %v", kind, ref.Name, err)}
		}
		if v, ok := md.Annotations[workloadv1alpha1.DemandAnnotation]; ok {
			// An unreadable time is no demand: the router writes RFC 3339 only.
			t.demand, _ = time.Parse(time.RFC3339Nano, v)
		}
	}
	return t, nil
}

// scaleToZeroGrace is a target's scale-to-zero grace period from its annotation (0 without).
func scaleToZeroGrace(annotations map[string]string) (time.Duration, error) {
	v, ok := annotations[workloadv1alpha1.ScaleToZeroGracePeriodAnnotation]
	if !ok {
		return 0, nil
	}
	if g, err := time.ParseDuration(v); err == nil && g > 0 {
		return g, nil
	}
	return 0, fmt.Errorf("annotation %s=%q is not a positive duration", workloadv1alpha1.ScaleToZeroGracePeriodAnnotation, v)
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

func metricsSummary(p autoscale.Policy, samples map[string]autoscale.Sample, per []int32) string {
	parts := make([]string, 0, len(p.Metrics))
	for i, m := range p.Metrics {
		s := samples[m.Name]
		switch {
		case s.Reported == 0:
			parts = append(parts, fmt.Sprintf("%s unread", m.Name))
		case s.External:
			parts = append(parts, fmt.Sprintf("%s %s from Prometheus (target %s per replica) asks for %d", m.Name,
				strconv.FormatFloat(s.Sum, 'g', 4, 64), strconv.FormatFloat(m.Target, 'g', 4, 64), per[i]))
		default:
			parts = append(parts, fmt.Sprintf("%s %s per pod over %d pods (target %s) asks for %d", m.Name,
				strconv.FormatFloat(s.Average(), 'g', 4, 64), s.Reported, strconv.FormatFloat(m.Target, 'g', 4, 64), per[i]))
		}
	}
	return strings.Join(parts, "; ")
}

// equalStatus says whether writing b over a would tell the user nothing new: it ignores the
// live readings (metric values, the decision time, the Ready message while its reason holds)
// unless the last write is over a minute old. A binding whose decision does not change is
// then written once a minute, not every sync, so a short sync period costs the apiserver
// nothing; every change of replicas, recommendation, reason or panic mode is written at once,
// and so is a change of the CapacityLimited message: it holds the groups that fit, which
// change when the cluster does, not every sync (and its event is sent once per new message,
// judged against the written status).
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
			if st.Conditions[i].Type != ConditionCapacityLimited {
				st.Conditions[i].Message = ""
			}
			st.Conditions[i].LastTransitionTime = metav1.Time{}
		}
	}
	return equality.Semantic.DeepEqual(x, y)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func ptrTo[T any](v T) *T { return &v }

// writeScale sets t's replicas through its scale subresource. A conflict (the target was
// written since its scale was read: its controller's status, an annotation) is retried on a
// fresh read, since only the replica count is written and the decision does not depend on
// what changed.
func (r *Reconciler) writeScale(ctx context.Context, t *target, replicas int32) error {
	sc := t.scale.DeepCopy()
	for attempt := 0; ; attempt++ {
		sc.Spec.Replicas = replicas
		_, err := r.Scales.Scales(t.ns).Update(ctx, t.gr, sc, metav1.UpdateOptions{})
		if err == nil || !apierrors.IsConflict(err) || attempt == 2 {
			return err
		}
		if sc, err = r.Scales.Scales(t.ns).Get(ctx, t.gr, t.name, metav1.GetOptions{}); err != nil {
			return err
		}
	}
}

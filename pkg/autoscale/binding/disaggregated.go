package binding

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale"
	"github.com/berth-sh/berth/pkg/autoscale/podmetrics"
)

// roleDecision is one role of a disaggregatedTarget at one decision.
type roleDecision struct {
	name     string
	index    int // in the ModelServing's roles
	current  int32
	decided  int32 // by the role's own metrics and the policy's behavior
	final    int32 // after the ratio constraint
	bounds   autoscale.RoleBounds
	fixed    bool
	ok       bool // the role's metrics gave a recommendation
	decision autoscale.Decision
	summary  string // its metrics, for messages
	// Placement-aware scale-up (capacity.go): fits is the published count of replicas of
	// the role every placed group can take (-1: none fresh), blind what the role would
	// have been scaled to without it.
	fits     int32
	fitsBase int32 // the role's replicas the count was made against
	blind    int32
	// unlowered is final before fitTogether lowered it (0: it did not).
	unlowered int32
}

// decideRoles decides for a disaggregatedTarget: each role of the ModelServing from its own
// metrics (read from that role's entry pods) and bounds, as a single target would be, then
// the ratio constraint over the pair (autoscale.EnforceRatio), then one patch of the
// ModelServing's role replicas, so both roles change in one write and every version of the
// ModelServing keeps the ratio.
func (r *Reconciler) decideRoles(ctx context.Context, p *workloadv1alpha1.AutoscalingPolicy, st *state, status *workloadv1alpha1.AutoscalingPolicyStatus, now time.Time) error {
	const field = "spec.disaggregatedTarget"
	dt := p.Spec.DisaggregatedTarget
	ref := dt.TargetRef
	if ref.Namespace != "" && ref.Namespace != p.Namespace {
		return &problem{ReasonCrossNamespace, fmt.Sprintf("%s.targetRef.namespace: %q is not the policy's namespace %q", field, ref.Namespace, p.Namespace)}
	}
	var ms workloadv1alpha1.ModelServing
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: ref.Name}, &ms); err != nil {
		if apierrors.IsNotFound(err) {
			return &problem{ReasonTargetNotFound, fmt.Sprintf("%s.targetRef: ModelServing %s not found in namespace %s", field, ref.Name, p.Namespace)}
		}
		return err
	}
	names := make([]string, 0, len(dt.Roles))
	for role := range dt.Roles {
		names = append(names, role)
	}
	sort.Strings(names)
	keys := make([]string, len(names))
	for i, role := range names {
		keys[i] = roleKey(ms.Name, role)
	}
	if err := r.checkConflicts(ctx, p, keys); err != nil {
		return err
	}
	grace, err := scaleToZeroGrace(ms.Annotations)
	if err != nil {
		return &problem{ReasonTargetNotScalable, fmt.Sprintf("ModelServing %s: %v", ms.Name, err)}
	}
	base, err := autoscale.NewPolicy(&p.Spec)
	if err != nil {
		return &problem{ReasonInvalidPolicy, err.Error()}
	}
	regenerated := st.policyUID != p.UID || st.policyGen != p.Generation
	st.policyUID, st.policyGen = p.UID, p.Generation

	// The entry pods of the ModelServing: each role's engines serve their metrics there.
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(p.Namespace),
		client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: ms.Name, workloadv1alpha1.EntryLabel: "true"}); err != nil {
		return err
	}

	// Placement-aware scale-up: berth-scheduler's count of the replicas of each role every
	// group can take now.
	var fits map[string]autoscale.RoleFit
	if !r.BlindScaling {
		fits, _ = autoscale.RoleReplicasThatFit(ms.Annotations, now)
	}

	roles := make(map[string]*roleDecision, len(names))
	for _, role := range names {
		param := dt.Roles[role]
		rd := &roleDecision{name: role, index: -1, bounds: autoscale.RoleBounds{Min: param.MinReplicas, Max: param.MaxReplicas}, fixed: autoscale.FixedRole(param), fits: -1}
		var have []string
		for i, msr := range ms.Spec.Template.Roles {
			have = append(have, msr.Name)
			if msr.Name == role {
				rd.index, rd.current = i, 1 // the API's default
				if msr.Replicas != nil {
					rd.current = *msr.Replicas
				}
			}
		}
		if rd.index < 0 {
			return &problem{ReasonTargetNotFound, fmt.Sprintf("%s.roles[%s]: ModelServing %s has no role %s (it has %s)", field, role, ms.Name, role, strings.Join(have, ", "))}
		}
		roles[role] = rd
		if rd.fixed {
			rd.decided = param.MinReplicas
			rd.decision = autoscale.Decision{Desired: param.MinReplicas, Reason: "FixedRole", Message: fmt.Sprintf("held at %d replicas (minReplicas = maxReplicas)", param.MinReplicas)}
			continue
		}
		metrics, err := autoscale.RoleMetrics(&p.Spec, role, param)
		if err != nil {
			return &problem{ReasonInvalidPolicy, err.Error()}
		}
		policy := base
		policy.Metrics = metrics
		sc := st.roles[role]
		if sc == nil {
			sc = autoscale.NewScaler(policy, now)
			st.roles[role] = sc
		} else if regenerated {
			sc.SetPolicy(policy)
		}
		rolePods := podsOfRole(pods.Items, role)
		t := &target{key: ms.Name + "/" + role, ns: p.Namespace, name: ms.Name, podList: rolePods, pods: podmetrics.FromPods(rolePods)}
		metricNames := make([]string, len(metrics))
		for i, m := range metrics {
			metricNames[i] = m.Name
		}
		roleField := fmt.Sprintf("%s.roles[%s]", field, role)
		reads, err := planReads(workloadv1alpha1.Target{MetricSources: param.MetricSources}, metricNames, roleField)
		if err != nil {
			return err
		}
		tr, err := r.readTarget(ctx, p.Namespace, st, t, reads, now)
		if err != nil {
			return err
		}
		rec, per, ok := autoscale.RecommendAll(rd.current, policy, tr.samples)
		rd.ok = ok
		// A scale-up stops at the replicas that land, and the ratio below is kept within
		// that bound too.
		if f, counted := fits[role]; counted {
			rd.fits, rd.fitsBase = f.Fit, f.Replicas
			rd.bounds.Max = capped(param.MaxReplicas, param.MinReplicas, autoscale.ReplicasThatLand(f.Fit, f.Replicas, rd.current))
		}
		rd.decision = sc.Decide(autoscale.Input{Now: now, Current: rd.current, Recommended: rec, HasRecommendation: ok,
			Min: param.MinReplicas, Max: rd.bounds.Max, ScaleToZeroGrace: grace})
		rd.decided = rd.decision.Desired
		rd.blind = rd.decided
		if ok && rd.bounds.Max < param.MaxReplicas && rd.decided >= rd.bounds.Max {
			rd.blind = min(max(rd.decided, rec), param.MaxReplicas) // rd.decision.Recommended is clamped
		}
		rd.summary = metricsSummary(policy, tr.samples, per)
		if !ok {
			rd.summary = fmt.Sprintf("%d of %d pods answered", tr.answered, len(t.pods))
			if len(tr.errors) > 0 {
				rd.summary += ": " + strings.Join(tr.errors, "; ")
			}
		}
		r.panicEvents(p, rd.decision, policy, rd.current)
	}

	// The ratio constraint over what the roles decided.
	for _, rd := range roles {
		rd.final = rd.decided
	}
	var adjusted, violated bool
	var ratioText string
	if c := dt.RatioConstraint; c != nil {
		num, den := roles[c.NumeratorRole], roles[c.DenominatorRole]
		ratio := autoscale.Ratio{Min: c.MinRatio.AsApproximateFloat64(), Max: c.MaxRatio.AsApproximateFloat64()}
		num.final, den.final, adjusted = autoscale.EnforceRatio(num.decided, den.decided, num.bounds, den.bounds, ratio)
		violated = !autoscale.InRatio(num.final, den.final, ratio)
		ratioText = fmt.Sprintf("%s:%s %d:%d within [%s, %s]", c.NumeratorRole, c.DenominatorRole, num.final, den.final, c.MinRatio.String(), c.MaxRatio.String())
		if violated {
			ratioText = fmt.Sprintf("%s:%s %d:%d is outside [%s, %s] and their bounds allow nothing within", c.NumeratorRole, c.DenominatorRole, num.final, den.final, c.MinRatio.String(), c.MaxRatio.String())
		}
		if adjusted {
			ratioText += fmt.Sprintf(" (their metrics asked for %d:%d)", num.decided, den.decided)
		}
	}

	// Scale-ups of two roles that each fit alone but not together are lowered to a pair
	// that does (berth-scheduler's alongside counts), within the ratio when it binds them.
	for i, an := range names {
		for _, bn := range names[i+1:] {
			along := fits[an].Alongside[bn]
			if len(along) == 0 {
				continue
			}
			var ratio *autoscale.Ratio
			c := dt.RatioConstraint
			if c != nil && (c.NumeratorRole == an && c.DenominatorRole == bn || c.NumeratorRole == bn && c.DenominatorRole == an) {
				ratio = &autoscale.Ratio{Min: c.MinRatio.AsApproximateFloat64(), Max: c.MaxRatio.AsApproximateFloat64()}
			}
			if fitTogether(roles[an], roles[bn], along, ratio, c != nil && c.NumeratorRole == an) && ratio != nil {
				num, den := roles[c.NumeratorRole], roles[c.DenominatorRole]
				ratioText = fmt.Sprintf("%s:%s %d:%d within [%s, %s] (lowered to what fits together; their metrics asked for %d:%d)",
					c.NumeratorRole, c.DenominatorRole, num.final, den.final, c.MinRatio.String(), c.MaxRatio.String(), num.decided, den.decided)
			}
		}
	}

	// Act: one JSON patch of every changed role, each guarded by a test of its name, so a
	// ModelServing whose roles were reordered meanwhile is not scaled on the wrong role.
	var ops []map[string]any
	var changed []*roleDecision
	for _, role := range names {
		rd := roles[role]
		r.observeManualScale(p, st, ms.Name+"/"+role, msRef(&ms), rd.current)
		if rd.final != rd.current {
			ops = append(ops,
				map[string]any{"op": "test", "path": fmt.Sprintf("/spec/template/roles/%d/name", rd.index), "value": role},
				map[string]any{"op": "add", "path": fmt.Sprintf("/spec/template/roles/%d/replicas", rd.index), "value": rd.final})
			changed = append(changed, rd)
		}
	}
	msg := rolesMessage(names, roles, ratioText)
	var applyErr error
	if len(ops) > 0 {
		patch, _ := json.Marshal(ops)
		if err := r.Client.Patch(ctx, &ms, client.RawPatch(types.JSONPatchType, patch)); err != nil {
			applyErr = fmt.Errorf("scale the roles of ModelServing %s: %w", ms.Name, err)
			for _, rd := range changed {
				rd.final = rd.current
			}
			changed = nil
		}
	}
	j := job{owner: p, namespace: p.Namespace, label: policySeriesPrefix + p.Name, generation: p.Generation}
	r.applyRoleCapacity(j, ms.Name, names, roles, &status.Conditions)
	for _, rd := range changed {
		r.scaledEvent(j, ms.Name+" role "+rd.name, msRef(&ms), rd.current, rd.final, msg)
		if !rd.fixed && rd.final != rd.decided {
			st.roles[rd.name].Applied(now, rd.final)
		}
	}

	// Status.
	prev := map[string]*metav1.Time{}
	if ds := status.DisaggregatedStatus; ds != nil {
		for _, u := range ds.Roles {
			prev[u.Name] = u.LastScaleTime
		}
	}
	ds := &workloadv1alpha1.DisaggregatedScalingStatus{RatioAdjusted: adjusted}
	anyOK, anyScaled := false, false
	for _, role := range names {
		rd := roles[role]
		st.lastApplied[ms.Name+"/"+role] = rd.final
		mode := ModeStable
		if rd.decision.Panic {
			mode = ModePanic
		}
		u := workloadv1alpha1.TargetScalingStatus{Name: role, CurrentReplicas: rd.current, DesiredReplicas: rd.decided, Mode: mode, LastScaleTime: prev[role]}
		if rd.final != rd.current {
			u.LastScaleTime = &metav1.Time{Time: now}
			anyScaled = true
		}
		ds.Roles = append(ds.Roles, u)
		anyOK = anyOK || rd.ok || rd.fixed
		currentReplicas.WithLabelValues(p.Namespace, j.label, ms.Name+"/"+role).Set(float64(rd.current))
		desiredReplicas.WithLabelValues(p.Namespace, j.label, ms.Name+"/"+role).Set(float64(rd.final))
	}
	if c := dt.RatioConstraint; c != nil {
		ds.RatioStatus = &workloadv1alpha1.RoleRatioStatus{NumeratorRole: c.NumeratorRole, DenominatorRole: c.DenominatorRole,
			CurrentRatio: autoscale.FormatRatio(roles[c.NumeratorRole].final, roles[c.DenominatorRole].final)}
		if violated {
			setCondition(&status.Conditions, p.Generation, ConditionRatioConstraintViolated, metav1.ConditionTrue, ReasonOutsideRatio, ratioText)
		} else {
			setCondition(&status.Conditions, p.Generation, ConditionRatioConstraintViolated, metav1.ConditionFalse, ReasonWithinRatio, ratioText)
		}
	}
	status.DisaggregatedStatus, status.HomogeneousStatus, status.HeterogeneousStatus = ds, nil, nil
	if applyErr != nil {
		return &problem{ReasonScaleFailed, applyErr.Error()}
	}
	reason := rolesReason(names, roles, adjusted, anyScaled)
	if !anyOK && !anyScaled {
		setCondition(&status.Conditions, p.Generation, ConditionReady, metav1.ConditionFalse, autoscale.ReasonNoRecommendation, msg)
		return nil
	}
	setCondition(&status.Conditions, p.Generation, ConditionReady, metav1.ConditionTrue, reason, msg)
	return nil
}

// podsOfRole are the pods of one role.
func podsOfRole(pods []corev1.Pod, role string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.Labels[workloadv1alpha1.RoleLabel] == role {
			out = append(out, p)
		}
	}
	return out
}

// rolesMessage is the Ready message: every role's decision and metrics, then the ratio.
func rolesMessage(names []string, roles map[string]*roleDecision, ratio string) string {
	parts := make([]string, 0, len(names)+1)
	for _, n := range names {
		rd := roles[n]
		s := fmt.Sprintf("%s %d -> %d: %s", n, rd.current, rd.final, rd.decision.Message)
		if rd.summary != "" {
			s += " (" + rd.summary + ")"
		}
		parts = append(parts, s)
	}
	if ratio != "" {
		parts = append(parts, ratio)
	}
	return strings.Join(parts, "; ")
}

// rolesReason is the Ready reason: RatioAdjusted when the ratio moved a role, else the
// decision of a role that changed (or of the first role).
func rolesReason(names []string, roles map[string]*roleDecision, adjusted, scaled bool) string {
	if adjusted && scaled {
		return ReasonRatioAdjusted
	}
	for _, n := range names {
		if rd := roles[n]; rd.final != rd.current && !rd.fixed {
			return rd.decision.Reason
		}
	}
	for _, n := range names {
		if rd := roles[n]; !rd.fixed {
			return rd.decision.Reason
		}
	}
	return "FixedRoles"
}

func msRef(ms *workloadv1alpha1.ModelServing) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: workloadv1alpha1.SchemeGroupVersion.String(), Kind: defaultTargetKind, Namespace: ms.Namespace, Name: ms.Name}
}

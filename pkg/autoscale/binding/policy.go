package binding

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale"
)

// Conditions on an AutoscalingPolicy. Valid says whether the autoscaler can use it (what the
// schema cannot check: a metric target that is not a positive number, a metric listed
// twice, a metric source naming no metric, a ratio the roles' bounds cannot meet). A policy
// with its own target also has Ready (the last decision, as on a binding) and, for a
// disaggregatedTarget with a ratioConstraint, RatioConstraintViolated.
const (
	ConditionValid                   = "Valid"
	ConditionRatioConstraintViolated = "RatioConstraintViolated"

	ReasonValid         = "Valid"
	ReasonWithinRatio   = "WithinRatio"
	ReasonOutsideRatio  = "BoundsPreventRatio"
	ReasonRatioAdjusted = "RatioAdjusted"
	// ModeStable and ModePanic are a scaled unit's mode in the policy's status.
	ModeStable = "Stable"
	ModePanic  = "Panic"
)

// ReconcilePolicy reports whether an AutoscalingPolicy is usable and, when it names its own
// target (Kthena 1.0), scales that target every sync period.
func (r *Reconciler) ReconcilePolicy(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := stateKey{policy: true, NamespacedName: req.NamespacedName}
	var p workloadv1alpha1.AutoscalingPolicy
	if err := r.Client.Get(ctx, req.NamespacedName, &p); err != nil {
		if apierrors.IsNotFound(err) {
			r.drop(key)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	logger := log.FromContext(ctx).WithValues("autoscalingpolicy", klog.KObj(&p))
	ctx = ctrl.LoggerInto(ctx, logger)
	if !r.Scope.Manages(&p) || !p.DeletionTimestamp.IsZero() {
		r.drop(key) // another project's controller acts on it (--manage=berth), or it is going
		return ctrl.Result{}, nil
	}
	now := r.Now()
	status := p.Status.DeepCopy()
	status.ObservedGeneration = p.Generation
	valid := validate(&p.Spec)
	if valid == nil {
		setCondition(&status.Conditions, p.Generation, ConditionValid, metav1.ConditionTrue, ReasonValid, "the autoscaler can use this policy")
	} else {
		setCondition(&status.Conditions, p.Generation, ConditionValid, metav1.ConditionFalse, ReasonInvalidPolicy, valid.Error())
	}

	if !p.Spec.HasTarget() {
		// Applied by bindings, if any: nothing to scale here. A policy that lost its target
		// forgets what it remembered for it.
		r.drop(key)
		status.HomogeneousStatus, status.HeterogeneousStatus, status.DisaggregatedStatus = nil, nil, nil
		meta.RemoveStatusCondition(&status.Conditions, ConditionReady)
		meta.RemoveStatusCondition(&status.Conditions, ConditionRatioConstraintViolated)
		return ctrl.Result{}, r.writePolicyStatus(ctx, &p, status, nil)
	}

	st := r.stateFor(key, p.UID, now)
	var err error
	switch {
	case valid != nil:
		err = &problem{ReasonInvalidPolicy, valid.Error()}
	case p.Spec.DisaggregatedTarget != nil:
		err = r.decideRoles(ctx, &p, st, status, now)
	default:
		err = r.decideOwnTarget(ctx, &p, st, status, now)
	}
	decisions.WithLabelValues(p.Namespace, seriesLabel(key)).Inc()
	r.reportDecision(logger, &p, p.Status.Conditions, &status.Conditions, err)
	if err := r.writePolicyStatus(ctx, &p, status, st); err != nil {
		return ctrl.Result{}, err
	}
	if valid != nil {
		return ctrl.Result{}, nil // decided again when the policy is edited
	}
	return ctrl.Result{RequeueAfter: r.SyncPeriod}, nil
}

// validate is everything the autoscaler checks of a policy beyond its schema.
func validate(spec *workloadv1alpha1.AutoscalingPolicySpec) error {
	if _, err := autoscale.NewPolicy(spec); err != nil {
		return err
	}
	return autoscale.ValidateTargets(spec)
}

// decideOwnTarget decides for a homogeneousTarget or heterogeneousTarget exactly as a
// binding's scalingConfiguration or optimizerConfiguration, and reports it in Kthena 1.0's
// status.
func (r *Reconciler) decideOwnTarget(ctx context.Context, p *workloadv1alpha1.AutoscalingPolicy, st *state, status *workloadv1alpha1.AutoscalingPolicyStatus, now time.Time) error {
	j := job{owner: p, namespace: p.Namespace, label: policySeriesPrefix + p.Name, generation: p.Generation, policy: p,
		single: p.Spec.HomogeneousTarget, optimizer: p.Spec.HeterogeneousTarget, field: ownTargetField(&p.Spec)}
	if st.record == nil {
		st.record = &workloadv1alpha1.AutoscalingPolicyBindingStatus{}
	}
	rec := st.record
	err := r.decide(ctx, j, st, rec, now)
	if len(rec.Targets) > 0 {
		mode := ModeStable
		if rec.PanicMode {
			mode = ModePanic
		}
		prev := map[string]*metav1.Time{}
		if h := status.HomogeneousStatus; h != nil {
			prev[h.Name] = h.LastScaleTime
		}
		for _, u := range status.HeterogeneousStatus {
			prev[u.Name] = u.LastScaleTime
		}
		scaledNow := rec.LastScaleTime != nil && rec.LastScaleTime.Time.Equal(now)
		units := make([]workloadv1alpha1.TargetScalingStatus, len(rec.Targets))
		for i, t := range rec.Targets {
			units[i] = workloadv1alpha1.TargetScalingStatus{Name: t.Name, CurrentReplicas: t.CurrentReplicas, DesiredReplicas: t.DesiredReplicas, Mode: mode, LastScaleTime: prev[t.Name]}
			if scaledNow && t.DesiredReplicas != t.CurrentReplicas {
				units[i].LastScaleTime = &metav1.Time{Time: now}
			}
		}
		if p.Spec.HomogeneousTarget != nil {
			status.HomogeneousStatus, status.HeterogeneousStatus = &units[0], nil
		} else {
			status.HomogeneousStatus, status.HeterogeneousStatus = nil, units
		}
		status.DisaggregatedStatus = nil
	}
	if c := meta.FindStatusCondition(rec.Conditions, ConditionReady); c != nil && err == nil {
		setCondition(&status.Conditions, p.Generation, ConditionReady, c.Status, c.Reason, c.Message)
	}
	meta.RemoveStatusCondition(&status.Conditions, ConditionRatioConstraintViolated)
	return err
}

// writePolicyStatus writes status when it tells the user something new: any change but the
// Ready message (live metric values) is written at once, the message at most once a minute.
func (r *Reconciler) writePolicyStatus(ctx context.Context, p *workloadv1alpha1.AutoscalingPolicy, status *workloadv1alpha1.AutoscalingPolicyStatus, st *state) error {
	now := r.Now()
	if equality.Semantic.DeepEqual(&p.Status, status) {
		return nil
	}
	if st != nil && now.Sub(st.lastWrite) < time.Minute && equalIgnoringMessages(&p.Status, status) {
		return nil
	}
	orig := p.DeepCopy()
	p.Status = *status
	if err := r.Client.Status().Patch(ctx, p, client.MergeFrom(orig)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("write status: %w", err)
	}
	if st != nil {
		st.lastWrite = now
	}
	return nil
}

func equalIgnoringMessages(a, b *workloadv1alpha1.AutoscalingPolicyStatus) bool {
	x, y := a.DeepCopy(), b.DeepCopy()
	for _, s := range []*workloadv1alpha1.AutoscalingPolicyStatus{x, y} {
		for i := range s.Conditions {
			s.Conditions[i].Message, s.Conditions[i].LastTransitionTime = "", metav1.Time{}
		}
	}
	return equality.Semantic.DeepEqual(x, y)
}

package variantscaler

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	llmdv1alpha1 "github.com/berth-sh/berth/pkg/apis/llmd/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale/modelvariants"
)

// llm-d v0.5's condition types and reasons (api/v1alpha1/variantautoscaling_types.go),
// written beside Ready on a VariantAutoscaling in llm-d v0.5's shape.
const (
	ConditionTargetResolved    = "TargetResolved"
	ConditionMetricsAvailable  = "MetricsAvailable"
	ConditionOptimizationReady = "OptimizationReady"

	reasonTargetFound           = "TargetFound"
	reasonTargetNotFound        = "TargetNotFound"
	reasonMetricsFound          = "MetricsFound"
	reasonMetricsMissing        = "MetricsMissing"
	reasonOptimizationSucceeded = "OptimizationSucceeded"
	reasonOptimizationFailed    = "OptimizationFailed"
	reasonMetricsUnavailable    = "MetricsUnavailable"
)

// runV05 sizes a VariantAutoscaling written in llm-d v0.5's shape: its scaleTargetRef is
// the workload, and it is sized by llm-d's saturation analyzer together with every other
// variant of its model in its namespace (modelvariants), its variantCost deciding which
// variant moves. It writes desiredOptimizedAlloc and actuation, exports wva_* (llm-d
// v0.5's series) and, unless actuation is left to an HPA or KEDA, scales the workload.
func (r *Reconciler) runV05(ctx context.Context, va *llmdv1alpha1.VariantAutoscaling, status *llmdv1alpha1.VariantAutoscalingStatus, now time.Time) error {
	if r.Variants == nil {
		return &problem{ReasonInvalidProfile, "this controller sizes no VariantAutoscaling in llm-d v0.5's shape"}
	}
	v, err := modelvariants.FromVariantAutoscaling(va)
	if err != nil {
		return &problem{ReasonInvalidProfile, err.Error()}
	}
	res, err := r.Variants.Size(ctx, v)
	if err != nil {
		if p, ok := modelvariants.AsProblem(err); ok {
			return &problem{p.Reason, p.Message}
		}
		return err
	}
	status.DesiredOptimizedAlloc = &llmdv1alpha1.OptimizedAlloc{LastRunTime: metav1.Time{Time: now}, Accelerator: res.Accelerator, NumReplicas: res.Target}
	modelvariants.Export(va.Namespace, va.Name, res.Accelerator, res.Current, res.Target)
	msg := fmt.Sprintf("%s %s: %d replicas (%d reporting), desired %d: %s; the model's variants: %s (KV-cache threshold %.2f, queue threshold %g, spare triggers %.2f and %g)",
		v.Target.Kind, v.Target.Name, res.Current, res.Reporting, res.Target, res.Reason, strings.Join(res.Variants, ", "),
		r.Variants.Config.KvCacheThreshold, r.Variants.Config.QueueLengthThreshold, r.Variants.Config.KvSpareTrigger, r.Variants.Config.QueueSpareTrigger)
	setLLMDConditions(status, va.Generation, ReasonOptimized, msg)
	if r.Actuation == ActuateMetric {
		status.Actuation.Applied = true
		setReady(status, va.Generation, ReasonOptimized, msg+"; exported as wva_desired_replicas for an HPA or KEDA")
		return nil
	}
	if asked := res.Scale.Spec.Replicas; asked != res.Target {
		s := res.Scale.DeepCopy()
		s.Spec.Replicas = res.Target
		if _, err := r.Scales.Scales(va.Namespace).Update(ctx, res.GroupResource, s, metav1.UpdateOptions{}); err != nil {
			return &problem{ReasonScaleFailed, fmt.Sprintf("scale %s %s from %d to %d: %v", v.Target.Kind, v.Target.Name, asked, res.Target, err)}
		}
		dir := "up"
		if res.Target < asked {
			dir = "down"
		}
		modelvariants.CountScaling(va.Namespace, va.Name, dir, "saturation")
		r.Recorder.Eventf(va, nil, corev1.EventTypeNormal, ReasonScaled, actionScale, "%s %s: %d -> %d replicas: %s", v.Target.Kind, v.Target.Name, asked, res.Target, res.Reason)
	}
	status.Actuation.Applied = true
	setReady(status, va.Generation, ReasonOptimized, msg)
	return nil
}

// setLLMDConditions writes llm-d's three conditions from the outcome of a run: reason is
// ReasonOptimized or the problem that stopped it.
func setLLMDConditions(st *llmdv1alpha1.VariantAutoscalingStatus, gen int64, reason, msg string) {
	set := func(t string, ok bool, r string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: r, Message: msg, ObservedGeneration: gen})
	}
	switch reason {
	case ReasonOptimized, ReasonScaleFailed:
		set(ConditionTargetResolved, true, reasonTargetFound)
		set(ConditionMetricsAvailable, true, reasonMetricsFound)
		set(ConditionOptimizationReady, true, reasonOptimizationSucceeded)
	case modelvariants.ReasonWaitingForMetrics, modelvariants.ReasonUnknownMetric:
		set(ConditionTargetResolved, true, reasonTargetFound)
		set(ConditionMetricsAvailable, false, reasonMetricsMissing)
		set(ConditionOptimizationReady, false, reasonMetricsUnavailable)
	default: // the workload: not found, not scalable, declared twice
		set(ConditionTargetResolved, false, reasonTargetNotFound)
		set(ConditionOptimizationReady, false, reasonOptimizationFailed)
	}
}

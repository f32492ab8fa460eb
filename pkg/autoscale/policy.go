// Package autoscale holds Berth's scaling algorithms as pure functions of their inputs and a
// clock: the per-metric recommendation (Recommend), the policy that turns a stream of
// recommendations into replica changes (Scaler: tolerance, stabilization windows, rate limits,
// panic mode, scale-to-zero grace) and the cost optimizer that spreads one demand over several
// targets (Distribute). Reading metrics and acting on the cluster live elsewhere
// (pkg/autoscale/podmetrics, pkg/autoscale/binding); docs/autoscaling.md explains the whole.
package autoscale

import (
	"fmt"
	"math"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// Defaults of seed 000, applied here too so a policy built in Go (or embedded in a
// ModelBooster written before a default existed) behaves like one the apiserver defaulted.
const (
	DefaultTolerancePercent      = 10
	DefaultInstances             = 1
	DefaultPercent               = 100
	DefaultPeriod                = 15 * time.Second
	DefaultPanicPercent          = 1000
	DefaultPanicThresholdPercent = 200
	DefaultPanicModeHold         = 60 * time.Second
)

// Metric is one policy metric with its target value per pod.
type Metric struct {
	Name   string
	Target float64
}

// RateLimit bounds how far replicas move within Period: by Instances, by Percent of the
// replicas at the start of the period, and Or (the larger move) / And (the smaller).
type RateLimit struct {
	Instances           int32
	Percent             int32
	Period              time.Duration
	Select              workloadv1alpha1.SelectPolicyType
	StabilizationWindow time.Duration
}

// Panic is the scale-up policy for bursts.
type Panic struct {
	// Percent bounds a panic scale-up to Percent% more than the replicas at the start of
	// Period (Period 0: than the current replicas).
	Percent int32
	Period  time.Duration
	// ThresholdPercent: panic mode starts when the recommendation reaches this percentage
	// of the current replicas.
	ThresholdPercent int32
	// Hold keeps panic mode on this long after the last recommendation above the threshold.
	Hold time.Duration
}

// Policy is an AutoscalingPolicySpec with every default applied and every quantity turned
// into a number.
type Policy struct {
	Tolerance float64 // a fraction: 0.1 for 10%
	Metrics   []Metric
	ScaleUp   RateLimit
	Panic     Panic
	ScaleDown RateLimit
}

// NewPolicy applies the seed's defaults to spec and checks what the schema cannot:
// a metric target must be a positive number, a metric is listed once. Only a
// disaggregatedTarget may leave spec.metrics empty (its roles bring their own: RoleMetrics).
func NewPolicy(spec *workloadv1alpha1.AutoscalingPolicySpec) (Policy, error) {
	p := Policy{Tolerance: float64(deref(spec.TolerancePercent, DefaultTolerancePercent)) / 100}
	if len(spec.Metrics) == 0 && spec.DisaggregatedTarget == nil {
		return Policy{}, fmt.Errorf("spec.metrics: at least one metric is required")
	}
	var err error
	if p.Metrics, err = Metrics(spec.Metrics, "spec.metrics"); err != nil {
		return Policy{}, err
	}
	var b workloadv1alpha1.AutoscalingPolicyBehavior
	if spec.Behavior != nil {
		b = *spec.Behavior
	}
	var up workloadv1alpha1.AutoscalingPolicyScaleUpPolicy
	if b.ScaleUp != nil {
		up = *b.ScaleUp
	}
	p.ScaleUp = rateLimit(up.StablePolicy)
	p.ScaleDown = rateLimit(b.ScaleDown)
	var panicPolicy workloadv1alpha1.AutoscalingPolicyPanicPolicy
	if up.PanicPolicy != nil {
		panicPolicy = *up.PanicPolicy
	}
	p.Panic = Panic{
		Percent:          deref(panicPolicy.Percent, DefaultPanicPercent),
		Period:           duration(panicPolicy.Period, 0),
		ThresholdPercent: deref(panicPolicy.PanicThresholdPercent, DefaultPanicThresholdPercent),
		Hold:             duration(panicPolicy.PanicModeHold, DefaultPanicModeHold),
	}
	return p, nil
}

// Metrics turns a list of policy metrics (at field, for messages) into numbers, checking
// that every target is a positive number and no metric is listed twice.
func Metrics(list []workloadv1alpha1.AutoscalingPolicyMetric, field string) ([]Metric, error) {
	var out []Metric
	seen := map[string]bool{}
	for i, m := range list {
		key := m.Key()
		if key == "" {
			return nil, fmt.Errorf("%s[%d].name: must not be empty", field, i)
		}
		if seen[key] {
			return nil, fmt.Errorf("%s[%d].%s: %q is listed twice", field, i, metricField(m), key)
		}
		seen[key] = true
		v := m.TargetValue.AsApproximateFloat64()
		if v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, fmt.Errorf("%s[%d].targetValue: must be greater than 0, got %s", field, i, m.TargetValue.String())
		}
		out = append(out, Metric{Name: key, Target: v})
	}
	return out, nil
}

// RoleMetrics are the metrics a disaggregatedTarget's role scales on: its own, or else
// the policy's; none for a fixed role (minReplicas = maxReplicas), which is held at its size.
func RoleMetrics(spec *workloadv1alpha1.AutoscalingPolicySpec, role string, param workloadv1alpha1.RoleScalingParam) ([]Metric, error) {
	if FixedRole(param) {
		return nil, nil
	}
	if len(param.Metrics) > 0 {
		return Metrics(param.Metrics, fmt.Sprintf("spec.disaggregatedTarget.roles[%s].metrics", role))
	}
	return Metrics(spec.Metrics, "spec.metrics")
}

// FixedRole says whether a role is held at one size rather than scaled.
func FixedRole(param workloadv1alpha1.RoleScalingParam) bool {
	return param.MinReplicas == param.MaxReplicas
}

func rateLimit(s *workloadv1alpha1.AutoscalingPolicyStablePolicy) RateLimit {
	if s == nil {
		s = &workloadv1alpha1.AutoscalingPolicyStablePolicy{}
	}
	r := RateLimit{
		Instances:           deref(s.Instances, DefaultInstances),
		Percent:             deref(s.Percent, DefaultPercent),
		Period:              duration(s.Period, DefaultPeriod),
		Select:              s.SelectPolicy,
		StabilizationWindow: duration(s.StabilizationWindow, 0),
	}
	if r.Select == "" {
		r.Select = workloadv1alpha1.SelectPolicyOr
	}
	return r
}

func deref(v *int32, def int32) int32 {
	if v == nil {
		return def
	}
	return *v
}

func duration(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

// metricField is the field a metric's key was written in.
func metricField(m workloadv1alpha1.AutoscalingPolicyMetric) string {
	if m.Name != "" {
		return "name"
	}
	return "metricName"
}

// Package autoscale holds Berth's scaling algorithms as pure functions of their inputs and a
// clock: the per-metric recommendation (Recommend), the policy that turns a stream of
// recommendations into replica changes (Scaler: tolerance, stabilization windows, rate limits,
// panic mode, scale-to-zero grace) and the cost optimizer that spreads one demand over several
// targets (Distribute). Reading metrics and acting on the cluster live elsewhere
// (pkg/autoscale/podmetrics, pkg/autoscale/binding); docs/autoscaling.md explains the whole.
package autoscale

import (
	"fmt"
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
// a metric target must be a positive number.
func NewPolicy(spec *workloadv1alpha1.AutoscalingPolicySpec) (Policy, error) {
	p := Policy{Tolerance: float64(deref(spec.TolerancePercent, DefaultTolerancePercent)) / 100}
	if len(spec.Metrics) == 0 {
		return Policy{}, fmt.Errorf("spec.metrics: at least one metric is required")
	}
	seen := map[string]bool{}
	for i, m := range spec.Metrics {
		if m.MetricName == "" {
			return Policy{}, fmt.Errorf("spec.metrics[%d].metricName: must not be empty", i)
		}
		if seen[m.MetricName] {
			return Policy{}, fmt.Errorf("spec.metrics[%d].metricName: %q is listed twice", i, m.MetricName)
		}
		seen[m.MetricName] = true
		v := m.TargetValue.AsApproximateFloat64()
		if v <= 0 {
			return Policy{}, fmt.Errorf("spec.metrics[%d].targetValue: must be greater than 0, got %s", i, m.TargetValue.String())
		}
		p.Metrics = append(p.Metrics, Metric{Name: m.MetricName, Target: v})
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

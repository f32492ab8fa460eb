package autoscale

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// policy is the defaults with the changes a test makes.
func policy(change func(*Policy)) Policy {
	p, err := NewPolicy(&workloadv1alpha1.AutoscalingPolicySpec{Metrics: []workloadv1alpha1.AutoscalingPolicyMetric{{MetricName: "m", TargetValue: resource.MustParse("1")}}})
	if err != nil {
		panic(err)
	}
	if change != nil {
		change(&p)
	}
	return p
}

// run feeds a scaler (created at t0) one recommendation per step, every `every`, applying
// each decision as the next step's current replicas; it returns every decision.
type step struct {
	rec  int32
	none bool // no recommendation
}

func run(s *Scaler, current, lo, hi int32, every time.Duration, steps ...step) []Decision {
	var out []Decision
	for i, st := range steps {
		d := s.Decide(Input{Now: t0.Add(time.Duration(i) * every), Current: current, Recommended: st.rec, HasRecommendation: !st.none, Min: lo, Max: hi})
		out = append(out, d)
		current = d.Desired
	}
	return out
}

func desired(ds []Decision) []int32 {
	var out []int32
	for _, d := range ds {
		out = append(out, d.Desired)
	}
	return out
}

func TestNewPolicyDefaults(t *testing.T) {
	p := policy(nil)
	assert.Equal(t, 0.1, p.Tolerance)
	assert.Equal(t, RateLimit{Instances: 1, Percent: 100, Period: 15 * time.Second, Select: workloadv1alpha1.SelectPolicyOr}, p.ScaleUp)
	assert.Equal(t, RateLimit{Instances: 1, Percent: 100, Period: 15 * time.Second, Select: workloadv1alpha1.SelectPolicyOr}, p.ScaleDown)
	assert.Equal(t, Panic{Percent: 1000, ThresholdPercent: 200, Hold: time.Minute}, p.Panic)

	_, err := NewPolicy(&workloadv1alpha1.AutoscalingPolicySpec{Metrics: []workloadv1alpha1.AutoscalingPolicyMetric{{MetricName: "m", TargetValue: resource.MustParse("0")}}})
	assert.ErrorContains(t, err, "spec.metrics[0].targetValue: must be greater than 0")
	_, err = NewPolicy(&workloadv1alpha1.AutoscalingPolicySpec{Metrics: []workloadv1alpha1.AutoscalingPolicyMetric{{MetricName: "m", TargetValue: resource.MustParse("1")}, {MetricName: "m", TargetValue: resource.MustParse("2")}}})
	assert.ErrorContains(t, err, `spec.metrics[1].metricName: "m" is listed twice`)
	_, err = NewPolicy(&workloadv1alpha1.AutoscalingPolicySpec{})
	assert.ErrorContains(t, err, "spec.metrics")

	full, err := NewPolicy(&workloadv1alpha1.AutoscalingPolicySpec{
		TolerancePercent: ptr.To[int32](0),
		Metrics:          []workloadv1alpha1.AutoscalingPolicyMetric{{MetricName: "m", TargetValue: resource.MustParse("500m")}},
		Behavior: &workloadv1alpha1.AutoscalingPolicyBehavior{
			ScaleUp: &workloadv1alpha1.AutoscalingPolicyScaleUpPolicy{
				StablePolicy: &workloadv1alpha1.AutoscalingPolicyStablePolicy{Instances: ptr.To[int32](2), Percent: ptr.To[int32](50), Period: &metav1.Duration{Duration: time.Minute}, SelectPolicy: workloadv1alpha1.SelectPolicyAnd, StabilizationWindow: &metav1.Duration{Duration: 30 * time.Second}},
				PanicPolicy:  &workloadv1alpha1.AutoscalingPolicyPanicPolicy{Percent: ptr.To[int32](300), Period: &metav1.Duration{Duration: 10 * time.Second}, PanicThresholdPercent: ptr.To[int32](150), PanicModeHold: &metav1.Duration{Duration: 2 * time.Minute}},
			},
			ScaleDown: &workloadv1alpha1.AutoscalingPolicyStablePolicy{StabilizationWindow: &metav1.Duration{Duration: 5 * time.Minute}},
		},
	})
	require.NoError(t, err)
	assert.Equal(t, 0.0, full.Tolerance)
	assert.Equal(t, []Metric{{"m", 0.5}}, full.Metrics)
	assert.Equal(t, RateLimit{Instances: 2, Percent: 50, Period: time.Minute, Select: workloadv1alpha1.SelectPolicyAnd, StabilizationWindow: 30 * time.Second}, full.ScaleUp)
	assert.Equal(t, Panic{Percent: 300, Period: 10 * time.Second, ThresholdPercent: 150, Hold: 2 * time.Minute}, full.Panic)
	assert.Equal(t, 5*time.Minute, full.ScaleDown.StabilizationWindow)
}

func TestScalerBounds(t *testing.T) {
	s := NewScaler(policy(nil), t0)
	d := s.Decide(Input{Now: t0, Current: 0, Recommended: 0, HasRecommendation: true, Min: 2, Max: 5})
	assert.Equal(t, int32(2), d.Desired)
	assert.Equal(t, ReasonBelowMinimum, d.Reason)
	d = s.Decide(Input{Now: t0, Current: 9, Recommended: 9, HasRecommendation: true, Min: 2, Max: 5})
	assert.Equal(t, int32(5), d.Desired)
	assert.Equal(t, ReasonAboveMaximum, d.Reason)
	// Bounds apply even when no metric can be read.
	d = s.Decide(Input{Now: t0, Current: 1, Min: 2, Max: 5})
	assert.Equal(t, int32(2), d.Desired)
	d = s.Decide(Input{Now: t0, Current: 3, Min: 2, Max: 5})
	assert.Equal(t, int32(3), d.Desired)
	assert.Equal(t, ReasonNoRecommendation, d.Reason)
	// The recommendation is clamped.
	d = s.Decide(Input{Now: t0.Add(time.Hour), Current: 3, Recommended: 4, HasRecommendation: true, Min: 2, Max: 4})
	assert.Equal(t, int32(4), d.Desired)
	assert.Equal(t, ReasonScaledUp, d.Reason)
}

func TestScalerScaleUpRateLimit(t *testing.T) {
	// Defaults: +max(1 instance, 100%) per 15 s, Or. Steps of 5 s.
	or := NewScaler(policy(func(p *Policy) { p.Panic.ThresholdPercent = 1000 }), t0)
	ds := run(or, 2, 0, 100, 5*time.Second, step{rec: 9}, step{rec: 9}, step{rec: 9}, step{rec: 9}, step{rec: 9}, step{rec: 9}, step{rec: 9})
	// 2 -> 4 (100%); held until 15 s after the 2 was last seen; then 8; then 9.
	assert.Equal(t, []int32{4, 4, 4, 8, 8, 8, 9}, desired(ds))
	assert.Equal(t, ReasonScaleUpLimited, ds[0].Reason)
	assert.Equal(t, ReasonScaleUpLimited, ds[1].Reason, "held within the period")
	assert.Equal(t, ReasonScaledUp, ds[6].Reason)

	// And: the smaller of +2 instances and +100%.
	and := NewScaler(policy(func(p *Policy) {
		p.Panic.ThresholdPercent = 1000
		p.ScaleUp.Select, p.ScaleUp.Instances = workloadv1alpha1.SelectPolicyAnd, 2
	}), t0)
	ds = run(and, 4, 0, 100, 15*time.Second, step{rec: 20}, step{rec: 20})
	assert.Equal(t, []int32{6, 8}, desired(ds), "And takes +2 (not +100%%)")
	orInst := NewScaler(policy(func(p *Policy) {
		p.Panic.ThresholdPercent = 1000
		p.ScaleUp.Instances, p.ScaleUp.Percent = 2, 10
	}), t0)
	ds = run(orInst, 4, 0, 100, 15*time.Second, step{rec: 20})
	assert.Equal(t, []int32{6}, desired(ds), "Or takes +2 instances over +10%%")
}

func TestScalerScaleUpStabilizationWindow(t *testing.T) {
	s := NewScaler(policy(func(p *Policy) {
		p.Panic.ThresholdPercent = 1000
		p.ScaleUp.StabilizationWindow = 20 * time.Second
		p.ScaleUp.Percent = 1000
	}), t0)
	// A one-off spike inside the window does not scale; a sustained rise does, to the
	// lowest recommendation in the window.
	ds := run(s, 2, 0, 100, 10*time.Second, step{rec: 2}, step{rec: 8}, step{rec: 2}, step{rec: 6}, step{rec: 7}, step{rec: 8})
	assert.Equal(t, []int32{2, 2, 2, 2, 6, 7}, desired(ds))
	assert.Equal(t, ReasonStabilizingUp, ds[1].Reason)
	assert.Equal(t, ReasonStabilizingUp, ds[4].Reason)
}

func TestScalerScaleDown(t *testing.T) {
	// No window: down at once, limited by max(1 instance, 100%) per period (Or) = all.
	s := NewScaler(policy(nil), t0)
	ds := run(s, 6, 0, 100, 5*time.Second, step{rec: 1})
	assert.Equal(t, []int32{1}, desired(ds))
	assert.Equal(t, ReasonScaledDown, ds[0].Reason)

	// And: the smaller of -1 instance and -50% per 15 s.
	and := NewScaler(policy(func(p *Policy) {
		p.ScaleDown.Select, p.ScaleDown.Percent = workloadv1alpha1.SelectPolicyAnd, 50
	}), t0)
	ds = run(and, 6, 0, 100, 15*time.Second, step{rec: 0}, step{rec: 0}, step{rec: 0})
	assert.Equal(t, []int32{5, 4, 3}, desired(ds))
	assert.Equal(t, ReasonScaleDownLimited, ds[0].Reason)
	// Or: the larger of -1 and -50%.
	or := NewScaler(policy(func(p *Policy) { p.ScaleDown.Percent = 50 }), t0)
	ds = run(or, 8, 1, 100, 15*time.Second, step{rec: 1}, step{rec: 1}, step{rec: 1})
	assert.Equal(t, []int32{4, 2, 1}, desired(ds))
}

func TestScalerScaleDownStabilizationWindow(t *testing.T) {
	s := NewScaler(policy(func(p *Policy) { p.ScaleDown.StabilizationWindow = 30 * time.Second }), t0.Add(-time.Hour))
	ds := run(s, 6, 0, 100, 10*time.Second, step{rec: 6}, step{rec: 2}, step{rec: 3}, step{rec: 2}, step{rec: 2}, step{rec: 2})
	// The highest recommendation within the last 30 s decides: 6 until it leaves the window,
	// then 3 until that leaves, then 2.
	assert.Equal(t, []int32{6, 6, 6, 3, 3, 2}, desired(ds))
	assert.Equal(t, ReasonStabilizingDown, ds[1].Reason)
	assert.Equal(t, ReasonStabilizingDown, ds[3].Reason)
	assert.Equal(t, ReasonStabilizingDown, ds[4].Reason)
	assert.Equal(t, ReasonScaledDown, ds[5].Reason)
}

func TestScalerRestartDoesNotShortenTheScaleDownWindow(t *testing.T) {
	// A scaler that started now knows nothing of the last 30 s: it waits the window out.
	s := NewScaler(policy(func(p *Policy) { p.ScaleDown.StabilizationWindow = 30 * time.Second }), t0)
	ds := run(s, 6, 0, 100, 10*time.Second, step{rec: 1}, step{rec: 1}, step{rec: 1}, step{rec: 1})
	assert.Equal(t, []int32{6, 6, 6, 1}, desired(ds))
}

func TestScalerPanic(t *testing.T) {
	s := NewScaler(policy(func(p *Policy) {
		p.Panic.Percent = 300
		p.Panic.Hold = 30 * time.Second
		p.ScaleDown.StabilizationWindow = 0
	}), t0)
	// 2 replicas, recommendation 3: 150% < 200% threshold, stable scale-up.
	d := s.Decide(Input{Now: t0, Current: 2, Recommended: 3, HasRecommendation: true, Max: 100})
	assert.False(t, d.Panic)
	assert.Equal(t, int32(3), d.Desired)
	// Burst: 3 -> 20 is 666% >= 200%: panic; +300% of 3 = 12 (the stable policy would allow 6).
	d = s.Decide(Input{Now: t0.Add(5 * time.Second), Current: 3, Recommended: 20, HasRecommendation: true, Max: 100})
	assert.True(t, d.Panic)
	assert.True(t, d.PanicStarted)
	assert.Equal(t, int32(12), d.Desired)
	assert.Equal(t, ReasonPanicLimited, d.Reason)
	assert.Equal(t, t0.Add(35*time.Second), d.PanicUntil)
	// Still in panic: up to 20 (12 + 300% would allow 48).
	d = s.Decide(Input{Now: t0.Add(10 * time.Second), Current: 12, Recommended: 20, HasRecommendation: true, Max: 100})
	assert.Equal(t, int32(20), d.Desired)
	assert.Equal(t, ReasonPanicScaledUp, d.Reason)
	// Load falls: panic mode never scales down.
	d = s.Decide(Input{Now: t0.Add(20 * time.Second), Current: 20, Recommended: 4, HasRecommendation: true, Max: 100})
	assert.True(t, d.Panic)
	assert.False(t, d.PanicStarted)
	assert.Equal(t, int32(20), d.Desired)
	assert.Equal(t, ReasonPanicHold, d.Reason)
	// The hold runs out 30 s after the last recommendation over the threshold (at 10 s).
	d = s.Decide(Input{Now: t0.Add(40 * time.Second), Current: 20, Recommended: 4, HasRecommendation: true, Max: 100})
	assert.False(t, d.Panic)
	assert.True(t, d.PanicEnded)
	assert.Equal(t, int32(4), d.Desired)
}

func TestScalerPanicPeriodBoundsFromTheStartOfThePeriod(t *testing.T) {
	s := NewScaler(policy(func(p *Policy) {
		p.Panic.Percent = 100
		p.Panic.Period = 20 * time.Second
	}), t0)
	ds := run(s, 2, 0, 100, 5*time.Second, step{rec: 40}, step{rec: 40}, step{rec: 40}, step{rec: 40}, step{rec: 40}, step{rec: 40})
	// +100% of the fewest replicas in the last 20 s: 2 -> 4, held until the 2 leaves the
	// period, then 8.
	assert.Equal(t, []int32{4, 4, 4, 4, 8, 8}, desired(ds))
	for _, d := range ds {
		assert.True(t, d.Panic)
	}
}

func TestScalerScaleToZeroGrace(t *testing.T) {
	s := NewScaler(policy(nil), t0)
	in := func(at time.Duration, cur, rec int32) Input {
		return Input{Now: t0.Add(at), Current: cur, Recommended: rec, HasRecommendation: true, Max: 10, ScaleToZeroGrace: 30 * time.Second}
	}
	d := s.Decide(in(0, 3, 0))
	assert.Equal(t, int32(1), d.Desired, "the last replica waits for the grace period")
	assert.Equal(t, ReasonScaleToZeroGrace, d.Reason)
	d = s.Decide(in(20*time.Second, 1, 0))
	assert.Equal(t, int32(1), d.Desired)
	// Load in between restarts the grace period.
	d = s.Decide(in(25*time.Second, 1, 1))
	assert.Equal(t, int32(1), d.Desired)
	d = s.Decide(in(35*time.Second, 1, 0))
	assert.Equal(t, int32(1), d.Desired)
	d = s.Decide(in(64*time.Second, 1, 0))
	assert.Equal(t, int32(1), d.Desired)
	d = s.Decide(in(65*time.Second, 1, 0))
	assert.Equal(t, int32(0), d.Desired)
	assert.Equal(t, ReasonScaledDown, d.Reason)

	// Without a grace period zero comes at once.
	s = NewScaler(policy(nil), t0)
	d = s.Decide(Input{Now: t0, Current: 3, HasRecommendation: true, Max: 10})
	assert.Equal(t, int32(0), d.Desired)
}

func TestScalerSetPolicyKeepsMemory(t *testing.T) {
	s := NewScaler(policy(func(p *Policy) { p.Panic.ThresholdPercent = 1000 }), t0)
	d := s.Decide(Input{Now: t0, Current: 2, Recommended: 10, HasRecommendation: true, Max: 100})
	assert.Equal(t, int32(4), d.Desired)
	s.SetPolicy(policy(func(p *Policy) { p.Panic.ThresholdPercent = 1000; p.ScaleUp.Instances = 0; p.ScaleUp.Percent = 50 }))
	// The period still starts at 2: +50% of 2 = 3 < 4, so nothing more.
	d = s.Decide(Input{Now: t0.Add(5 * time.Second), Current: 4, Recommended: 10, HasRecommendation: true, Max: 100})
	assert.Equal(t, int32(4), d.Desired)
	assert.Equal(t, ReasonScaleUpLimited, d.Reason)
}

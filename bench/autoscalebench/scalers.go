package main

import (
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale"
)

// scaler is one autoscaler under test: given the time, the active replicas and one read of
// the metric over their pods, the replicas it wants.
type scaler interface {
	decide(now time.Time, current int32, s autoscale.Sample) (desired int32, why string)
}

// scalerConfig is what both autoscalers share.
type scalerConfig struct {
	metric   string
	target   float64
	min, max int32
}

// berthPolicy is the AutoscalingPolicy the bench gives Berth: the user's choice, printed
// with the results. Zero fields take the CRD's defaults.
type berthPolicy struct {
	tolerancePercent int32
	panicThreshold   int32         // percent of current replicas that starts panic mode
	panicPercent     int32         // how far one panic step may go, percent over the base
	panicHold        time.Duration // panic mode lasts this long after the last burst reading
	upInstances      int32         // stable scale-up: +instances or +percent per 15 s (Or)
	upPercent        int32
	downWindow       time.Duration // scale-down stabilization window
	downInstances    int32         // scale-down: -instances or -percent per 15 s (Or)
	downPercent      int32
}

// spec is p as the AutoscalingPolicy a user would write.
func (p berthPolicy) spec(c scalerConfig) *workloadv1alpha1.AutoscalingPolicySpec {
	dur := func(d time.Duration) *metav1.Duration {
		if d == 0 {
			return nil
		}
		return &metav1.Duration{Duration: d}
	}
	i32 := func(v int32) *int32 {
		if v == 0 {
			return nil
		}
		return ptr.To(v)
	}
	return &workloadv1alpha1.AutoscalingPolicySpec{
		TolerancePercent: ptr.To(p.tolerancePercent),
		Metrics:          []workloadv1alpha1.AutoscalingPolicyMetric{{MetricName: c.metric, TargetValue: *resource.NewMilliQuantity(int64(math.Round(c.target*1000)), resource.DecimalSI)}},
		Behavior: &workloadv1alpha1.AutoscalingPolicyBehavior{
			ScaleUp: &workloadv1alpha1.AutoscalingPolicyScaleUpPolicy{
				StablePolicy: &workloadv1alpha1.AutoscalingPolicyStablePolicy{Instances: i32(p.upInstances), Percent: i32(p.upPercent)},
				PanicPolicy: &workloadv1alpha1.AutoscalingPolicyPanicPolicy{
					Percent: i32(p.panicPercent), PanicThresholdPercent: i32(p.panicThreshold), PanicModeHold: dur(p.panicHold),
				},
			},
			ScaleDown: &workloadv1alpha1.AutoscalingPolicyStablePolicy{
				Instances: i32(p.downInstances), Percent: i32(p.downPercent), StabilizationWindow: dur(p.downWindow),
			},
		},
	}
}

// describe is the policy as applied (after NewPolicy's defaults), in one line.
func describePolicy(p autoscale.Policy) string {
	m := p.Metrics[0]
	return fmt.Sprintf("metric %s target %g per pod, tolerance %.0f%%; panic mode at ≥ %d%% of current replicas, held %s, "+
		"panic step up to +%d%%; stable scale-up +%d instance(s) %s +%d%% per %s (stabilization %s); "+
		"scale-down stabilization window %s, at most -%d instance(s) %s -%d%% per %s",
		m.Name, m.Target, 100*p.Tolerance, p.Panic.ThresholdPercent, p.Panic.Hold, p.Panic.Percent,
		p.ScaleUp.Instances, p.ScaleUp.Select, p.ScaleUp.Percent, p.ScaleUp.Period, p.ScaleUp.StabilizationWindow,
		p.ScaleDown.StabilizationWindow, p.ScaleDown.Instances, p.ScaleDown.Select, p.ScaleDown.Percent, p.ScaleDown.Period)
}

// berthScaler is pkg/autoscale as berth-controller runs it for one binding: RecommendAll
// then Scaler.Decide.
type berthScaler struct {
	cfg    scalerConfig
	policy autoscale.Policy
	s      *autoscale.Scaler
}

func newBerthScaler(c scalerConfig, p autoscale.Policy, now time.Time) *berthScaler {
	return &berthScaler{cfg: c, policy: p, s: autoscale.NewScaler(p, now)}
}

func (b *berthScaler) decide(now time.Time, current int32, s autoscale.Sample) (int32, string) {
	rec, _, ok := autoscale.RecommendAll(current, b.policy, map[string]autoscale.Sample{b.cfg.metric: s})
	d := b.s.Decide(autoscale.Input{Now: now, Current: current, Recommended: rec, HasRecommendation: ok, Min: b.cfg.min, Max: b.cfg.max})
	return d.Desired, d.Reason
}

// hpaScaler is the bench's own model (-hpa-model, a reference; the peer is the HPA
// controller itself, cluster.go): the Kubernetes HorizontalPodAutoscaler's algorithm
// (autoscaling/v2) with its default behavior, on one Pods metric with an AverageValue
// target, written for this bench from the HPA's documentation:
//
//   - Every sync period (15 s) the controller reads the metric from the pods. The desired
//     count is ceil(pods × average / target) over the pods that reported it, and nothing
//     changes while |average/target − 1| ≤ tolerance (0.1).
//   - Pods without a reading (not ready yet, here: loading the model) are filled in: as 0
//     when the readings ask to scale up, as exactly the target when they ask to scale
//     down; the ratio is recomputed over all pods, and if that lands within tolerance or
//     reverses the direction, the count stays.
//   - Scale-down stabilization: the applied count is at most the highest recommendation of
//     the last 5 minutes (the current one included); a fresh controller counts the
//     replicas it finds as its past recommendations. No scale-up stabilization.
//   - Scale-up rate: at most max(+4 pods, +100%) over the replicas 15 s ago (the current
//     ones minus what was added in the last 15 s). Scale-down: at most −100% per 15 s,
//     that is unlimited.
//   - Then min and max replicas.
type hpaScaler struct {
	cfg        scalerConfig
	tolerance  float64
	downWindow time.Duration
	period     time.Duration // of the rate limits
	upPods     int32
	upPercent  int32
	recs       []stampedCount // recommendations, for the stabilization window
	ups        []stampedCount // replicas added, for the scale-up rate limit
}

type stampedCount struct {
	at time.Time
	n  int32
}

func newHPAScaler(c scalerConfig, now time.Time, current int32) *hpaScaler {
	h := &hpaScaler{cfg: c, tolerance: 0.1, downWindow: 5 * time.Minute, period: 15 * time.Second, upPods: 4, upPercent: 100}
	h.recs = append(h.recs, stampedCount{now, current})
	return h
}

// recommend is the HPA's replica calculation for a Pods metric.
func (h *hpaScaler) recommend(current int32, s autoscale.Sample) (int32, bool) {
	if s.Reported == 0 {
		return 0, false // no metrics: the HPA does not scale
	}
	ratio := s.Sum / float64(s.Reported) / h.cfg.target
	if s.Missing == 0 {
		if math.Abs(ratio-1) <= h.tolerance {
			return current, true
		}
		return int32(math.Ceil(ratio * float64(s.Reported))), true
	}
	fill := 0.0 // scale-up: missing pods count as idle
	if ratio < 1 {
		fill = h.cfg.target // scale-down: as exactly at target
	}
	pods := s.Reported + s.Missing
	newRatio := (s.Sum + fill*float64(s.Missing)) / float64(pods) / h.cfg.target
	if math.Abs(newRatio-1) <= h.tolerance || (ratio > 1) != (newRatio > 1) {
		return current, true
	}
	desired := int32(math.Ceil(newRatio * float64(pods)))
	if (ratio > 1 && desired < current) || (ratio < 1 && desired > current) {
		return current, true
	}
	return desired, true
}

func (h *hpaScaler) decide(now time.Time, current int32, s autoscale.Sample) (int32, string) {
	rec, ok := h.recommend(current, s)
	if !ok {
		return current, "NoMetrics"
	}
	// Scale-down stabilization: the highest recommendation within the window.
	cut := now.Add(-h.downWindow)
	keep := h.recs[:0]
	for _, r := range h.recs {
		if r.at.After(cut) {
			keep = append(keep, r)
		}
	}
	h.recs = append(keep, stampedCount{now, rec})
	highest := rec
	for _, r := range h.recs {
		highest = max(highest, r.n)
	}
	desired := current
	why := "AtRecommendation"
	switch {
	case rec > current:
		desired, why = rec, "ScaledUp"
	case highest < current:
		desired, why = highest, "ScaledDown"
	case rec < current:
		why = "ScaleDownStabilized"
	}
	// Scale-up rate limit over the period.
	if desired > current {
		var added int32
		pcut := now.Add(-h.period)
		ups := h.ups[:0]
		for _, u := range h.ups {
			if u.at.After(pcut) {
				ups = append(ups, u)
				added += u.n
			}
		}
		h.ups = ups
		start := current - added
		limit := max(start+h.upPods, int32(math.Ceil(float64(start)*(1+float64(h.upPercent)/100))))
		if desired > limit {
			desired, why = limit, "ScaleUpLimited"
		}
	}
	desired = min(max(desired, h.cfg.min), h.cfg.max)
	if desired > current {
		h.ups = append(h.ups, stampedCount{now, desired - current})
	}
	return desired, why
}

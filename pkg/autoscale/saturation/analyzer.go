package saturation

import (
	"fmt"
	"sort"
	"strings"
)

// Config holds the thresholds (llm-d's SaturationScalingConfig).
type Config struct {
	// KvCacheThreshold: a replica at or above this KV-cache usage (0..1) is saturated.
	KvCacheThreshold float64
	// QueueLengthThreshold: a replica with at least this many waiting requests is saturated.
	QueueLengthThreshold float64
	// KvSpareTrigger: the model scales up when its average spare KV cache is below this.
	KvSpareTrigger float64
	// QueueSpareTrigger: the model scales up when its average spare queue is below this.
	QueueSpareTrigger float64
}

// DefaultConfig is llm-d's default (config/manager/configmap-saturation-scaling.yaml).
func DefaultConfig() Config {
	return Config{KvCacheThreshold: 0.80, QueueLengthThreshold: 5, KvSpareTrigger: 0.1, QueueSpareTrigger: 3}
}

// Validate reports the first inconsistent threshold, as llm-d's Validate does.
func (c Config) Validate() error {
	switch {
	case c.KvCacheThreshold < 0 || c.KvCacheThreshold > 1:
		return fmt.Errorf("kvCacheThreshold must be between 0 and 1, got %.2f", c.KvCacheThreshold)
	case c.QueueLengthThreshold < 0:
		return fmt.Errorf("queueLengthThreshold must be >= 0, got %.1f", c.QueueLengthThreshold)
	case c.KvSpareTrigger < 0 || c.KvSpareTrigger > 1:
		return fmt.Errorf("kvSpareTrigger must be between 0 and 1, got %.2f", c.KvSpareTrigger)
	case c.QueueSpareTrigger < 0:
		return fmt.Errorf("queueSpareTrigger must be >= 0, got %.1f", c.QueueSpareTrigger)
	case c.KvCacheThreshold < c.KvSpareTrigger:
		return fmt.Errorf("kvCacheThreshold (%.2f) should be >= kvSpareTrigger (%.2f)", c.KvCacheThreshold, c.KvSpareTrigger)
	}
	return nil
}

// minNonSaturatedForScaleDown is llm-d's MinNonSaturatedReplicasForScaleDown: with fewer
// non-saturated replicas, the load of the removed one has nowhere safe to go.
const minNonSaturatedForScaleDown = 2

// Replica is one serving replica's reading.
type Replica struct {
	Variant      string
	KvCacheUsage float64 // 0..1
	QueueLength  float64 // waiting requests
}

// VariantAnalysis is one variant's part of an Analysis.
type VariantAnalysis struct {
	Variant string
	// Replicas is how many of its replicas reported (llm-d's ReplicaCount).
	Replicas     int
	NonSaturated int
	Saturated    int
	Cost         float64
}

// Analysis is a model's saturation over all its variants' replicas.
type Analysis struct {
	Variants          []VariantAnalysis // sorted by name
	Replicas          int
	NonSaturated      int
	AvgSpareKv        float64
	AvgSpareQueue     float64
	ShouldScaleUp     bool
	ScaleUpReason     string
	ScaleDownSafe     bool
	ScaleDownUnsafeBy string
}

// Analyze computes a model's saturation from its replicas; costs gives each variant's
// cost per replica.
func Analyze(replicas []Replica, costs map[string]float64, cfg Config) Analysis {
	var a Analysis
	byVariant := map[string]*VariantAnalysis{}
	var spareKv, spareQueue float64
	for _, r := range replicas {
		v := byVariant[r.Variant]
		if v == nil {
			v = &VariantAnalysis{Variant: r.Variant, Cost: costs[r.Variant]}
			byVariant[r.Variant] = v
		}
		v.Replicas++
		a.Replicas++
		if r.KvCacheUsage >= cfg.KvCacheThreshold || r.QueueLength >= cfg.QueueLengthThreshold {
			v.Saturated++
			continue
		}
		v.NonSaturated++
		a.NonSaturated++
		spareKv += cfg.KvCacheThreshold - r.KvCacheUsage
		spareQueue += cfg.QueueLengthThreshold - r.QueueLength
	}
	for _, v := range byVariant {
		a.Variants = append(a.Variants, *v)
	}
	sort.Slice(a.Variants, func(i, j int) bool { return a.Variants[i].Variant < a.Variants[j].Variant })
	if len(replicas) == 0 {
		return a // nothing reported: neither up nor down
	}
	if a.NonSaturated > 0 {
		a.AvgSpareKv = spareKv / float64(a.NonSaturated)
		a.AvgSpareQueue = spareQueue / float64(a.NonSaturated)
	}
	kvLow, queueLow := a.AvgSpareKv < cfg.KvSpareTrigger, a.AvgSpareQueue < cfg.QueueSpareTrigger
	switch {
	case kvLow && queueLow:
		a.ShouldScaleUp, a.ScaleUpReason = true, fmt.Sprintf("spare KV cache %.3f < %.3f and spare queue %.2f < %.2f", a.AvgSpareKv, cfg.KvSpareTrigger, a.AvgSpareQueue, cfg.QueueSpareTrigger)
	case kvLow:
		a.ShouldScaleUp, a.ScaleUpReason = true, fmt.Sprintf("spare KV cache %.3f < %.3f", a.AvgSpareKv, cfg.KvSpareTrigger)
	case queueLow:
		a.ShouldScaleUp, a.ScaleUpReason = true, fmt.Sprintf("spare queue %.2f < %.2f", a.AvgSpareQueue, cfg.QueueSpareTrigger)
	}
	a.ScaleDownSafe, a.ScaleDownUnsafeBy = scaleDownSafe(a, cfg)
	return a
}

// scaleDownSafe spreads the non-saturated replicas' load over one replica fewer and
// checks the spare capacity left still meets both triggers.
func scaleDownSafe(a Analysis, cfg Config) (bool, string) {
	if a.NonSaturated < minNonSaturatedForScaleDown {
		return false, fmt.Sprintf("%d non-saturated replicas (scale-down needs %d)", a.NonSaturated, minNonSaturatedForScaleDown)
	}
	factor := float64(a.NonSaturated) / float64(a.NonSaturated-1)
	kvLeft := cfg.KvCacheThreshold - (cfg.KvCacheThreshold-a.AvgSpareKv)*factor
	queueLeft := cfg.QueueLengthThreshold - (cfg.QueueLengthThreshold-a.AvgSpareQueue)*factor
	if kvLeft >= cfg.KvSpareTrigger && queueLeft >= cfg.QueueSpareTrigger {
		return true, ""
	}
	return false, fmt.Sprintf("one replica fewer would leave spare KV cache %.3f and spare queue %.2f (triggers %.3f, %.2f)", kvLeft, queueLeft, cfg.KvSpareTrigger, cfg.QueueSpareTrigger)
}

// VariantState is what a variant runs and was last asked for (llm-d's VariantReplicaState).
type VariantState struct {
	Variant string
	// Current is the replicas the workload has.
	Current int
	// Desired is the previous run's target (0: none yet).
	Desired int
	// Pending is replicas that exist but are not ready yet.
	Pending int
	// Full says no more replica of the variant can be placed now (berth-scheduler's
	// published count: placement-aware scale-up): a scale-up goes to the cheapest variant
	// that can land instead.
	Full bool
}

// Decision is a model's targets and why.
type Decision struct {
	// Targets has a replica count for every variant of the analysis and every state.
	Targets map[string]int
	// Reason says what moved or why nothing did.
	Reason string
}

// Targets decides each variant's replicas from the analysis (llm-d's
// CalculateSaturationTargets). A variant with no reporting replica keeps its current count.
func Targets(a Analysis, states []VariantState) Decision {
	d := Decision{Targets: map[string]int{}}
	byName := map[string]VariantState{}
	for _, s := range states {
		byName[s.Variant] = s
		d.Targets[s.Variant] = s.Current
	}
	if len(a.Variants) == 0 {
		d.Reason = "no replica reported"
		return d
	}
	var transition []string
	for _, v := range a.Variants {
		s := byName[v.Variant]
		if s.Desired != 0 && s.Desired != s.Current {
			transition = append(transition, fmt.Sprintf("%s: desired %d, current %d", v.Variant, s.Desired, s.Current))
		}
		if v.Replicas != s.Current {
			transition = append(transition, fmt.Sprintf("%s: %d of %d replicas report", v.Variant, v.Replicas, s.Current))
		}
	}
	if len(transition) > 0 {
		// Between two sizes: hold what was asked for (or what runs) until it settles.
		for _, v := range a.Variants {
			s := byName[v.Variant]
			if s.Desired != 0 && s.Desired != s.Current {
				d.Targets[v.Variant] = s.Desired
			} else {
				d.Targets[v.Variant] = s.Current
			}
		}
		d.Reason = "in transition (" + strings.Join(transition, "; ") + "): holding"
		return d
	}
	for _, v := range a.Variants {
		d.Targets[v.Variant] = v.Replicas
	}
	switch {
	case a.ShouldScaleUp:
		var cheapest *VariantAnalysis
		var full []string
		for i := range a.Variants {
			v := &a.Variants[i]
			if byName[v.Variant].Pending > 0 {
				continue
			}
			if byName[v.Variant].Full {
				full = append(full, v.Variant)
				continue
			}
			if cheapest == nil || v.Cost < cheapest.Cost {
				cheapest = v // ties: the first by name (the list is sorted)
			}
		}
		if cheapest == nil {
			if len(full) > 0 {
				d.Reason = fmt.Sprintf("%s: capacity-limited: no more replica of %s fits now", a.ScaleUpReason, strings.Join(full, ", "))
				if len(full) < len(a.Variants) {
					d.Reason += "; the others have replicas starting"
				}
				return d
			}
			d.Reason = a.ScaleUpReason + ": every variant has replicas starting"
			return d
		}
		d.Targets[cheapest.Variant]++
		d.Reason = fmt.Sprintf("%s: one more replica of %s (cost %g)", a.ScaleUpReason, cheapest.Variant, cheapest.Cost)
		if len(full) > 0 {
			d.Reason += fmt.Sprintf("; capacity-limited: no more replica of %s fits now", strings.Join(full, ", "))
		}
	case a.ScaleDownSafe:
		var dearest *VariantAnalysis
		for i := range a.Variants {
			v := &a.Variants[i]
			if d.Targets[v.Variant] <= 1 {
				continue
			}
			if dearest == nil || v.Cost >= dearest.Cost {
				dearest = v // ties: the last by name
			}
		}
		if dearest == nil {
			d.Reason = fmt.Sprintf("spare KV cache %.3f, spare queue %.2f: every variant is at one replica", a.AvgSpareKv, a.AvgSpareQueue)
			return d
		}
		d.Targets[dearest.Variant]--
		d.Reason = fmt.Sprintf("spare KV cache %.3f, spare queue %.2f: one replica fewer of %s (cost %g)", a.AvgSpareKv, a.AvgSpareQueue, dearest.Variant, dearest.Cost)
	default:
		d.Reason = fmt.Sprintf("spare KV cache %.3f, spare queue %.2f: within the triggers (%s)", a.AvgSpareKv, a.AvgSpareQueue, a.ScaleDownUnsafeBy)
	}
	return d
}

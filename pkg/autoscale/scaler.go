package autoscale

import (
	"fmt"
	"time"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// Input is what one decision sees.
type Input struct {
	Now     time.Time
	Current int32
	// Recommended is what the metrics ask for (RecommendAll); ignored unless HasRecommendation.
	Recommended       int32
	HasRecommendation bool
	Min, Max          int32
	// ScaleToZeroGrace: the recommendation must have been zero this long before the last
	// replica goes.
	ScaleToZeroGrace time.Duration
}

// Reasons a decision gives for its replica count (the binding's Ready condition carries it).
const (
	ReasonNoRecommendation = "NoRecommendation"
	ReasonAtRecommendation = "AtRecommendation"
	ReasonBelowMinimum     = "BelowMinimum"
	ReasonAboveMaximum     = "AboveMaximum"
	ReasonScaledUp         = "ScaledUp"
	ReasonScaledDown       = "ScaledDown"
	ReasonStabilizingUp    = "StabilizingScaleUp"
	ReasonStabilizingDown  = "StabilizingScaleDown"
	ReasonScaleUpLimited   = "ScaleUpLimited"
	ReasonScaleDownLimited = "ScaleDownLimited"
	ReasonPanicScaledUp    = "PanicScaledUp"
	ReasonPanicLimited     = "PanicScaleUpLimited"
	ReasonPanicHold        = "PanicModeHoldsReplicas"
	ReasonScaleToZeroGrace = "ScaleToZeroGracePeriod"
)

// Decision is the replica count to apply and why.
type Decision struct {
	Desired int32
	// Recommended is the input recommendation clamped to [Min, Max] (meaningless without one).
	Recommended int32
	Panic       bool
	PanicUntil  time.Time
	// PanicStarted / PanicEnded report a change of mode at this decision.
	PanicStarted, PanicEnded bool
	Reason                   string
	Message                  string
}

type stamped struct {
	at time.Time
	n  int32
}

// Scaler turns a stream of recommendations into replica counts for one scale target (or
// an optimizer's total) under a Policy. It remembers recent recommendations and replica
// counts, which stabilization windows and rate limits look back over, and the panic
// deadline. It is not safe for concurrent use.
//
// A new Scaler knows no past: until it has watched for a whole scale-down stabilization
// window it treats the unknown past as having recommended the current replicas, so a
// restarted controller does not scale down sooner than the one before it would have.
type Scaler struct {
	policy     Policy
	started    time.Time
	recs       []stamped // recommendations (clamped), oldest first
	replicas   []stamped // replica counts observed and applied, oldest first
	panicUntil time.Time
	inPanic    bool
	zeroSince  time.Time // start of the current run of zero recommendations
}

// NewScaler starts a scaler's memory at now.
func NewScaler(p Policy, now time.Time) *Scaler { return &Scaler{policy: p, started: now} }

// SetPolicy changes the policy and keeps the memory (a policy edit is not a restart).
func (s *Scaler) SetPolicy(p Policy) { s.policy = p }

// Applied records that n replicas were applied at now although the last decision said
// otherwise (a disaggregatedTarget's ratio constraint moved a role), so the rate limits of
// the next decisions count from what the target really has.
func (s *Scaler) Applied(now time.Time, n int32) {
	s.replicas = append(s.replicas, stamped{now, n})
}

// Policy is the scaler's policy.
func (s *Scaler) Policy() Policy { return s.policy }

// Decide is the replica count for in.Current replicas and in.Recommended, and records both.
func (s *Scaler) Decide(in Input) Decision {
	p := s.policy
	now := in.Now
	s.prune(now)
	s.replicas = append(s.replicas, stamped{now, in.Current})
	d := Decision{Desired: in.Current}
	defer func() {
		if d.Desired != in.Current {
			s.replicas = append(s.replicas, stamped{now, d.Desired})
		}
	}()

	wasPanic := s.inPanic
	if in.HasRecommendation {
		rec := in.Recommended
		if in.Current > 0 && int64(rec)*100 >= int64(in.Current)*int64(p.Panic.ThresholdPercent) {
			s.panicUntil = now.Add(p.Panic.Hold)
		}
		d.Recommended = clamp(rec, in.Min, in.Max)
		s.recs = append(s.recs, stamped{now, d.Recommended})
		if d.Recommended == 0 {
			if s.zeroSince.IsZero() {
				s.zeroSince = now
			}
		} else {
			s.zeroSince = time.Time{}
		}
	}
	s.inPanic = now.Before(s.panicUntil)
	d.Panic, d.PanicUntil = s.inPanic, s.panicUntil
	d.PanicStarted = s.inPanic && !wasPanic
	d.PanicEnded = !s.inPanic && wasPanic

	switch {
	case in.Current < in.Min:
		d.Desired, d.Reason = in.Min, ReasonBelowMinimum
		d.Message = fmt.Sprintf("%d replicas are below the minimum %d", in.Current, in.Min)
	case in.Current > in.Max:
		d.Desired, d.Reason = in.Max, ReasonAboveMaximum
		d.Message = fmt.Sprintf("%d replicas are above the maximum %d", in.Current, in.Max)
	case !in.HasRecommendation:
		d.Reason = ReasonNoRecommendation
		d.Message = "no metric could be read; replicas unchanged"
	case s.inPanic:
		s.decidePanic(in, &d)
	case d.Recommended > in.Current:
		s.decideUp(in, &d)
	case d.Recommended < in.Current:
		s.decideDown(in, &d)
	default:
		d.Reason = ReasonAtRecommendation
		d.Message = fmt.Sprintf("%d replicas match the recommendation", in.Current)
	}
	return d
}

func (s *Scaler) decidePanic(in Input, d *Decision) {
	p := s.policy.Panic
	base := in.Current
	if p.Period > 0 {
		base = s.minReplicasSince(in.Now.Add(-p.Period), in.Current)
	}
	bound := base + ceilPercent(base, p.Percent)
	switch {
	case d.Recommended > bound:
		d.Desired = max(bound, in.Current)
		d.Reason = ReasonPanicLimited
		d.Message = fmt.Sprintf("panic mode: recommendation %d limited to %d (%d%% over %d)", d.Recommended, d.Desired, p.Percent, base)
	case d.Recommended > in.Current:
		d.Desired = d.Recommended
		d.Reason = ReasonPanicScaledUp
		d.Message = fmt.Sprintf("panic mode: scaled up to the recommendation %d", d.Desired)
	case d.Recommended < in.Current:
		d.Reason = ReasonPanicHold
		d.Message = fmt.Sprintf("panic mode until %s: no scale-down to %d", s.panicUntil.UTC().Format(time.RFC3339), d.Recommended)
	default:
		d.Reason = ReasonAtRecommendation
		d.Message = fmt.Sprintf("panic mode: %d replicas match the recommendation", in.Current)
	}
}

func (s *Scaler) decideUp(in Input, d *Decision) {
	p := s.policy.ScaleUp
	stable := d.Recommended
	if p.StabilizationWindow > 0 {
		// Scale up only as far as every recommendation in the window agrees.
		stable = s.recExtremeSince(in.Now.Add(-p.StabilizationWindow), d.Recommended, false)
	}
	base := s.minReplicasSince(in.Now.Add(-p.Period), in.Current)
	limit := upLimit(base, p)
	d.Desired = max(min(stable, limit), in.Current)
	switch {
	case d.Desired == in.Current:
		d.Reason = ReasonStabilizingUp
		d.Message = fmt.Sprintf("recommendation %d held back: the lowest in the last %s is %d", d.Recommended, p.StabilizationWindow, stable)
		if stable > in.Current {
			d.Reason = ReasonScaleUpLimited
			d.Message = fmt.Sprintf("recommendation %d held back: at most %d replicas within %s", d.Recommended, limit, p.Period)
		}
	case d.Desired < stable:
		d.Reason = ReasonScaleUpLimited
		d.Message = fmt.Sprintf("scaled up to %d of recommended %d: at most %d replicas within %s (%s of %d instances, %d%%)", d.Desired, d.Recommended, limit, p.Period, p.Select, p.Instances, p.Percent)
	case d.Desired < d.Recommended:
		d.Reason = ReasonStabilizingUp
		d.Message = fmt.Sprintf("scaled up to %d of recommended %d: the lowest recommendation in the last %s", d.Desired, d.Recommended, p.StabilizationWindow)
	default:
		d.Reason = ReasonScaledUp
		d.Message = fmt.Sprintf("scaled up to the recommendation %d", d.Desired)
	}
}

func (s *Scaler) decideDown(in Input, d *Decision) {
	p := s.policy.ScaleDown
	stable := d.Recommended
	if p.StabilizationWindow > 0 {
		// Scale down only as far as every recommendation in the window agrees; a window
		// reaching back before this scaler existed counts the unknown past as "current".
		since := in.Now.Add(-p.StabilizationWindow)
		stable = s.recExtremeSince(since, d.Recommended, true)
		if s.started.After(since) {
			stable = max(stable, in.Current)
		}
	}
	base := s.maxReplicasSince(in.Now.Add(-p.Period), in.Current)
	limit := downLimit(base, p)
	d.Desired = min(max(stable, limit), in.Current)
	if d.Desired == 0 && in.Current > 0 && (s.zeroSince.IsZero() || in.Now.Sub(s.zeroSince) < in.ScaleToZeroGrace) {
		d.Desired = 1
		d.Reason = ReasonScaleToZeroGrace
		d.Message = fmt.Sprintf("keeping one replica: the recommendation has not been zero for the grace period %s yet", in.ScaleToZeroGrace)
		return
	}
	switch {
	case d.Desired == in.Current && stable >= in.Current:
		d.Reason = ReasonStabilizingDown
		d.Message = fmt.Sprintf("recommendation %d held back: the highest in the last %s is %d", d.Recommended, p.StabilizationWindow, stable)
	case d.Desired > stable:
		d.Reason = ReasonScaleDownLimited
		d.Message = fmt.Sprintf("scaled down to %d of recommended %d: at least %d replicas within %s (%s of %d instances, %d%%)", d.Desired, d.Recommended, limit, p.Period, p.Select, p.Instances, p.Percent)
	case d.Desired > d.Recommended:
		d.Reason = ReasonStabilizingDown
		d.Message = fmt.Sprintf("scaled down to %d of recommended %d: the highest recommendation in the last %s", d.Desired, d.Recommended, p.StabilizationWindow)
	default:
		d.Reason = ReasonScaledDown
		d.Message = fmt.Sprintf("scaled down to the recommendation %d", d.Desired)
	}
}

// upLimit is the most replicas a period starting at base allows: base plus Instances, or
// plus Percent% of base; Or takes the larger step, And the smaller.
func upLimit(base int32, p RateLimit) int32 {
	byInstances := base + p.Instances
	byPercent := base + ceilPercent(base, p.Percent)
	if p.Select == workloadv1alpha1.SelectPolicyAnd {
		return min(byInstances, byPercent)
	}
	return max(byInstances, byPercent)
}

// downLimit is the fewest replicas a period starting at base allows.
func downLimit(base int32, p RateLimit) int32 {
	byInstances := base - p.Instances
	byPercent := base - int32(int64(base)*int64(p.Percent)/100)
	var l int32
	if p.Select == workloadv1alpha1.SelectPolicyAnd {
		l = max(byInstances, byPercent)
	} else {
		l = min(byInstances, byPercent)
	}
	return max(l, 0)
}

func ceilPercent(base, percent int32) int32 {
	v := (int64(base)*int64(percent) + 99) / 100
	if v > 1_000_000 {
		return 1_000_000
	}
	return int32(v)
}

// recExtremeSince is the highest (or lowest) recommendation after since, including cur.
func (s *Scaler) recExtremeSince(since time.Time, cur int32, highest bool) int32 {
	return extremeSince(s.recs, since, cur, highest)
}

// minReplicasSince is the fewest replicas seen after since: the start of a scale-up period.
func (s *Scaler) minReplicasSince(since time.Time, cur int32) int32 {
	return extremeSince(s.replicas, since, cur, false)
}

// maxReplicasSince is the most replicas seen after since: the start of a scale-down period.
func (s *Scaler) maxReplicasSince(since time.Time, cur int32) int32 {
	return extremeSince(s.replicas, since, cur, true)
}

// extremeSince is the highest (or lowest) of cur and the values stamped after since.
func extremeSince(xs []stamped, since time.Time, cur int32, highest bool) int32 {
	out := cur
	for _, x := range xs {
		switch {
		case !x.at.After(since):
		case highest:
			out = max(out, x.n)
		default:
			out = min(out, x.n)
		}
	}
	return out
}

// prune forgets what no window or period can look back to.
func (s *Scaler) prune(now time.Time) {
	p := s.policy
	keep := max(p.ScaleUp.Period, p.ScaleDown.Period, p.Panic.Period, p.ScaleUp.StabilizationWindow, p.ScaleDown.StabilizationWindow)
	cut := now.Add(-keep - time.Second)
	s.recs = dropBefore(s.recs, cut)
	s.replicas = dropBefore(s.replicas, cut)
}

func dropBefore(xs []stamped, cut time.Time) []stamped {
	i := 0
	for i < len(xs) && xs[i].at.Before(cut) {
		i++
	}
	if i == 0 {
		return xs
	}
	return append(xs[:0], xs[i:]...)
}

func clamp(v, lo, hi int32) int32 { return min(max(v, lo), hi) }

package autoscale

import (
	"math"
	"strconv"
)

// RoleBounds are a role's least and most replicas.
type RoleBounds struct {
	Min, Max int32
}

func (b RoleBounds) clamp(v int32) int32 { return clamp(v, b.Min, b.Max) }

// Ratio is a disaggregatedTarget's ratioConstraint: numerator replicas over denominator
// replicas within [Min, Max].
type Ratio struct {
	Min, Max float64
}

// EnforceRatio brings num:den (a prefill and a decode role's replicas, each already decided
// from its own metrics) within r, each within its bounds, as Kthena 1.0 does: the deficient
// side is raised first, so capacity the metrics asked for is kept, and the other side is
// lowered only when raising would pass the deficient side's maximum. Both zero stays zero
// (the pair scales to zero together); one side at zero is first brought to one (a pair with
// one live side cannot serve). It reports whether it changed either side.
//
// When the bounds leave no count within the ratio the result is the nearest the bounds
// allow; InRatio says whether it is within.
func EnforceRatio(num, den int32, nb, db RoleBounds, r Ratio) (int32, int32, bool) {
	n, d := nb.clamp(num), db.clamp(den)
	if n == 0 && d == 0 {
		return 0, 0, n != num || d != den
	}
	if n == 0 {
		n = nb.clamp(1)
	}
	if d == 0 {
		d = db.clamp(1)
	}
	switch {
	case d > 0 && float64(n) < r.Min*float64(d)-1e-9:
		// Too few numerator replicas: raise them, or if their maximum does not allow it,
		// take them to their maximum and lower the denominator to match.
		if want := ceilRatio(r.Min * float64(d)); want <= nb.Max {
			n = max(want, nb.Min)
		} else {
			n = nb.Max
			d = db.clamp(floorRatio(float64(n) / r.Min))
		}
	case d > 0 && float64(n) > r.Max*float64(d)+1e-9:
		if r.Max <= 0 {
			n = nb.clamp(0)
			break
		}
		if want := ceilRatio(float64(n) / r.Max); want <= db.Max {
			d = max(want, db.Min)
		} else {
			d = db.Max
			n = nb.clamp(floorRatio(r.Max * float64(d)))
		}
	}
	n, d = nb.clamp(n), db.clamp(d)
	return n, d, n != num || d != den
}

// InRatio says whether num:den is within r (a zero denominator is: no ratio to keep).
func InRatio(num, den int32, r Ratio) bool {
	if den == 0 {
		return true
	}
	q := float64(num) / float64(den)
	return q >= r.Min-1e-9 && q <= r.Max+1e-9
}

// FormatRatio is num/den as a decimal ("" when den is zero).
func FormatRatio(num, den int32) string {
	if den == 0 {
		return ""
	}
	return strconv.FormatFloat(float64(num)/float64(den), 'f', -1, 64)
}

// ceilRatio and floorRatio round a replica count computed from a ratio, forgiving float
// noise (0.1 × 30 is 3, not 3.0000000000000004 → 4).
func ceilRatio(v float64) int32 {
	return int32(min(math.Max(math.Ceil(v-1e-9), 0), 1_000_000))
}

func floorRatio(v float64) int32 {
	return int32(min(math.Max(math.Floor(v+1e-9), 0), 1_000_000))
}

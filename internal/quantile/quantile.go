// Package quantile holds the order statistics that the sandbox's load report and the
// benchmarks print, so every table computes a p90 or a median the same way.
package quantile

import (
	"cmp"
	"math"
	"slices"
)

// Number is what the statistics here are taken of.
type Number interface {
	~int | ~int64 | ~float64
}

// NearestRank is the nearest-rank q-quantile (0 < q ≤ 1) of sorted values: the smallest
// value with at least a q share of all values at or below it. It is the zero value when
// there are none.
func NearestRank[T cmp.Ordered](sorted []T, q float64) T {
	if len(sorted) == 0 {
		var zero T
		return zero
	}
	// Less a hair, so that a product such as 0.07×100 = 7.000000000000001 ranks 7, not 8.
	i := int(math.Ceil(q*float64(len(sorted))-1e-9)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Of is NearestRank of xs, which it sorts a copy of first.
func Of[T cmp.Ordered](xs []T, q float64) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return NearestRank(s, q)
}

// Median of xs: the middle value, or the mean of the middle two for an even count; 0 for none.
func Median[T Number](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

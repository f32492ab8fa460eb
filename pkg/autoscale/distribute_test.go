package autoscale

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDistribute(t *testing.T) {
	h100 := Share{Cost: 100, Min: 1, Max: 8}
	a100 := Share{Cost: 60, Min: 0, Max: 4}
	for _, tc := range []struct {
		name   string
		total  int32
		shares []Share
		rate   int32
		want   []int32
	}{
		{"minimums first", 1, []Share{h100, a100}, 200, []int32{1, 0}},
		{"below the sum of minimums is clamped up", 0, []Share{h100, a100}, 200, []int32{1, 0}},
		{"above the sum of maximums is clamped down", 50, []Share{h100, a100}, 200, []int32{8, 4}},
		// Blocks: a100 1@60, 2@120, 1@60(last, room 4 = 1+2+1); h100 1@100, 2@200, 4@400.
		// Order: a100#0 (60), a100#2 (60), h100#0 (100), a100#1 (120), h100#1 (200), h100#2 (400).
		{"the cheap target takes the first extra replica", 2, []Share{h100, a100}, 200, []int32{1, 1}},
		{"a cheap block before an expensive one", 3, []Share{h100, a100}, 200, []int32{1, 2}},
		{"then the expensive target's first block", 4, []Share{h100, a100}, 200, []int32{2, 2}},
		{"a partly filled block", 5, []Share{h100, a100}, 200, []int32{2, 3}},
		{"cheap target full", 6, []Share{h100, a100}, 200, []int32{2, 4}},
		{"rest to the expensive target", 9, []Share{h100, a100}, 200, []int32{5, 4}},
		// At 100% blocks never grow: the cheapest fills completely first.
		{"rate 100: cheapest fills first", 4, []Share{h100, a100}, 100, []int32{1, 3}},
		{"rate 100: then the next", 7, []Share{h100, a100}, 100, []int32{3, 4}},
		{"rate 0 behaves like 100", 4, []Share{h100, a100}, 0, []int32{1, 3}},
		{"equal cost: listed first wins ties", 3, []Share{{Cost: 5, Max: 4}, {Cost: 5, Max: 4}}, 100, []int32{3, 0}},
		{"max below min holds min", 5, []Share{{Cost: 1, Min: 3, Max: 2}, {Cost: 2, Max: 10}}, 200, []int32{3, 2}},
		// A steep rate spreads sooner: cheap blocks 1@10, 4@40; dear 1@30 comes before the 4-block.
		{"steep rate spreads", 3, []Share{{Cost: 10, Max: 10}, {Cost: 30, Max: 10}}, 400, []int32{2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Distribute(tc.total, tc.shares, tc.rate))
		})
	}
}

// Whatever the shapes, the distribution sums to the clamped total, stays within every
// share's bounds, and grows monotonically with the total (adding demand never takes a
// replica away from a target).
func TestDistributeProperties(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	for range 300 {
		n := 1 + r.IntN(4)
		shares := make([]Share, n)
		for i := range shares {
			mn := int32(r.IntN(3))
			shares[i] = Share{Cost: int32(r.IntN(200)), Min: mn, Max: mn + int32(r.IntN(12))}
		}
		rate := int32([]int{0, 100, 150, 200, 300, 1000}[r.IntN(6)])
		lo, hi := Bounds(shares)
		prev := Distribute(lo, shares, rate)
		for total := lo - 1; total <= hi+1; total++ {
			got := Distribute(total, shares, rate)
			var sum int32
			for i, g := range got {
				sum += g
				if g < shares[i].Min || g > max(shares[i].Max, shares[i].Min) {
					t.Fatalf("seed %d: share %d got %d outside [%d,%d]", seed, i, g, shares[i].Min, shares[i].Max)
				}
				if g < prev[i] {
					t.Fatalf("seed %d: total %d took a replica from share %d (%v -> %v, shares %+v rate %d)", seed, total, i, prev, got, shares, rate)
				}
			}
			if sum != clamp(total, lo, hi) {
				t.Fatalf("seed %d: total %d distributed as %v (sum %d)", seed, total, got, sum)
			}
			prev = got
		}
	}
}

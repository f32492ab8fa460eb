package autoscale

import (
	"math"
	"sort"
)

// DefaultCostExpansionRatePercent is the seed's default for optimizerConfiguration.
const DefaultCostExpansionRatePercent = 200

// Share is one optimizer target: its cost per replica and its bounds.
type Share struct {
	Cost     int32
	Min, Max int32
}

// Bounds are the least and most replicas the shares can hold together.
func Bounds(shares []Share) (lo, hi int32) {
	for _, s := range shares {
		lo += s.Min
		hi += max(s.Max, s.Min)
	}
	return lo, hi
}

type block struct {
	share, seq int
	size       int32
	key        float64
}

// Distribute splits total replicas over shares, cheapest first (docs/autoscaling.md):
//
// Every share first gets its Min. The room above it (Max - Min) is cut into blocks that grow
// by costExpansionRatePercent: sizes 1, r, r², … (r = rate/100, rounded down, at least 1),
// each costing Cost × size. All shares' blocks are filled in order of that cost (ties: the
// share listed first, then its earlier block), the last one partly. So the cheapest target
// takes the first replicas, and each further block of it costs more, until another target's
// block is cheaper; a higher rate spreads replicas over targets sooner, and at 100 or below
// blocks do not grow and the cheapest target fills completely before the next starts.
//
// total is clamped to Bounds(shares). The result is in the order of shares.
func Distribute(total int32, shares []Share, costExpansionRatePercent int32) []int32 {
	out := make([]int32, len(shares))
	lo, hi := Bounds(shares)
	total = clamp(total, lo, hi)
	var blocks []block
	for i, s := range shares {
		out[i] = s.Min
		room := s.Max - s.Min
		if room <= 0 {
			continue
		}
		if costExpansionRatePercent <= 100 {
			// Blocks of one replica each at the same cost order like one block at unit cost.
			blocks = append(blocks, block{share: i, size: room, key: float64(s.Cost)})
			continue
		}
		rate := float64(costExpansionRatePercent) / 100
		length := 1.0
		for seq := 0; room > 0; seq++ {
			size := min(room, int32(max(1, math.Min(math.Floor(length), 1_000_000))))
			blocks = append(blocks, block{share: i, seq: seq, size: size, key: float64(s.Cost) * float64(size)})
			room -= size
			length *= rate
		}
	}
	sort.SliceStable(blocks, func(a, b int) bool {
		x, y := blocks[a], blocks[b]
		if x.key != y.key {
			return x.key < y.key
		}
		if x.share != y.share {
			return x.share < y.share
		}
		return x.seq < y.seq
	})
	left := total - lo
	for _, b := range blocks {
		if left <= 0 {
			break
		}
		n := min(left, b.size)
		out[b.share] += n
		left -= n
	}
	return out
}

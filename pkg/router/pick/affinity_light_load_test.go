package pick

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestLightLoadKeepsPrefixAffinity: with the default scorers, a system prompt stays on the
// endpoint that caches it while no endpoint queues, with about one request in flight per
// endpoint and cache hits faster than misses, as on real engines. (It once split every
// prompt over two endpoints: least-requests and latency scored relative to the candidates,
// so 1 request in flight or 1 ms of jitter got their whole weight and beat a 16-of-18-block
// prefix match. They now score against a load floor and by latency ratio.) Sticking alone
// is not affinity: a picker that sent everything to one endpoint would pass it, so the
// prompts must also have different homes.
func TestLightLoadKeepsPrefixAffinity(t *testing.T) {
	p := mustNew(t, Scored, DefaultScorers)
	placed := runPromptMix(t, p, 4, func(rng *rand.Rand, hit bool) float64 {
		if hit {
			return 0.03 + 0.005*rng.Float64()
		}
		return 0.2
	})
	shares, homes := homeShares(placed)
	for s, share := range shares {
		assert.GreaterOrEqual(t, share, 0.8, "prompt %d is spread: %v", s, placed[s])
	}
	// 8 prompts over 4 idle endpoints: one endpoint home to all of them (or even to 5)
	// would queue there while the others idle.
	assert.GreaterOrEqual(t, len(homes), 3, "the prompts have homes on most endpoints: %v", homes)
	for ep, n := range homes {
		assert.LessOrEqual(t, n, 4, "endpoint %s is home to %d of the 8 prompts: %v", ep, n, homes)
	}
}

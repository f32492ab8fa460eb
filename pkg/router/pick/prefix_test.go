package pick

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// text returns n bytes of text derived from tag, so different tags differ from byte 0.
func text(tag string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s/%d ", tag, i)
	}
	return b.String()[:n]
}

func TestHashPrompt(t *testing.T) {
	assert.Empty(t, HashPrompt(""))
	assert.Empty(t, HashPrompt(text("a", BlockBytes-1)), "no whole block")
	assert.Len(t, HashPrompt(text("a", BlockBytes)), 1)
	assert.Len(t, HashPrompt(text("a", 5*BlockBytes+10)), 5, "a partial last block is left out")

	shared := text("system", 2*BlockBytes) // 128 bytes
	a := HashPrompt(shared + text("alice", 3*BlockBytes))
	b := HashPrompt(shared + text("bob", 3*BlockBytes))
	require.Len(t, a, 5)
	require.Len(t, b, 5)
	assert.Equal(t, a[:2], b[:2], "the shared 128 bytes give the same first two hashes")
	for i := 2; i < 5; i++ {
		assert.NotEqual(t, a[i], b[i], "block %d", i)
	}
	assert.Equal(t, a, HashPrompt(shared+text("alice", 3*BlockBytes)), "deterministic")

	// Chained: equal later blocks after a different first block hash differently.
	tail := text("tail", 2*BlockBytes)
	c := HashPrompt(text("x", BlockBytes) + tail)
	d := HashPrompt(text("y", BlockBytes) + tail)
	assert.NotEqual(t, c[1], d[1])
	assert.NotEqual(t, c[2], d[2])
}

func TestPrefixAffinity(t *testing.T) {
	eps := endpoints(4)
	t.Run("same prefix goes back to the same endpoint", func(t *testing.T) {
		p := mustNew(t, Scored, PrefixCache)
		system := text("you are a helpful assistant", 8*BlockBytes)
		p.Begin(&Request{Prefix: HashPrompt(system + text("q1", 2*BlockBytes))}, "ep2")(0.1)
		for i := range 20 {
			req := &Request{Prefix: HashPrompt(system + text(fmt.Sprint("question", i), 2*BlockBytes))}
			assert.Equal(t, "ep2", pickAddr(t, p, req, eps, noStats))
		}
	})
	t.Run("longer shared prefix scores higher", func(t *testing.T) {
		p := mustNew(t, Scored, PrefixCache)
		base := text("doc", 6*BlockBytes)
		p.Begin(&Request{Prefix: HashPrompt(base[:2*BlockBytes] + text("other", 4*BlockBytes))}, "ep0")(0.1)
		p.Begin(&Request{Prefix: HashPrompt(base[:4*BlockBytes] + text("else", 2*BlockBytes))}, "ep1")(0.1)
		req := &Request{Prefix: HashPrompt(base)}
		cands := p.Candidates(eps, noStats, nil)
		scores := make([]float64, len(cands))
		prefixScorer{p.prefix}.Score(req, cands, scores)
		assert.InDeltaSlice(t, []float64{2.0 / 6, 4.0 / 6, 0, 0}, scores, 1e-9)
		for range 20 {
			assert.Equal(t, "ep1", pickAddr(t, p, req, eps, noStats))
		}
	})
	t.Run("no prefix is neutral", func(t *testing.T) {
		p := mustNew(t, Scored, PrefixCache)
		p.Begin(&Request{Prefix: HashPrompt(text("a", 4*BlockBytes))}, "ep0")(0.1)
		seen := map[string]bool{}
		for range 200 {
			seen[pickAddr(t, p, &Request{}, eps, noStats)] = true
		}
		assert.Len(t, seen, 4)
	})
}

func TestPrefixIndexMatch(t *testing.T) {
	x := NewPrefixIndex(0)
	x.Record([]uint64{1, 2, 3, 4}, "a")
	x.Record([]uint64{1, 2, 9}, "b")
	x.Record(nil, "c")
	assert.Equal(t, map[string]int{"a": 4, "b": 2}, x.Match([]uint64{1, 2, 3, 4, 5}))
	assert.Equal(t, map[string]int{"a": 2, "b": 3}, x.Match([]uint64{1, 2, 9}))
	assert.Empty(t, x.Match([]uint64{99, 2, 3}), "a match starts at the first block")
	// A block seen by an endpoint that did not have the blocks before it does not count.
	x.Record([]uint64{7, 3}, "c")
	assert.Equal(t, map[string]int{"a": 4, "b": 2}, x.Match([]uint64{1, 2, 3, 4}))
	assert.Empty(t, x.Match(nil))
}

func TestPrefixIndexIsBounded(t *testing.T) {
	x := NewPrefixIndex(10)
	const limit = 1024 // the floor
	for h := range uint64(limit) {
		x.Record([]uint64{h}, "a")
	}
	assert.Equal(t, limit, x.Len())
	x.Record([]uint64{0}, "a") // block 0 is now the most recent
	x.Record([]uint64{5000, 5001}, "b")
	assert.Equal(t, limit, x.Len(), "stays at its limit")
	assert.Equal(t, map[string]int{"a": 1}, x.Match([]uint64{0}), "recently used block kept")
	assert.Empty(t, x.Match([]uint64{1}), "least recently used block evicted")
	assert.Empty(t, x.Match([]uint64{2}), "next least recently used block evicted")
	assert.Equal(t, map[string]int{"a": 1}, x.Match([]uint64{3}))
	assert.Equal(t, map[string]int{"b": 2}, x.Match([]uint64{5000, 5001}))

	big := NewPrefixIndex(3000)
	for h := range uint64(5000) {
		big.Record([]uint64{h}, "a")
	}
	assert.Equal(t, 3000, big.Len())
	assert.Empty(t, big.Match([]uint64{1999}))
	assert.NotEmpty(t, big.Match([]uint64{2000}))
}

func TestPrefixIndexKeepsFourEndpointsPerBlock(t *testing.T) {
	x := NewPrefixIndex(0)
	h := []uint64{42}
	for _, a := range []string{"a", "b", "c", "d"} {
		x.Record(h, a)
	}
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}, x.Match(h))
	x.Record(h, "a") // a is the most recent again; b is now the oldest
	x.Record(h, "e")
	assert.Equal(t, map[string]int{"a": 1, "c": 1, "d": 1, "e": 1}, x.Match(h), "the least recent endpoint is dropped")
	assert.Equal(t, []string{"e", "a", "d", "c"}, x.blocks[42].addrs, "most recent first")
	x.Record(h, "c")
	assert.Equal(t, []string{"c", "e", "a", "d"}, x.blocks[42].addrs)
	x.Record(h, "c")
	assert.Equal(t, []string{"c", "e", "a", "d"}, x.blocks[42].addrs)
}

// runPromptMix sends requests for 8 system prompts (16 blocks each, plus 2 blocks of
// user text) through p over 4 endpoints, keeping window requests in flight; ttft gives the
// time to first token a request sees, knowing whether its endpoint served its system
// prompt before. It returns, per prompt, the requests each endpoint got.
func runPromptMix(t *testing.T, p *Picker, window int, ttft func(rng *rand.Rand, hit bool) float64) []map[string]int {
	t.Helper()
	eps := endpoints(4)
	rng := rand.New(rand.NewPCG(1, 2))
	const prompts, requests = 8, 1600
	systems := make([]string, prompts)
	for i := range systems {
		systems[i] = text(fmt.Sprintf("system prompt %d", i), 16*BlockBytes)
	}
	placed := make([]map[string]int, prompts)
	for i := range placed {
		placed[i] = map[string]int{}
	}
	type open struct {
		done func(float64)
		ttft float64
	}
	var inFlight []open
	for n := range requests {
		s := rng.IntN(prompts)
		req := &Request{Model: "m", Prefix: HashPrompt(systems[s] + text(fmt.Sprint("user", n), 2*BlockBytes))}
		addr := pickAddr(t, p, req, eps, noStats)
		hit := placed[s][addr] > 0
		placed[s][addr]++
		inFlight = append(inFlight, open{p.Begin(req, addr), ttft(rng, hit)})
		if len(inFlight) > window {
			inFlight[0].done(inFlight[0].ttft)
			inFlight = inFlight[1:]
		}
	}
	for _, o := range inFlight {
		o.done(o.ttft)
	}
	return placed
}

// homeShares returns each prompt's share of requests on its busiest endpoint, and how
// many prompts each endpoint is home to.
func homeShares(placed []map[string]int) (shares []float64, homes map[string]int) {
	homes = map[string]int{}
	for _, m := range placed {
		best, total := "", 0
		for addr, c := range m {
			total += c
			if c > m[best] {
				best = addr
			}
		}
		homes[best]++
		shares = append(shares, float64(m[best])/float64(total))
	}
	return shares, homes
}

// TestDefaultScorersKeepPromptsTogether runs a realistic mix through the default scorers:
// 8 system prompts shared by many user requests over 4 equally fast endpoints, with a few
// requests in flight at any time. Each system prompt should stick to one endpoint (its KV
// cache there), and the prompts should spread over the endpoints.
func TestDefaultScorersKeepPromptsTogether(t *testing.T) {
	p := mustNew(t, Scored, DefaultScorers)
	placed := runPromptMix(t, p, 6, func(*rand.Rand, bool) float64 { return 0.05 })
	shares, homes := homeShares(placed)
	for s, share := range shares {
		assert.GreaterOrEqual(t, share, 0.9, "prompt %d is spread: %v", s, placed[s])
	}
	assert.GreaterOrEqual(t, len(homes), 3, "the prompts are spread over the endpoints: %v", homes)

	t.Run("a loaded endpoint loses new prefixes", func(t *testing.T) {
		eps := endpoints(4)
		var busy []func(float64)
		for range 30 {
			busy = append(busy, p.Begin(&Request{}, "ep0"))
		}
		got := map[string]int{}
		for n := range 40 {
			req := &Request{Model: "m", Prefix: HashPrompt(text(fmt.Sprint("new prompt ", n), 10*BlockBytes))}
			addr := pickAddr(t, p, req, eps, noStats)
			got[addr]++
			p.Begin(req, addr)(0.05)
		}
		assert.Zero(t, got["ep0"], "new prompts avoid the endpoint with 30 in flight: %v", got)
		for _, d := range busy {
			d(0.05)
		}
		// Idle again, ep0 takes new prompts again.
		seen := map[string]bool{}
		for n := range 200 {
			req := &Request{Model: "m", Prefix: HashPrompt(text(fmt.Sprint("later prompt ", n), 10*BlockBytes))}
			addr := pickAddr(t, p, req, eps, noStats)
			seen[addr] = true
			p.Begin(req, addr)(0.05)
		}
		assert.True(t, seen["ep0"])
	})
}

// Held counts, per endpoint, the shared blocks (sent more than once) that name it: what
// its cache holds worth keeping, as the router knows it. One request's own tail does not
// count; the count follows promotion off a block's endpoint list and eviction from the LRU,
// so a cold endpoint's count falls back to nothing.
func TestPrefixIndexHeld(t *testing.T) {
	x := NewPrefixIndex(1024)
	fam := HashPrompt(text("family", 10*BlockBytes))
	x.Record(fam, "a:1")
	assert.Equal(t, 0, x.Held("a:1"), "sent once: nothing shared yet")
	x.Record(fam, "a:1")
	assert.Equal(t, 10, x.Held("a:1"), "sent again: the prefix is reused; a block counts once per endpoint")
	x.Record(fam[:4], "b:1")
	assert.Equal(t, 4, x.Held("b:1"))
	assert.Equal(t, 0, x.Held("c:1"))

	// A block keeps its last endpointsPerBlock endpoints: a fifth pushes the oldest off.
	for _, a := range []string{"c:1", "d:1", "e:1"} {
		x.Record(fam[:1], a)
	}
	assert.Equal(t, 9, x.Held("a:1"), "a:1 was pushed off block 0")
	assert.Equal(t, 4, x.Held("b:1"))
	assert.Equal(t, 1, x.Held("e:1"))

	// Eviction: 1024 blocks sent once push the family out and count for nobody.
	x.Record(HashPrompt(text("other", 1024*BlockBytes)), "b:1")
	assert.Equal(t, 0, x.Held("a:1"))
	assert.Equal(t, 0, x.Held("b:1"))
	assert.Equal(t, 0, x.Held("e:1"))
	assert.Equal(t, 1024, x.Len())
}

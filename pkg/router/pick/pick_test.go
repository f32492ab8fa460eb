package pick

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-sh/berth/pkg/router/scrape"
	"github.com/berth-sh/berth/pkg/router/view"
)

// endpoints returns n endpoints addressed "ep0".."ep<n-1>".
func endpoints(n int) []*view.Endpoint {
	out := make([]*view.Endpoint, n)
	for i := range out {
		out[i] = &view.Endpoint{Namespace: "ns", Pod: fmt.Sprintf("pod-%d", i), Address: fmt.Sprintf("ep%d", i), Scheme: "http"}
	}
	return out
}

// statsOf serves scraped stats from a map; addresses not in it are unknown.
func statsOf(m map[string]scrape.Stats) func(string) (scrape.Stats, bool) {
	return func(addr string) (scrape.Stats, bool) {
		s, ok := m[addr]
		if !ok {
			return scrape.Stats{TTFT: math.NaN()}, false
		}
		if s.TTFT == 0 {
			s.TTFT = math.NaN()
		}
		return s, true
	}
}

func noStats(string) (scrape.Stats, bool) { return scrape.Stats{TTFT: math.NaN()}, false }

func mustNew(t *testing.T, policy Policy, spec string) *Picker {
	t.Helper()
	p, err := New(policy, spec, 0)
	require.NoError(t, err)
	return p
}

// pickAddr picks among eps and returns the chosen address.
func pickAddr(t *testing.T, p *Picker, req *Request, eps []*view.Endpoint, stats func(string) (scrape.Stats, bool)) string {
	t.Helper()
	cands := p.Candidates(eps, stats, nil)
	i := p.Pick(req, cands)
	require.GreaterOrEqual(t, i, 0)
	return cands[i].Endpoint.Address
}

func TestNewParsesScorerSpecs(t *testing.T) {
	tests := []struct {
		name    string
		policy  Policy
		spec    string
		want    []string // ScorerNames
		wantErr []string // substrings of the error
	}{
		{name: "default", policy: Scored, spec: DefaultScorers,
			want: []string{"kv-cache=1", "latency=1", "least-requests=2", "lora=2", "prefix-cache=3"}},
		{name: "weight defaults to 1", policy: Scored, spec: "kv-cache", want: []string{"kv-cache=1"}},
		{name: "spaces and empty parts", policy: Scored, spec: " least-requests=0.5 ,, latency=2,",
			want: []string{"latency=2", "least-requests=0.5"}},
		{name: "zero weight allowed", policy: Scored, spec: "lora=0,kv-cache=1", want: []string{"kv-cache=1", "lora=0"}},
		{name: "unknown scorer", policy: Scored, spec: "kv-cache=1,magic=2", wantErr: []string{`unknown scorer "magic"`, "least-requests"}},
		{name: "misspelt scorer", policy: Scored, spec: "prefix=3", wantErr: []string{`unknown scorer "prefix"`}},
		{name: "weight not a number", policy: Scored, spec: "kv-cache=lots", wantErr: []string{`scorer "kv-cache"`, `"lots"`}},
		{name: "negative weight", policy: Scored, spec: "latency=-1", wantErr: []string{`scorer "latency"`, `"-1"`}},
		{name: "infinite weight", policy: Scored, spec: "latency=+Inf", wantErr: []string{`scorer "latency"`, `"+Inf"`}},
		{name: "empty weight", policy: Scored, spec: "latency=", wantErr: []string{`scorer "latency"`}},
		{name: "no scorers", policy: Scored, spec: " , ", wantErr: []string{"no scorers"}},
		{name: "empty spec", policy: Scored, spec: "", wantErr: []string{"no scorers"}},
		{name: "unknown policy", policy: "fastest", spec: DefaultScorers, wantErr: []string{`"fastest"`, "round-robin", "scored"}},
		{name: "round robin ignores the spec", policy: RoundRobin, spec: "not a spec=x", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.policy, tt.spec, 0)
			if tt.wantErr != nil {
				require.Error(t, err)
				assert.Nil(t, p)
				for _, s := range tt.wantErr {
					assert.Contains(t, err.Error(), s)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, p.ScorerNames())
		})
	}
}

func TestPickNoCandidates(t *testing.T) {
	for _, policy := range []Policy{Scored, RoundRobin} {
		p := mustNew(t, policy, DefaultScorers)
		assert.Equal(t, -1, p.Pick(&Request{}, nil), policy)
	}
}

func TestRoundRobinCyclesThroughCandidates(t *testing.T) {
	p := mustNew(t, RoundRobin, "")
	eps := endpoints(3)
	// Load and stats do not matter to round robin.
	for range 5 {
		p.Begin(&Request{}, "ep0")
	}
	var got []string
	for range 7 {
		got = append(got, pickAddr(t, p, &Request{}, eps, noStats))
	}
	assert.Equal(t, []string{"ep0", "ep1", "ep2", "ep0", "ep1", "ep2", "ep0"}, got)
}

func TestCandidatesExcludeAndReport(t *testing.T) {
	p := mustNew(t, Scored, DefaultScorers)
	eps := endpoints(3)
	p.Begin(&Request{}, "ep1")
	p.Begin(&Request{}, "ep1")
	cands := p.Candidates(eps, statsOf(map[string]scrape.Stats{"ep2": {Metrics: scrape.Metrics{Running: 7}}}), map[string]bool{"ep0": true})
	require.Len(t, cands, 2)
	assert.Equal(t, "ep1", cands[0].Endpoint.Address)
	assert.EqualValues(t, 2, cands[0].InFlight)
	assert.True(t, math.IsNaN(cands[0].ObservedTTFT))
	assert.Equal(t, "ep2", cands[1].Endpoint.Address)
	assert.EqualValues(t, 7, cands[1].Stats.Running)
}

func TestLeastRequests(t *testing.T) {
	t.Run("fewest in flight", func(t *testing.T) {
		p := mustNew(t, Scored, LeastRequests)
		eps := endpoints(3)
		var dones []func(float64)
		for range 3 {
			dones = append(dones, p.Begin(&Request{}, "ep0"))
		}
		dones = append(dones, p.Begin(&Request{}, "ep1"))
		for range 20 {
			assert.Equal(t, "ep2", pickAddr(t, p, &Request{}, eps, noStats))
		}
		// Another on ep2 makes ep1 and ep2 equal, still better than ep0.
		dones = append(dones, p.Begin(&Request{}, "ep2"))
		for range 20 {
			assert.NotEqual(t, "ep0", pickAddr(t, p, &Request{}, eps, noStats))
		}
		// Once ep0's requests end, it is the idlest.
		for _, d := range dones[:3] {
			d(0.1)
		}
		for range 20 {
			assert.Equal(t, "ep0", pickAddr(t, p, &Request{}, eps, noStats))
		}
	})
	t.Run("scraped running plus waiting", func(t *testing.T) {
		p := mustNew(t, Scored, LeastRequests)
		eps := endpoints(3)
		stats := statsOf(map[string]scrape.Stats{
			"ep0": {Metrics: scrape.Metrics{Running: 5}},
			"ep1": {Metrics: scrape.Metrics{Running: 1, Waiting: 1}},
			"ep2": {Metrics: scrape.Metrics{Running: 1, Waiting: 3}},
		})
		for range 20 {
			assert.Equal(t, "ep1", pickAddr(t, p, &Request{}, eps, stats))
		}
	})
	t.Run("in flight counts beyond a stale scrape", func(t *testing.T) {
		p := mustNew(t, Scored, LeastRequests)
		eps := endpoints(2)
		// The last scrape says ep0 is idle and ep1 runs 2; this router has since sent 4 to ep0.
		stats := statsOf(map[string]scrape.Stats{"ep1": {Metrics: scrape.Metrics{Running: 2}}})
		for range 4 {
			p.Begin(&Request{}, "ep0")
		}
		assert.Equal(t, "ep1", pickAddr(t, p, &Request{}, eps, stats))
	})
}

func TestKVCachePrefersLowerUsage(t *testing.T) {
	p := mustNew(t, Scored, KVCache)
	eps := endpoints(3)
	stats := statsOf(map[string]scrape.Stats{
		"ep0": {Metrics: scrape.Metrics{KVUsage: 0.9}},
		"ep1": {Metrics: scrape.Metrics{KVUsage: 0.2}},
		"ep2": {Metrics: scrape.Metrics{KVUsage: 0.5}},
	})
	for range 20 {
		assert.Equal(t, "ep1", pickAddr(t, p, &Request{}, eps, stats))
	}
}

func TestLatency(t *testing.T) {
	p := mustNew(t, Scored, Latency)
	eps := endpoints(3)

	// Before any observation the engines' own TTFT decides; unknown counts as the middle.
	stats := statsOf(map[string]scrape.Stats{"ep0": {TTFT: 0.5}, "ep1": {TTFT: 0.05}})
	for range 10 {
		assert.Equal(t, "ep1", pickAddr(t, p, &Request{}, eps, stats))
	}

	// The router's own observations override the scraped numbers.
	p.Begin(&Request{}, "ep0")(0.02)
	p.Begin(&Request{}, "ep1")(0.3)
	p.Begin(&Request{}, "ep2")(0.2)
	for range 10 {
		assert.Equal(t, "ep0", pickAddr(t, p, &Request{}, eps, stats))
	}

	// A failure on the fastest one sends new requests elsewhere.
	p.Begin(&Request{}, "ep0")(Failed)
	for range 10 {
		assert.Equal(t, "ep2", pickAddr(t, p, &Request{}, eps, stats))
	}
	cands := p.Candidates(eps, stats, nil)
	assert.GreaterOrEqual(t, cands[0].ObservedTTFT, 1.0, "a failure counts as at least a second")

	// A request cut short by its client (NaN) changes nothing.
	p.Begin(&Request{}, "ep2")(math.NaN())
	assert.Equal(t, 0.2, p.Candidates(eps, stats, nil)[2].ObservedTTFT)

	// The done function counts once.
	done := p.Begin(&Request{}, "ep1")
	done(0.3)
	done(0.3)
	assert.EqualValues(t, 0, p.Candidates(eps, stats, nil)[1].InFlight)
}

func TestLoRAAffinity(t *testing.T) {
	eps := endpoints(3)
	stats := statsOf(map[string]scrape.Stats{
		"ep0": {Adapters: map[string]bool{"sql-lora": true}, Metrics: scrape.Metrics{KVUsage: 0.8}},
		"ep1": {Adapters: map[string]bool{"chat-lora": true}, Metrics: scrape.Metrics{KVUsage: 0.1}},
		"ep2": {Metrics: scrape.Metrics{KVUsage: 0.5}},
	})
	p := mustNew(t, Scored, "lora=2,kv-cache=1")
	for range 20 {
		assert.Equal(t, "ep0", pickAddr(t, p, &Request{Model: "sql-lora", Adapter: true}, eps, stats),
			"the adapter's endpoint wins despite its fuller cache")
	}
	// Base-model requests: lora is neutral, so KV usage decides.
	for range 20 {
		assert.Equal(t, "ep1", pickAddr(t, p, &Request{Model: "base"}, eps, stats))
	}
	// An adapter no endpoint has: neutral again.
	for range 20 {
		assert.Equal(t, "ep1", pickAddr(t, p, &Request{Model: "nowhere", Adapter: true}, eps, stats))
	}
}

func TestTiesAreBrokenAtRandom(t *testing.T) {
	for _, spec := range []string{DefaultScorers, LoRA, LeastRequests + "=0," + KVCache} {
		t.Run(spec, func(t *testing.T) {
			p := mustNew(t, Scored, spec)
			eps := endpoints(4)
			counts := map[string]int{}
			const n = 4000
			for range n {
				counts[pickAddr(t, p, &Request{Model: "m"}, eps, noStats)]++
			}
			require.Len(t, counts, 4, "every equal endpoint gets traffic: %v", counts)
			for addr, c := range counts {
				assert.InDelta(t, n/4, c, n/10, "share of %s: %v", addr, counts)
			}
		})
	}
}

func TestForgetKeepsBusyEndpoints(t *testing.T) {
	p := mustNew(t, Scored, DefaultScorers)
	eps := endpoints(3)
	p.Begin(&Request{}, "ep0")(0.4)    // idle, observed
	busy := p.Begin(&Request{}, "ep1") // still in flight
	p.Begin(&Request{}, "ep2")(0.1)    // idle, kept by the caller

	p.Forget(map[string]*view.Endpoint{"ep2": eps[2]})

	cands := p.Candidates(eps, noStats, nil)
	assert.True(t, math.IsNaN(cands[0].ObservedTTFT), "ep0's state is dropped")
	assert.EqualValues(t, 1, cands[1].InFlight, "ep1's in-flight request is still counted")
	assert.Equal(t, 0.1, cands[2].ObservedTTFT, "ep2 is kept")

	// Ending the request after Forget still balances ep1's count.
	busy(0.2)
	assert.EqualValues(t, 0, p.Candidates(eps, noStats, nil)[1].InFlight)
	p.Forget(map[string]*view.Endpoint{})
	assert.True(t, math.IsNaN(p.Candidates(eps, noStats, nil)[1].ObservedTTFT), "idle now, so forgotten")
}

// A scrape that counted this router's own requests does not keep an endpoint busy once
// they finished: only the other replicas' share of the scraped load counts, plus what this
// router has in flight now.
func TestLeastRequestsCountsOtherReplicasOnce(t *testing.T) {
	p := mustNew(t, Scored, LeastRequests)
	eps := endpoints(2)
	stats := statsOf(map[string]scrape.Stats{
		// 6 running at the scrape, all of them this router's (since finished).
		eps[0].Address: {Metrics: scrape.Metrics{Running: 6}, OwnAtScrape: 6, TTFT: math.NaN()},
		// 3 running at the scrape, none of them this router's: another replica's load.
		eps[1].Address: {Metrics: scrape.Metrics{Running: 3}, OwnAtScrape: 0, TTFT: math.NaN()},
	})
	assert.Equal(t, eps[0].Address, pickAddr(t, p, &Request{}, eps, stats))
	// Now this router sends 4 there: 4 > 3.
	for range 4 {
		p.Begin(&Request{}, eps[0].Address)
	}
	assert.Equal(t, eps[1].Address, pickAddr(t, p, &Request{}, eps, stats))
	assert.EqualValues(t, 4, p.InFlight(eps[0].Address))
}

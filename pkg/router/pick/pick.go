// Package pick chooses the endpoint for a request. Each scorer rates every candidate in
// [0, 1]; the picker adds the scores times their weights and takes the best (ties broken at
// random, so equal endpoints share traffic). Scorers read the scraped engine metrics and
// the router's own in-flight counts and observed latencies, which are current between
// scrapes.
package pick

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/berth-sh/berth/pkg/router/scrape"
	"github.com/berth-sh/berth/pkg/router/view"
)

// Candidate is an endpoint with what is known about it.
type Candidate struct {
	Endpoint *view.Endpoint
	Stats    scrape.Stats
	// InFlight is how many requests this router (and, when sharing, its peers) have open
	// to it now.
	InFlight int64
	// ObservedTTFT is this router's moving average of its time to first byte, in seconds
	// (NaN before the first).
	ObservedTTFT float64
}

// Request is what scorers may look at.
type Request struct {
	Model string
	// Adapter: Model is a LoRA adapter (LoRA affinity applies).
	Adapter bool
	// Prefix is the prompt's chained block hashes (see HashPrompt).
	Prefix []uint64
}

// Scorer rates candidates; scores are in [0, 1], higher is better.
type Scorer interface {
	Name() string
	Score(req *Request, cands []Candidate, out []float64)
}

// Weighted is a scorer with its weight.
type Weighted struct {
	Scorer Scorer
	Weight float64
}

// Names of the built-in scorers, as the --scorers flag spells them.
const (
	LeastRequests = "least-requests"
	KVCache       = "kv-cache"
	PrefixCache   = "prefix-cache"
	Latency       = "latency"
	LoRA          = "lora"
)

// DefaultScorers is the router's default mix: prefix affinity first (a cache hit saves the
// most), held back by load so a hot prefix spreads when its endpoint queues.
const DefaultScorers = "prefix-cache=3,least-requests=2,kv-cache=1,latency=1,lora=2"

// Policy is how a Picker chooses.
type Policy string

const (
	Scored     Policy = "scored"      // weighted scorers
	RoundRobin Policy = "round-robin" // every endpoint in turn, for comparison
)

// Picker picks endpoints. Safe for concurrent use.
type Picker struct {
	policy  Policy
	scorers []Weighted
	prefix  *PrefixIndex
	rr      atomic.Uint64

	mu       sync.Mutex
	inflight map[string]*endpointState

	// peers, when set, is what other router replicas share (package shared).
	peers atomic.Pointer[Peers]
}

// Peers is what a picker learns from and tells to other router replicas (package shared
// implements it over Redis). Its methods are called on the pick path and must not block.
type Peers interface {
	// Picked is told of every request this replica sends (its prefix and endpoint).
	Picked(prefix []uint64, addr string)
	// InFlight is the other replicas' requests open to addr now, as they last told.
	InFlight(addr string) int64
}

// SharePeers makes the picker count the peers' in-flight requests and tell them its picks.
func (p *Picker) SharePeers(peers Peers) { p.peers.Store(&peers) }

func (p *Picker) peerInFlight(addr string) int64 {
	if pp := p.peers.Load(); pp != nil {
		return (*pp).InFlight(addr)
	}
	return 0
}

// RecordPrefix notes that another replica sent a request with these block hashes to addr.
func (p *Picker) RecordPrefix(prefix []uint64, addr string) { p.prefix.Record(prefix, addr) }

// PrefixMatch is, per endpoint, how many leading blocks of prefix the index holds for it.
func (p *Picker) PrefixMatch(prefix []uint64) map[string]int { return p.prefix.Match(prefix) }

// PrefixHeld is how many prefix blocks the index holds for addr (see PrefixIndex.Held).
func (p *Picker) PrefixHeld(addr string) int { return p.prefix.Held(addr) }

// OwnInFlight is this replica's open requests per endpoint (endpoints with none left out).
func (p *Picker) OwnInFlight() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int64, len(p.inflight))
	for addr, st := range p.inflight {
		if n := st.inflight.Load(); n > 0 {
			out[addr] = n
		}
	}
	return out
}

// Load is the requests every router replica has open to addr now: this one's own plus
// what the peers last told (the scraper subtracts it from the engine's count at a scrape,
// leaving the load no router replica knows of).
func (p *Picker) Load(addr string) int64 { return p.InFlight(addr) + p.peerInFlight(addr) }

type endpointState struct {
	inflight atomic.Int64
	mu       sync.Mutex
	ttft     float64 // EWMA seconds, NaN before the first
}

// New builds a picker. spec is "name=weight,..." (see DefaultScorers); prefixBlocks
// bounds the prefix index.
func New(policy Policy, spec string, prefixBlocks int) (*Picker, error) {
	p := &Picker{policy: policy, prefix: NewPrefixIndex(prefixBlocks), inflight: map[string]*endpointState{}}
	switch policy {
	case Scored, RoundRobin:
	default:
		return nil, fmt.Errorf("unknown picking policy %q (want %q or %q)", policy, Scored, RoundRobin)
	}
	if policy == RoundRobin {
		return p, nil
	}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, weight, ok := strings.Cut(part, "=")
		w := 1.0
		if ok {
			var err error
			if w, err = strconv.ParseFloat(weight, 64); err != nil || w < 0 || math.IsInf(w, 0) || math.IsNaN(w) {
				return nil, fmt.Errorf("scorer %q: weight %q is not a non-negative number", name, weight)
			}
		}
		var s Scorer
		switch name {
		case LeastRequests:
			s = leastRequests{}
		case KVCache:
			s = kvCache{}
		case PrefixCache:
			s = prefixScorer{p.prefix}
		case Latency:
			s = latency{}
		case LoRA:
			s = loraAffinity{}
		default:
			return nil, fmt.Errorf("unknown scorer %q (known: %s, %s, %s, %s, %s)", name, LeastRequests, KVCache, PrefixCache, Latency, LoRA)
		}
		p.scorers = append(p.scorers, Weighted{Scorer: s, Weight: w})
	}
	if len(p.scorers) == 0 {
		return nil, fmt.Errorf("no scorers in %q", spec)
	}
	return p, nil
}

func (p *Picker) state(addr string) *endpointState {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.inflight[addr]
	if !ok {
		st = &endpointState{ttft: math.NaN()}
		p.inflight[addr] = st
	}
	return st
}

// InFlight is how many requests this router has open to addr now.
func (p *Picker) InFlight(addr string) int64 {
	p.mu.Lock()
	st, ok := p.inflight[addr]
	p.mu.Unlock()
	if !ok {
		return 0
	}
	return st.inflight.Load()
}

// Forget drops state of endpoints not in keep (called when the endpoint set changes).
func (p *Picker) Forget(keep map[string]*view.Endpoint) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, st := range p.inflight {
		if _, ok := keep[addr]; !ok && st.inflight.Load() == 0 {
			delete(p.inflight, addr)
		}
	}
}

// Candidates wraps endpoints with what is known about them, leaving out excluded addresses.
func (p *Picker) Candidates(eps []*view.Endpoint, stats func(addr string) (scrape.Stats, bool), exclude map[string]bool) []Candidate {
	out := make([]Candidate, 0, len(eps))
	for _, e := range eps {
		if exclude[e.Address] {
			continue
		}
		st := p.state(e.Address)
		s, _ := stats(e.Address)
		st.mu.Lock()
		ttft := st.ttft
		st.mu.Unlock()
		out = append(out, Candidate{Endpoint: e, Stats: s, InFlight: st.inflight.Load() + p.peerInFlight(e.Address), ObservedTTFT: ttft})
	}
	return out
}

// Pick returns the best candidate's index, or -1 when there is none.
func (p *Picker) Pick(req *Request, cands []Candidate) int {
	if len(cands) == 0 {
		return -1
	}
	if p.policy == RoundRobin {
		return int(p.rr.Add(1)-1) % len(cands)
	}
	total := make([]float64, len(cands))
	scores := make([]float64, len(cands))
	for _, ws := range p.scorers {
		if ws.Weight == 0 {
			continue
		}
		clear(scores)
		ws.Scorer.Score(req, cands, scores)
		for i, s := range scores {
			total[i] += ws.Weight * s
		}
	}
	best, ties := -1, 0
	for i, s := range total {
		switch {
		case best < 0 || s > total[best]+1e-9:
			best, ties = i, 1
		case math.Abs(s-total[best]) <= 1e-9:
			ties++
			if rand.IntN(ties) == 0 { // reservoir sampling among equals
				best = i
			}
		}
	}
	return best
}

// Failed is passed to the function Begin returns when the attempt failed (a transport
// error or an error status): the endpoint's observed latency doubles (at least a second),
// so the latency scorer steers away from an endpoint that answers fast only because it
// fails.
var Failed = math.Inf(1)

// Begin records that a request went to addr (for least-requests and prefix affinity). The
// returned function ends it; pass the time to first byte in seconds, NaN if unknown (the
// request was cut short by its client), or Failed.
func (p *Picker) Begin(req *Request, addr string) (done func(ttft float64)) {
	st := p.state(addr)
	st.inflight.Add(1)
	p.prefix.Record(req.Prefix, addr)
	if pp := p.peers.Load(); pp != nil {
		(*pp).Picked(req.Prefix, addr)
	}
	var once sync.Once
	return func(ttft float64) {
		once.Do(func() {
			st.inflight.Add(-1)
			if math.IsNaN(ttft) {
				return
			}
			st.mu.Lock()
			if math.IsInf(ttft, 1) {
				prev := st.ttft
				if math.IsNaN(prev) {
					prev = 0
				}
				st.ttft = min(max(2*prev, 1), 60)
			} else if math.IsNaN(st.ttft) {
				st.ttft = ttft
			} else {
				st.ttft = 0.8*st.ttft + 0.2*ttft
			}
			st.mu.Unlock()
		})
	}
}

// ScorerNames lists the configured scorers with weights, for logs.
func (p *Picker) ScorerNames() []string {
	var out []string
	for _, ws := range p.scorers {
		out = append(out, fmt.Sprintf("%s=%g", ws.Scorer.Name(), ws.Weight))
	}
	sort.Strings(out)
	return out
}

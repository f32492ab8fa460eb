package pick

import "math"

// leastRequests prefers the endpoint with the fewest requests: this router's own in flight
// now (current), plus what other router replicas had there at the last scrape (the engine's
// running and waiting then, minus this router's in flight then). Taking the scraped total as
// current instead keeps an endpoint that has drained since the scrape looking busy for a
// whole interval and herds traffic onto the others.
type leastRequests struct{}

func (leastRequests) Name() string { return LeastRequests }

// loadFloor is the load below which differences count for little: scoring against at least
// this many requests keeps one request in flight (0 against 1) from outweighing a cached
// prefix when nothing queues, while real queues still dominate.
const loadFloor = 8

func (leastRequests) Score(_ *Request, cands []Candidate, out []float64) {
	loads := make([]float64, len(cands))
	maxLoad := float64(loadFloor)
	for i, c := range cands {
		others := math.Max(0, c.Stats.Running+c.Stats.Waiting-c.Stats.OwnAtScrape)
		loads[i] = float64(c.InFlight) + others
		maxLoad = math.Max(maxLoad, loads[i])
	}
	for i := range cands {
		out[i] = 1 - loads[i]/maxLoad
	}
}

// kvCache prefers free KV cache: a full cache queues new requests.
type kvCache struct{}

func (kvCache) Name() string { return KVCache }

func (kvCache) Score(_ *Request, cands []Candidate, out []float64) {
	for i, c := range cands {
		out[i] = 1 - math.Min(math.Max(c.Stats.KVUsage, 0), 1)
	}
}

// latency prefers the lowest recent time to first token: the router's own observation when
// it has one (current), else the engine's histogram average. The score is the ratio to the
// fastest (fastest/own), so a millisecond of jitter between equal endpoints scores almost
// the same and only real slowness counts. Unknown counts as the middle.
type latency struct{}

func (latency) Name() string { return Latency }

func (latency) Score(_ *Request, cands []Candidate, out []float64) {
	ttft := make([]float64, len(cands))
	lo := math.Inf(1)
	for i, c := range cands {
		ttft[i] = c.ObservedTTFT
		if math.IsNaN(ttft[i]) {
			ttft[i] = c.Stats.TTFT
		}
		if !math.IsNaN(ttft[i]) {
			lo = math.Min(lo, ttft[i])
		}
	}
	for i := range cands {
		switch {
		case math.IsNaN(ttft[i]):
			out[i] = 0.5
		case ttft[i] <= 1e-6:
			out[i] = 1
		default:
			out[i] = math.Max(lo, 1e-6) / ttft[i]
		}
	}
}

// loraAffinity prefers endpoints that have the requested adapter loaded (an engine without
// it must load it first, or fails).
type loraAffinity struct{}

func (loraAffinity) Name() string { return LoRA }

func (loraAffinity) Score(req *Request, cands []Candidate, out []float64) {
	for i, c := range cands {
		if !req.Adapter || c.Stats.Adapters[req.Model] {
			out[i] = 1
		}
	}
}

// prefixScorer prefers the endpoint that served the longest leading part of this prompt
// most recently, whose prefix cache most likely still holds it.
type prefixScorer struct{ index *PrefixIndex }

func (prefixScorer) Name() string { return PrefixCache }

func (s prefixScorer) Score(req *Request, cands []Candidate, out []float64) {
	if len(req.Prefix) == 0 {
		return
	}
	matched := s.index.Match(req.Prefix)
	for i, c := range cands {
		out[i] = float64(matched[c.Endpoint.Address]) / float64(len(req.Prefix))
	}
}

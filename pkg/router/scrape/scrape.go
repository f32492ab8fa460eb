// Package scrape reads each endpoint's engine metrics at an interval, for the scorers that
// pick endpoints: queue depth, KV-cache usage, time to first token, and which LoRA
// adapters are loaded. It understands vLLM's current and older metric names and SGLang's.
package scrape

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric names, first match wins: current vLLM, older vLLM (before v0.10), SGLang.
var (
	runningNames = []string{"vllm:num_requests_running", "sglang:num_running_reqs"}
	waitingNames = []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs"}
	kvUsageNames = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"}
	ttftNames    = []string{"vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"}
)

// Metrics is what one scrape of /metrics says.
type Metrics struct {
	Running, Waiting float64
	KVUsage          float64 // 0..1
	// TTFTSum and TTFTCount are the TTFT histogram's totals; the scraper turns their change
	// between scrapes into a recent average.
	TTFTSum   float64
	TTFTCount uint64
}

// Parse reads a Prometheus text exposition. Request counts of every series (every
// model_name, every rank) add up: one engine serves one base model, and its adapters share
// its queue and cache. KV-cache usage, a fraction, is averaged over its series.
func Parse(r io.Reader) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return Metrics{}, err
	}
	var m Metrics
	m.Running, _ = gauge(families, runningNames)
	m.Waiting, _ = gauge(families, waitingNames)
	// Usage is a fraction per series (one per data-parallel rank on some engines): average
	// it, where request counts add up.
	if total, n := gauge(families, kvUsageNames); n > 0 {
		m.KVUsage = total / float64(n)
	}
	for _, name := range ttftNames {
		if f := families[name]; f != nil {
			for _, s := range f.GetMetric() {
				if h := s.GetHistogram(); h != nil {
					m.TTFTSum += h.GetSampleSum()
					m.TTFTCount += h.GetSampleCount()
				}
			}
			break
		}
	}
	return m, nil
}

// gauge sums the samples of the first family present among names, and counts them.
func gauge(families map[string]*dto.MetricFamily, names []string) (total float64, n int) {
	for _, name := range names {
		f := families[name]
		if f == nil {
			continue
		}
		for _, s := range f.GetMetric() {
			switch {
			case s.GetGauge() != nil:
				total += s.GetGauge().GetValue()
			case s.GetCounter() != nil:
				total += s.GetCounter().GetValue()
			case s.GetUntyped() != nil:
				total += s.GetUntyped().GetValue()
			default:
				continue
			}
			n++
		}
		return total, n
	}
	return 0, 0
}

// Stats is the latest knowledge of one endpoint.
type Stats struct {
	Metrics
	// TTFT is the average time to first token of requests finished since the scrape before
	// the last one that saw any, in seconds; NaN until one is seen.
	TTFT float64
	// Adapters are the LoRA adapters the engine lists in /v1/models.
	Adapters map[string]bool
	// Updated is when the last scrape succeeded; zero if none has.
	Updated time.Time
	// Err is the last scrape's error, nil after a success.
	Err error
	// OwnAtScrape is how many requests this router had in flight to the endpoint as the
	// last scrape asked and answered, the larger of the two (see Scraper.OwnLoad): Running+Waiting minus it estimates the
	// load other router replicas put there.
	OwnAtScrape float64
	// Scrapes counts the scrapes of the endpoint that ended, in success or error: one that
	// is two more than at some moment began after it, so what it saw is newer than that
	// moment (what a caller waits on instead of a clock).
	Scrapes uint64
}

// Scraper polls every endpoint it is given.
type Scraper struct {
	interval time.Duration
	client   *http.Client
	// OwnLoad, when set before Sync, says how many requests this router has in flight to an
	// address; it is sampled as each scrape asks and answers (Stats.OwnAtScrape).
	OwnLoad func(addr string) int64

	mu      sync.RWMutex
	targets map[string]*target // by address
}

type target struct {
	url    string
	cancel context.CancelFunc
	stats  Stats
	// done is closed when the target's loop has returned: no scrape of it is under way.
	done chan struct{}
}

// New returns a scraper polling every interval with client (which should have a timeout
// shorter than interval).
func New(interval time.Duration, client *http.Client) *Scraper {
	return &Scraper{interval: interval, client: client, targets: map[string]*target{}}
}

// Sync makes the set of scraped endpoints the given one: address → base URL. New
// endpoints are scraped at once; gone ones stop and are forgotten.
func (s *Scraper) Sync(ctx context.Context, endpoints map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for addr, t := range s.targets {
		if url, ok := endpoints[addr]; !ok || url != t.url {
			t.cancel()
			delete(s.targets, addr)
		}
	}
	for addr, url := range endpoints {
		if _, ok := s.targets[addr]; ok {
			continue
		}
		tctx, cancel := context.WithCancel(ctx)
		t := &target{url: url, cancel: cancel, stats: Stats{TTFT: math.NaN()}, done: make(chan struct{})}
		s.targets[addr] = t
		go s.loop(tctx, addr, t)
	}
}

// Stats returns what is known of the endpoint at addr.
func (s *Scraper) Stats(addr string) (Stats, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.targets[addr]
	if !ok {
		return Stats{TTFT: math.NaN()}, false
	}
	return t.stats, true
}

func (s *Scraper) loop(ctx context.Context, addr string, t *target) {
	defer close(t.done)
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	for {
		// Own load is sampled before and after the fetch and the larger kept: a request
		// this router let go of while the engine was answering may still be in the
		// engine's count, and taking the smaller would book it to another router replica
		// (the fair queue would then hold a slot back until the next scrape).
		own := 0.0
		if s.OwnLoad != nil {
			own = float64(s.OwnLoad(addr))
		}
		m, err := s.fetchMetrics(ctx, t.url)
		if s.OwnLoad != nil {
			own = max(own, float64(s.OwnLoad(addr)))
		}
		var adapters map[string]bool
		if err == nil {
			adapters, err = s.fetchAdapters(ctx, t.url)
		}
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		st := t.stats
		st.Err = err
		st.Scrapes++
		if err == nil {
			if m.TTFTCount > st.TTFTCount {
				st.TTFT = (m.TTFTSum - st.TTFTSum) / float64(m.TTFTCount-st.TTFTCount)
			}
			st.Metrics, st.Adapters, st.Updated, st.OwnAtScrape = m, adapters, time.Now(), own
		}
		t.stats = st
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *Scraper) get(ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return resp, nil
}

func (s *Scraper) fetchMetrics(ctx context.Context, base string) (Metrics, error) {
	resp, err := s.get(ctx, base+"/metrics")
	if err != nil {
		return Metrics{}, err
	}
	defer resp.Body.Close()
	return Parse(io.LimitReader(resp.Body, 8<<20))
}

// fetchAdapters lists the models an engine serves whose parent is another model: vLLM
// lists loaded LoRA adapters that way in /v1/models.
func (s *Scraper) fetchAdapters(ctx context.Context, base string) (map[string]bool, error) {
	resp, err := s.get(ctx, base+"/v1/models")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&list); err != nil {
		return nil, fmt.Errorf("GET %s/v1/models: %w", base, err)
	}
	out := map[string]bool{}
	for _, m := range list.Data {
		if m.Parent != nil && *m.Parent != "" {
			out[m.ID] = true
		}
	}
	return out, nil
}

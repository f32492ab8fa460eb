package scrape

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-sh/berth/pkg/sim/engine"
)

// serveEngine serves a new engine over httptest, optionally through wrap.
func serveEngine(t *testing.T, cfg engine.Config, wrap func(http.Handler) http.Handler) (*engine.Server, string) {
	t.Helper()
	eng := engine.New(cfg)
	h := eng.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = eng.Close() }) // runs first: ends in-flight requests
	return eng, srv.URL
}

func mustComplete(t *testing.T, base, prompt string, maxTokens int) {
	t.Helper()
	require.NoError(t, engine.Complete(context.Background(), base, prompt, maxTokens))
}

func loadLoRA(t *testing.T, base, name string) {
	t.Helper()
	resp, err := http.Post(base+"/v1/load_lora_adapter", "application/json",
		strings.NewReader(fmt.Sprintf(`{"lora_name":%q,"lora_path":"/adapters/%s"}`, name, name)))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func getMetrics(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestParseRealEngineExposition(t *testing.T) {
	tests := []struct {
		name string
		cfg  engine.Config
		// a name that must appear in the exposition, so the test covers that naming
		wantName string
	}{
		{"vLLM", engine.Config{Flavor: engine.VLLM}, "vllm:kv_cache_usage_perc"},
		{"vLLM legacy names", engine.Config{Flavor: engine.VLLM, LegacyMetricNames: true}, "vllm:gpu_cache_usage_perc"},
		{"SGLang", engine.Config{Flavor: engine.SGLang}, "sglang:num_queue_reqs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Real time (TimeScale 1) with one sequence at a time, so requests stay
			// running and waiting while we look.
			cfg := tt.cfg
			cfg.Model, cfg.TimeScale, cfg.MaxBatch, cfg.KVCacheTokens = "m", 1, 1, 8192
			eng, base := serveEngine(t, cfg, nil)

			for i := range 3 {
				mustComplete(t, base, fmt.Sprintf("short prompt %d", i), 1)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			for i := range 3 {
				wg.Go(func() { _ = engine.Complete(ctx, base, fmt.Sprintf("long-running request %d", i), 2000) })
			}
			require.Eventually(t, func() bool {
				st := eng.Stats()
				return st.Running == 1 && st.Waiting == 2
			}, 5*time.Second, time.Millisecond)

			text := getMetrics(t, base+"/metrics")
			require.Contains(t, text, tt.wantName)
			m, err := Parse(strings.NewReader(text))
			require.NoError(t, err)
			st := eng.Stats()
			assert.Equal(t, 1.0, m.Running)
			assert.Equal(t, 2.0, m.Waiting)
			assert.Greater(t, m.KVUsage, 0.0)
			assert.InDelta(t, st.KVUsage, m.KVUsage, 1e-9)
			// 3 finished, plus the running one once its first token is out.
			assert.Contains(t, []uint64{3, 4}, m.TTFTCount)
			assert.Greater(t, m.TTFTSum, 0.0)
			cancel()
			wg.Wait()
		})
	}
}

func TestParseExposition(t *testing.T) {
	tests := []struct {
		name string
		text string
		want Metrics
	}{
		{
			name: "request counts of every series add up, KV usage is averaged",
			text: `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="base"} 3
vllm:num_requests_running{model_name="sql-lora"} 2
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="base"} 1
vllm:num_requests_waiting{model_name="sql-lora"} 4
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="base"} 0.25
vllm:kv_cache_usage_perc{model_name="sql-lora"} 0.125
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="base",le="0.1"} 2
vllm:time_to_first_token_seconds_bucket{model_name="base",le="+Inf"} 3
vllm:time_to_first_token_seconds_sum{model_name="base"} 0.5
vllm:time_to_first_token_seconds_count{model_name="base"} 3
vllm:time_to_first_token_seconds_bucket{model_name="sql-lora",le="0.1"} 0
vllm:time_to_first_token_seconds_bucket{model_name="sql-lora",le="+Inf"} 2
vllm:time_to_first_token_seconds_sum{model_name="sql-lora"} 1.5
vllm:time_to_first_token_seconds_count{model_name="sql-lora"} 2
`,
			want: Metrics{Running: 5, Waiting: 5, KVUsage: 0.1875, TTFTSum: 2, TTFTCount: 5},
		},
		{
			name: "older vLLM cache usage name",
			text: `# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
`,
			want: Metrics{KVUsage: 0.5},
		},
		{
			name: "current name wins over the older one",
			text: `# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.9
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.1
`,
			want: Metrics{KVUsage: 0.1},
		},
		{
			name: "SGLang names",
			text: `# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 7
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 2
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.75
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 4
sglang:time_to_first_token_seconds_sum{model_name="m"} 1
sglang:time_to_first_token_seconds_count{model_name="m"} 4
`,
			want: Metrics{Running: 7, Waiting: 2, KVUsage: 0.75, TTFTSum: 1, TTFTCount: 4},
		},
		{
			name: "untyped and counter samples count too",
			text: `vllm:num_requests_running{model_name="m"} 2
# TYPE vllm:num_requests_waiting counter
vllm:num_requests_waiting{model_name="m"} 3
`,
			want: Metrics{Running: 2, Waiting: 3},
		},
		{name: "empty", text: "", want: Metrics{}},
		{name: "other metrics only", text: "process_cpu_seconds_total 12\n", want: Metrics{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(strings.NewReader(tt.text))
			require.NoError(t, err)
			assert.InDelta(t, tt.want.Running, m.Running, 1e-9)
			assert.InDelta(t, tt.want.Waiting, m.Waiting, 1e-9)
			assert.InDelta(t, tt.want.KVUsage, m.KVUsage, 1e-9)
			assert.InDelta(t, tt.want.TTFTSum, m.TTFTSum, 1e-9)
			assert.Equal(t, tt.want.TTFTCount, m.TTFTCount)
		})
	}
}

func TestParseRejectsGarbage(t *testing.T) {
	for _, text := range []string{
		"<html><body>502 Bad Gateway</body></html>\n",
		`vllm:num_requests_running{model_name="m" 3` + "\n",
		"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running three\n",
		"{\"object\":\"list\",\"data\":[]}\n",
	} {
		_, err := Parse(strings.NewReader(text))
		assert.Error(t, err, "%q", text)
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func newScraper(t *testing.T, interval time.Duration) (*Scraper, context.Context) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // registered after the servers: runs before they close
	return New(interval, &http.Client{Timeout: 2 * time.Second}), ctx
}

func waitStats(t *testing.T, s *Scraper, addr string, what string, cond func(Stats) bool) Stats {
	t.Helper()
	var last Stats
	require.Eventuallyf(t, func() bool {
		st, ok := s.Stats(addr)
		last = st
		return ok && cond(st)
	}, 30*time.Second, time.Millisecond, "waiting for %s of %s", what, addr)
	return last
}

// counting counts requests to /metrics.
func counting(n *atomic.Int64) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/metrics" {
				n.Add(1)
			}
			h.ServeHTTP(w, r)
		})
	}
}

func TestScraperScrapesNewEndpointsAtOnce(t *testing.T) {
	_, base := serveEngine(t, engine.Config{Model: "m", TimeScale: 0.001}, nil)
	s, ctx := newScraper(t, time.Hour) // only the first scrape can happen in this test
	before := time.Now()

	_, ok := s.Stats("e1")
	assert.False(t, ok, "unknown before Sync")
	s.Sync(ctx, map[string]string{"e1": base})
	st := waitStats(t, s, "e1", "a scrape", func(st Stats) bool { return !st.Updated.IsZero() })
	assert.NoError(t, st.Err)
	assert.False(t, st.Updated.Before(before))
	assert.EqualValues(t, 1, st.Scrapes, "one scrape, at once")
	assert.True(t, math.IsNaN(st.TTFT), "no request has finished yet")
	assert.Empty(t, st.Adapters)
}

func TestScraperFollowsAdapters(t *testing.T) {
	_, base := serveEngine(t, engine.Config{Model: "m", TimeScale: 0.001}, nil)
	s, ctx := newScraper(t, 10*time.Millisecond)
	s.Sync(ctx, map[string]string{"e1": base})
	waitStats(t, s, "e1", "a scrape", func(st Stats) bool { return !st.Updated.IsZero() })

	loadLoRA(t, base, "x")
	st := waitStats(t, s, "e1", "adapter x", func(st Stats) bool { return st.Adapters["x"] })
	assert.Equal(t, map[string]bool{"x": true}, st.Adapters, "the base model is not an adapter")

	loadLoRA(t, base, "y")
	waitStats(t, s, "e1", "adapter y", func(st Stats) bool { return st.Adapters["x"] && st.Adapters["y"] })
}

func TestScraperSyncStopsAndForgetsRemovedEndpoints(t *testing.T) {
	var n1, n2 atomic.Int64
	_, base1 := serveEngine(t, engine.Config{Model: "m", TimeScale: 0.001}, counting(&n1))
	_, base2 := serveEngine(t, engine.Config{Model: "m", TimeScale: 0.001}, counting(&n2))
	s, ctx := newScraper(t, 5*time.Millisecond)

	s.Sync(ctx, map[string]string{"e1": base1, "e2": base2})
	waitStats(t, s, "e1", "a scrape", func(st Stats) bool { return !st.Updated.IsZero() })
	waitStats(t, s, "e2", "a scrape", func(st Stats) bool { return !st.Updated.IsZero() })
	require.Eventually(t, func() bool { return n1.Load() >= 3 }, 5*time.Second, time.Millisecond, "scraped at the interval")

	s.mu.RLock()
	removed := s.targets["e1"]
	s.mu.RUnlock()
	s.Sync(ctx, map[string]string{"e2": base2})
	_, ok := s.Stats("e1")
	assert.False(t, ok, "a removed endpoint is forgotten")
	select { // a scrape already under way may finish; then its loop ends
	case <-removed.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the removed endpoint's scrape loop did not end")
	}
	stopped := n1.Load()
	seen2 := waitStats(t, s, "e2", "a scrape", func(Stats) bool { return true }).Scrapes
	waitStats(t, s, "e2", "three more scrapes", func(st Stats) bool { return st.Scrapes >= seen2+3 })
	// The loop's last request may reach the engine after the loop ended (the client gives up
	// at once on cancel; the server sees the request when it gets to it): one late arrival is
	// that request, more would be a loop still scraping (at 5 ms, three or more by now).
	assert.LessOrEqual(t, n1.Load()-stopped, int64(1), "a removed endpoint is no longer scraped (while the remaining one was, three times)")
	_, ok = s.Stats("e1")
	assert.False(t, ok, "a scrape under way when it was removed does not bring it back")

	// The same address at another URL (a new pod with the same IP and another port, say)
	// is a new target.
	loadLoRA(t, base1, "only-on-1")
	s.Sync(ctx, map[string]string{"e2": base1})
	waitStats(t, s, "e2", "the new URL's adapters", func(st Stats) bool { return st.Adapters["only-on-1"] })
	require.Eventually(t, func() bool { return n1.Load() > stopped }, 5*time.Second, time.Millisecond)

	s.Sync(ctx, nil)
	_, ok = s.Stats("e2")
	assert.False(t, ok)
}

func TestScraperRecordsErrors(t *testing.T) {
	t.Run("endpoint down", func(t *testing.T) {
		s, ctx := newScraper(t, 10*time.Millisecond)
		s.Sync(ctx, map[string]string{"down": "http://" + closedAddr(t)})
		st := waitStats(t, s, "down", "an error", func(st Stats) bool { return st.Err != nil })
		assert.True(t, st.Updated.IsZero(), "never updated")
		assert.True(t, math.IsNaN(st.TTFT))
		assert.Contains(t, st.Err.Error(), "refused")
	})
	t.Run("endpoint breaks, then recovers", func(t *testing.T) {
		var broken atomic.Bool
		wrap := func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if broken.Load() && r.URL.Path == "/metrics" {
					http.Error(w, "engine dead", http.StatusInternalServerError)
					return
				}
				h.ServeHTTP(w, r)
			})
		}
		_, base := serveEngine(t, engine.Config{Model: "m", TimeScale: 0.001}, wrap)
		mustComplete(t, base, "hello there", 2)
		s, ctx := newScraper(t, 10*time.Millisecond)
		s.Sync(ctx, map[string]string{"e": base})
		good := waitStats(t, s, "e", "a scrape", func(st Stats) bool { return st.TTFTCount == 1 })

		broken.Store(true)
		bad := waitStats(t, s, "e", "an error", func(st Stats) bool { return st.Err != nil })
		assert.Contains(t, bad.Err.Error(), "500")
		assert.Equal(t, good.Metrics, bad.Metrics, "the last good numbers are kept")
		assert.False(t, bad.Updated.After(good.Updated.Add(time.Hour)) || bad.Updated.IsZero())

		broken.Store(false)
		waitStats(t, s, "e", "recovery", func(st Stats) bool { return st.Err == nil && st.Updated.After(bad.Updated) })
	})
	t.Run("not a metrics endpoint", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "<html>hello</html>\n")
		}))
		t.Cleanup(srv.Close)
		s, ctx := newScraper(t, 10*time.Millisecond)
		s.Sync(ctx, map[string]string{"e": srv.URL})
		st := waitStats(t, s, "e", "an error", func(st Stats) bool { return st.Err != nil })
		assert.True(t, st.Updated.IsZero())
	})
}

// TestScraperTTFTIsTheIntervalAverage lets exactly one scrape through at a time, so the
// requests between scrapes are known, and checks that Stats.TTFT is the average TTFT of
// the requests that finished since the previous scrape, not since the engine started.
func TestScraperTTFTIsTheIntervalAverage(t *testing.T) {
	gate := make(chan struct{})
	wrap := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/metrics" && r.URL.RawQuery != "direct" {
				select {
				case <-gate:
				case <-r.Context().Done():
					return
				}
			}
			h.ServeHTTP(w, r)
		})
	}
	_, base := serveEngine(t, engine.Config{Model: "m", TimeScale: 0.001}, wrap)
	s, ctx := newScraper(t, time.Millisecond)
	s.Sync(ctx, map[string]string{"e": base})

	// scrape lets one scrape through and waits for its result.
	var last time.Time
	scrape := func() Stats {
		t.Helper()
		gate <- struct{}{}
		st := waitStats(t, s, "e", "the scrape", func(st Stats) bool { return st.Updated.After(last) })
		last = st.Updated
		return st
	}
	// engineTTFT reads the engine's TTFT histogram totals, bypassing the gate.
	engineTTFT := func() (float64, uint64) {
		t.Helper()
		m, err := Parse(strings.NewReader(getMetrics(t, base+"/metrics?direct")))
		require.NoError(t, err)
		return m.TTFTSum, m.TTFTCount
	}

	st := scrape()
	assert.True(t, math.IsNaN(st.TTFT))

	// Interval 1: short prompts, fast first tokens.
	for i := range 4 {
		mustComplete(t, base, fmt.Sprintf("hi %d", i), 1)
	}
	sum1, n1 := engineTTFT()
	require.EqualValues(t, 4, n1)
	st = scrape()
	assert.InDelta(t, sum1/4, st.TTFT, 1e-9)

	// No requests: the last average stays.
	st = scrape()
	assert.InDelta(t, sum1/4, st.TTFT, 1e-9)

	// Interval 2: long prompts, prefill makes the first token slow.
	long := strings.Repeat("a long document to summarise. ", 2000) // ~15k tokens, ~1.5 s simulated prefill
	for range 2 {
		mustComplete(t, base, long, 1)
	}
	sum2, n2 := engineTTFT()
	require.EqualValues(t, 6, n2)
	st = scrape()
	want := (sum2 - sum1) / 2
	assert.InDelta(t, want, st.TTFT, 1e-9, "average over the interval")
	assert.Greater(t, st.TTFT, 2*sum2/6, "much slower than the average since the start")
	assert.EqualValues(t, 6, st.TTFTCount)
}

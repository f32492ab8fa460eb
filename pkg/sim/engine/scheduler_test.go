package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// runConcurrently sends n chat requests at once and waits for them, while sample is
// called every few hundred microseconds.
func runConcurrently(t *testing.T, base string, n int, body func(i int) map[string]any, sample func()) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			resp, err := do(context.Background(), base+"/v1/chat/completions", body(i), nil)
			if err != nil {
				errs <- err.Error()
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- resp.Status
			}
			_, _ = resp.Body.Read(make([]byte, 1))
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	for {
		select {
		case <-finished:
			close(errs)
			for e := range errs {
				t.Error(e)
			}
			return
		default:
			if sample != nil {
				sample()
			}
			time.Sleep(300 * time.Microsecond)
		}
	}
}

func TestBatchingQueuesBeyondMaxBatch(t *testing.T) {
	// 100 steps of ~8.3ms simulated at scale 0.05 → ~40ms real per wave, 3 waves.
	s, base := startEngine(t, Config{Model: "m", TimeScale: 0.05, MaxBatch: 2})
	var maxRunning, maxWaiting int
	metricWaiting := 0.0
	runConcurrently(t, base, 6, func(int) map[string]any { return chatBody("m", "hello", 100) }, func() {
		st := s.Stats()
		maxRunning = max(maxRunning, st.Running)
		maxWaiting = max(maxWaiting, st.Waiting)
		if metricWaiting == 0 && st.Running == 2 {
			metricWaiting = value(t, scrape(t, base), "vllm:num_requests_waiting")
		}
	})
	if maxRunning != 2 || maxWaiting == 0 || metricWaiting == 0 {
		t.Errorf("max running %d (want 2), max waiting %d, waiting metric %v (want > 0)", maxRunning, maxWaiting, metricWaiting)
	}
	if st := s.Stats(); st.Running != 0 || st.Waiting != 0 || st.Requests != 6 {
		t.Errorf("after the run: %+v", st)
	}
}

func TestKVCapacityQueues(t *testing.T) {
	// 16 blocks of 16 tokens; each request needs ceil((40+100)/16) = 9 blocks, so only
	// one fits at a time even though MaxBatch allows 64.
	s, base := startEngine(t, Config{Model: "m", TimeScale: 0.05, KVCacheTokens: 256})
	prompt := strings.Repeat("x", 160-len("user: \n")) // 160 bytes = 40 tokens
	var maxRunning, maxWaiting int
	var maxUsage float64
	runConcurrently(t, base, 3, func(int) map[string]any { return chatBody("m", prompt, 100) }, func() {
		st := s.Stats()
		maxRunning = max(maxRunning, st.Running)
		maxWaiting = max(maxWaiting, st.Waiting)
		maxUsage = max(maxUsage, st.KVUsage)
	})
	if maxRunning != 1 || maxWaiting == 0 {
		t.Errorf("max running %d (want 1), max waiting %d (want > 0)", maxRunning, maxWaiting)
	}
	if maxUsage != 9.0/16 {
		t.Errorf("max KV usage %v, want %v", maxUsage, 9.0/16)
	}
	// A request that could never fit is refused instead of blocking the queue forever.
	resp, b := post(t, base+"/v1/chat/completions", chatBody("m", prompt, 300), nil)
	if resp.StatusCode != 400 {
		t.Errorf("oversized request: %d %s", resp.StatusCode, b)
	}
}

func TestPrefixCacheLowersTTFT(t *testing.T) {
	s, base := startEngine(t, Config{Model: "m", TimeScale: 0.001})
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 200) // ~2250 tokens
	ttft := func() float64 {
		before, n0 := histogram(t, scrape(t, base), "vllm:time_to_first_token_seconds")
		if resp, b := post(t, base+"/v1/chat/completions", chatBody("m", long, 2), nil); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		after, n1 := histogram(t, scrape(t, base), "vllm:time_to_first_token_seconds")
		if n1 != n0+1 {
			t.Fatalf("TTFT count %d → %d", n0, n1)
		}
		return after - before
	}
	cold, warm := ttft(), ttft()
	// Cold: ~2250 tokens × 100µs ≈ 225ms of prefill; warm: only the partial tail block.
	if cold < 0.2 || warm > cold/5 {
		t.Errorf("TTFT cold %.4fs, warm %.4fs", cold, warm)
	}
	st := s.Stats()
	tokens := int64(CountTokens("user: " + long + "\n"))
	if st.PrefixQueryTokens != 2*tokens || st.PrefixHitTokens != tokens/16*16 {
		t.Errorf("prefix stats %+v, prompt %d tokens", st, tokens)
	}
	fams := scrape(t, base)
	if q, h := value(t, fams, "vllm:prefix_cache_queries_total"), value(t, fams, "vllm:prefix_cache_hits_total"); q != float64(2*tokens) || h != float64(tokens/16*16) {
		t.Errorf("prefix counters queries %v hits %v", q, h)
	}
	// A different adapter (here: model name) never shares the base model's blocks.
	if PrefixHashes("m", long, 16)[0] == PrefixHashes("other", long, 16)[0] {
		t.Error("block hashes ignore the model")
	}
}

func TestITLGrowsWithBatch(t *testing.T) {
	// meanITL runs n concurrent requests and returns the mean simulated ITL and the
	// share of ITL samples above 10ms (a step above 10ms needs 14+ sequences).
	meanITL := func(n int) (mean, slowShare float64) {
		// Scale 0.05 keeps the run (~60ms real) much longer than it takes 32
		// requests to arrive, even under the race detector, so the batch really forms.
		_, base := startEngine(t, Config{Model: "m", TimeScale: 0.05})
		runConcurrently(t, base, n, func(i int) map[string]any { return chatBody("m", "q", 100) }, nil)
		h := scrape(t, base)["vllm:inter_token_latency_seconds"].Metric[0].Histogram
		if h.GetSampleCount() != uint64(n*99) {
			t.Fatalf("batch %d: %d ITL samples, want %d", n, h.GetSampleCount(), n*99)
		}
		fast := uint64(0)
		for _, b := range h.Bucket {
			if b.GetUpperBound() == 0.01 {
				fast = b.GetCumulativeCount()
			}
		}
		count := float64(h.GetSampleCount())
		return h.GetSampleSum() / count, float64(h.GetSampleCount()-fast) / count
	}
	one, oneSlow := meanITL(1)
	many, manySlow := meanITL(32)
	t.Logf("mean ITL: batch 1 %.5fs (%.0f%% > 10ms), batch 32 %.5fs (%.0f%% > 10ms)", one, oneSlow*100, many, manySlow*100)
	// Batch 1: 8ms + 0.15ms = 8.15ms. Batch 32: up to 8ms + 32×0.15ms = 12.8ms, less
	// while requests still trickle in and after the first ones finish.
	if one < 0.0080 || one > 0.0083 || oneSlow != 0 {
		t.Errorf("batch 1 ITL %.5fs, want 8.15ms", one)
	}
	if many < one+0.001 || manySlow < 0.25 {
		t.Errorf("batch 32 ITL %.5fs not above batch 1 ITL %.5fs", many, one)
	}
}

// At TimeScale 0.001 the loop must keep up: 200 tokens of ~8ms simulated each take
// 1.6s simulated, 1.6ms real; allow a generous bound for slow CI machines.
func TestThroughputAtSmallTimeScale(t *testing.T) {
	_, base := startEngine(t, Config{Model: "m", TimeScale: 0.001})
	start := time.Now()
	runConcurrently(t, base, 4, func(int) map[string]any { return chatBody("m", "q", 2000) }, nil)
	// 2000 steps × 8.6ms = 17.2s simulated = 17ms real.
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("2000 steps took %v, want ~17ms", el)
	}
}

func TestPrefixCacheLRU(t *testing.T) {
	c := newPrefixCache(4)
	c.insert([]uint64{1, 2, 3})
	if n := c.match([]uint64{1, 2, 9}); n != 2 {
		t.Errorf("match = %d, want 2", n)
	}
	c.insert([]uint64{5, 6}) // evicts the least recent: 3 (tail of the older chain)
	if n := c.match([]uint64{1, 2, 3}); n != 2 || c.len() != 4 {
		t.Errorf("after eviction: match %d, len %d", n, c.len())
	}
	if n := c.match([]uint64{5, 6}); n != 2 {
		t.Errorf("new chain match %d", n)
	}
}

func TestTokens(t *testing.T) {
	for text, want := range map[string]int{"": 1, "a": 1, "abcd": 1, "abcde": 2, strings.Repeat("x", 64): 16} {
		if got := CountTokens(text); got != want {
			t.Errorf("CountTokens(%q) = %d, want %d", text, got, want)
		}
	}
	got, err := PromptText([]byte(`{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{}},{"type":"text","text":"b"}]}]}`))
	if err != nil || got != "system: be brief\nuser: ab\n" {
		t.Errorf("chat PromptText = %q, %v", got, err)
	}
	got, err = PromptText([]byte(`{"prompt":[1,2,3]}`))
	if err != nil || CountTokens(got) != 3 {
		t.Errorf("token-id prompt %q, %v", got, err)
	}
	if h := PrefixHashes("m", strings.Repeat("x", 100), 16); len(h) != 1 {
		t.Errorf("%d block hashes for 25 tokens, want 1", len(h))
	}
}

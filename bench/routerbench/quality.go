package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-sh/berth/internal/chatstream"
	"github.com/berth-sh/berth/internal/quantile"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/router/pick"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

type qualityConfig struct {
	engines      int
	prompts      int     // distinct system prompts
	users        int     // user i always sends system prompt i % prompts
	requests     int     // per router configuration
	systemTokens int     // length of each system prompt
	userTokens   int     // length of each user message
	maxTokens    int     // generated per request
	cachePrompts float64 // prefix-cache capacity per engine, in whole prompts
	load         float64 // offered load as a fraction of what round robin can serve
	realSeconds  float64 // arrival span in real time per configuration
	runs         int
	seed         uint64
	// skew, above 1, draws each request's system prompt from a Zipf distribution of that
	// exponent (prompt 0 the most popular) instead of from its user (-scaledown-skew).
	skew float64
	// rec, when not nil, keeps every TTFT for -figures.
	rec *recorder
}

// The engines' simulated timing, an 8B model on one GPU give or take.
const (
	prefillPerToken = 100 * time.Microsecond
	decodeBase      = 8 * time.Millisecond
	decodePerSeq    = 150 * time.Microsecond
	blockTokens     = 16 // the engine's default block
	// assumedBatch is the batch the rate estimate assumes decode steps are shared by.
	assumedBatch = 8
)

// policy is one router configuration under test.
type policy struct {
	name    string
	policy  pick.Policy
	scorers string
}

var qualityPolicies = []policy{
	{"round-robin", pick.RoundRobin, ""},
	{"least-requests", pick.Scored, pick.LeastRequests + "=1"},
	{"prefix-aware (default scorers)", pick.Scored, pick.DefaultScorers},
}

// arrival is one request of the workload, due at offset (simulated) from the start.
type arrival struct {
	at   time.Duration
	body []byte
}

// qualityOutcome is one configuration's figures from one run (TTFT in simulated ms).
type qualityOutcome struct {
	ttftP50, ttftP90, ttftP99 float64
	rps                       float64 // completed per simulated second
	hitRate                   float64 // engines' prefix-cache hit tokens / looked-up tokens
	errs                      int
	firstErr                  error
	ttft                      []float64 // every answered request's TTFT, sorted
}

// rate is the Poisson arrival rate (per simulated second) that puts cfg.load on the
// engines when they are picked blind to prefixes: an LRU holding cachePrompts of
// prompts equally popular prompts hits about cachePrompts/prompts of the time, every
// miss prefills the whole system prompt, and decode steps are shared by a batch of
// about assumedBatch.
func (cfg qualityConfig) rate() (perSec float64, service time.Duration) {
	hit := math.Min(1, cfg.cachePrompts/float64(cfg.prompts))
	prefill := time.Duration(((1-hit)*float64(cfg.systemTokens) + float64(cfg.userTokens)) * float64(prefillPerToken))
	decode := time.Duration(cfg.maxTokens) * (decodePerSeq + decodeBase/assumedBatch)
	service = prefill + decode
	return cfg.load * float64(cfg.engines) / service.Seconds(), service
}

// workload draws the prompts, users and Poisson arrivals of one run; every configuration
// of the run gets the same one.
func (cfg qualityConfig) workload(run int) []arrival {
	rng := rand.New(rand.NewPCG(cfg.seed, uint64(run)))
	prompts := make([]string, cfg.prompts)
	for i := range prompts {
		// The index comes first so prompts differ from their first block on.
		prompts[i] = words(rng, fmt.Sprintf("You are assistant number %d of the bench. ", i), cfg.systemTokens*4)
	}
	perSec, _ := cfg.rate()
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type request struct {
		Model     string    `json:"model"`
		Messages  []message `json:"messages"`
		MaxTokens int       `json:"max_tokens"`
		Stream    bool      `json:"stream"`
	}
	out := make([]arrival, cfg.requests)
	var zipf *rand.Zipf
	if cfg.skew > 1 {
		zipf = rand.NewZipf(rng, cfg.skew, 1, uint64(cfg.prompts-1))
	}
	var at float64
	for i := range out {
		at += rng.ExpFloat64() / perSec
		u := rng.IntN(cfg.users)
		prompt := u % cfg.prompts
		if zipf != nil {
			prompt = int(zipf.Uint64())
		}
		body, _ := json.Marshal(request{Model: modelName, MaxTokens: cfg.maxTokens, Stream: true, Messages: []message{
			{Role: "system", Content: prompts[prompt]},
			{Role: "user", Content: words(rng, fmt.Sprintf("User %d, question %d: ", u, i), cfg.userTokens*4)},
		}})
		out[i] = arrival{at: time.Duration(at * float64(time.Second)), body: body}
	}
	return out
}

// engineConfig is the engines' configuration for the workload, and its arrival rate per
// simulated second: TimeScale spreads the arrivals over realSeconds, and the prefix cache
// holds cachePrompts whole prompts.
func (cfg qualityConfig) engineConfig() (engine.Config, float64) {
	perSec, _ := cfg.rate()
	span := float64(cfg.requests) / perSec // simulated seconds of arrivals
	timeScale := min(1, max(0.01, cfg.realSeconds/span))
	promptBlocks := (cfg.systemTokens + cfg.userTokens + 4 + blockTokens - 1) / blockTokens
	cacheBlocks := int(math.Ceil(cfg.cachePrompts * float64(promptBlocks)))
	return engine.Config{Model: modelName, TimeScale: timeScale, PrefixCacheBlocks: cacheBlocks,
		PrefillPerToken: prefillPerToken, DecodeBase: decodeBase, DecodePerSeq: decodePerSeq}, perSec
}

// words pads prefix with random lowercase words to n bytes.
func words(rng *rand.Rand, prefix string, n int) string {
	var b strings.Builder
	b.WriteString(prefix)
	for b.Len() < n {
		for range 3 + rng.IntN(6) {
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// runQuality replays the same shared-prefix workload through berth-router with each
// picking configuration, each on freshly started engines (cold prefix caches).
func runQuality(ctx context.Context, c *cluster, cfg qualityConfig) (string, error) {
	ips := engineIPs(20, cfg.engines)
	if err := c.setPods(ctx, ips); err != nil {
		return "", err
	}
	ecfg, perSec := cfg.engineConfig()
	_, service := cfg.rate()
	span := float64(cfg.requests) / perSec
	timeScale, cacheBlocks := ecfg.TimeScale, ecfg.PrefixCacheBlocks
	progress("quality: %.1f requests/s (simulated) for %.0f simulated s, estimated round-robin service %s per request, TimeScale %.3f, prefix cache %d blocks per engine",
		perSec, span, service.Round(time.Millisecond), timeScale, cacheBlocks)

	outcomes := map[string][]qualityOutcome{}
	for run := range cfg.runs {
		load := cfg.workload(run)
		order := append(slices.Clone(qualityPolicies[run%len(qualityPolicies):]), qualityPolicies[:run%len(qualityPolicies)]...)
		for _, p := range order {
			progress("quality run %d/%d: %s, %d requests", run+1, cfg.runs, p.name, len(load))
			o, err := qualityOnce(ctx, c, ecfg, ips, p, load)
			if err != nil {
				return "", err
			}
			progress("  TTFT p50 %.0f ms p90 %.0f ms, %.1f requests/s, prefix hit rate %.0f%%, %d errors",
				o.ttftP50, o.ttftP90, o.rps, 100*o.hitRate, o.errs)
			outcomes[p.name] = append(outcomes[p.name], o)
			cfg.rec.qualityRun(run, p.name, o.ttft)
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "### Quality: %d engines, %d system prompts of %d tokens, %d users, %d requests per configuration, %d run(s)\n\n",
		cfg.engines, cfg.prompts, cfg.systemTokens, cfg.users, cfg.requests, cfg.runs)
	fmt.Fprintf(&b, "Poisson arrivals at %.1f requests/s (simulated), %.0f%% of what the engines serve at round robin's expected hit rate (estimated %s per request); "+
		"user messages of %d tokens, %d tokens out, streamed. Engines: prefill %s/token, decode step %s + %s/sequence, prefix cache %d blocks (%.1f prompts) each; TimeScale %.3f (the router scrapes every simulated second). "+
		"TTFT in simulated ms, measured by the client from each request's due time. Medians of %d run(s).\n\n",
		perSec, 100*cfg.load, service.Round(time.Millisecond), cfg.userTokens, cfg.maxTokens, prefillPerToken, decodeBase, decodePerSeq,
		cacheBlocks, cfg.cachePrompts, timeScale, cfg.runs)
	b.WriteString("| router | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | p90 ÷ round robin | completed requests/s | prefix-cache hit rate | errors |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	med := func(name string, f func(qualityOutcome) float64) float64 {
		var xs []float64
		for _, o := range outcomes[name] {
			xs = append(xs, f(o))
		}
		return quantile.Median(xs)
	}
	rrP90 := med(qualityPolicies[0].name, func(o qualityOutcome) float64 { return o.ttftP90 })
	for _, p := range qualityPolicies {
		errs := 0
		for _, o := range outcomes[p.name] {
			errs += o.errs
		}
		p90 := med(p.name, func(o qualityOutcome) float64 { return o.ttftP90 })
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %.2f | %.2f | %.0f%% | %d |\n", p.name,
			med(p.name, func(o qualityOutcome) float64 { return o.ttftP50 }), p90,
			med(p.name, func(o qualityOutcome) float64 { return o.ttftP99 }), p90/rrP90,
			med(p.name, func(o qualityOutcome) float64 { return o.rps }),
			100*med(p.name, func(o qualityOutcome) float64 { return o.hitRate }), errs)
	}
	prefixP90 := med(qualityPolicies[2].name, func(o qualityOutcome) float64 { return o.ttftP90 })
	fmt.Fprintf(&b, "\nTarget: prefix-aware TTFT p90 at least 75%% lower than round robin: %.0f%% lower — %s\n",
		100*(1-prefixP90/rrP90), verdict(prefixP90 <= 0.25*rrP90))
	for _, p := range qualityPolicies {
		for _, o := range outcomes[p.name] {
			if o.firstErr != nil {
				fmt.Fprintf(&b, "\nFirst error through %s: %v\n", p.name, o.firstErr)
				break
			}
		}
	}
	return b.String(), nil
}

// qualityOnce starts fresh engines and a router with p, replays load, and stops both.
func qualityOnce(ctx context.Context, c *cluster, ecfg engine.Config, ips []string, p policy, load []arrival) (qualityOutcome, error) {
	return qualityThrough(ctx, c, ecfg, ips, load, 1, router.Options{Policy: p.policy, Scorers: p.scorers})
}

// qualityThrough starts fresh engines and n routers with o, replays load with request i
// sent to router i mod n (a round-robin balancer in front of the replicas), and stops them.
func qualityThrough(ctx context.Context, c *cluster, ecfg engine.Config, ips []string, load []arrival, n int, ro router.Options) (qualityOutcome, error) {
	engines, err := startEngines(ecfg, ips)
	if err != nil {
		return qualityOutcome{}, err
	}
	defer closeEngines(engines)
	// The readiness probe is a one-token request with no system prompt: it leaves nothing
	// in the prefix caches a later request could hit.
	// The router scrapes once per simulated second (its default of 1s, scaled), so the
	// engine metrics it scores on are as fresh, in engine time, as in a real cluster.
	ro.ScrapeInterval = time.Duration(float64(time.Second) * ecfg.TimeScale)
	urls := make([]string, n)
	for i := range n {
		rt, err := c.startRouterWith(ctx, ro, overheadBody)
		if err != nil {
			return qualityOutcome{}, err
		}
		defer rt.stop()
		urls[i] = rt.url
	}

	cl := newHTTPClient(0)
	defer cl.CloseIdleConnections()
	ttft := make([]time.Duration, len(load))
	ends := make([]time.Time, len(load))
	failed := make([]error, len(load))
	scale := ecfg.TimeScale
	var wg sync.WaitGroup
	start := time.Now()
	for i, a := range load {
		due := start.Add(time.Duration(float64(a.at) * scale))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		wg.Go(func() {
			ttft[i], failed[i] = streamOne(cl, urls[i%n], a.body, due)
			ends[i] = time.Now()
		})
	}
	wg.Wait()

	var o qualityOutcome
	var good []float64
	last := start
	for i := range load {
		if failed[i] != nil {
			o.errs++
			if o.firstErr == nil {
				o.firstErr = failed[i]
			}
			continue
		}
		good = append(good, float64(ttft[i])/scale/float64(time.Millisecond))
		if ends[i].After(last) {
			last = ends[i]
		}
	}
	slices.Sort(good)
	o.ttftP50, o.ttftP90, o.ttftP99 = quantile.NearestRank(good, 0.5), quantile.NearestRank(good, 0.9), quantile.NearestRank(good, 0.99)
	o.rps = float64(len(good)) / (last.Sub(start).Seconds() / scale)
	o.ttft = good
	o.hitRate = prefixHitRate(engines)
	return o, nil
}

// streamOne sends a streaming request and returns the time from due to the first SSE
// chunk carrying content; it reads the stream to [DONE] so a cut stream counts as an error.
func streamOne(cl *http.Client, url string, body []byte, due time.Time) (time.Duration, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, statusError(resp.StatusCode)
	}
	return chatstream.FirstToken(resp.Body, due)
}

// prefixHitRate is the share of prompt tokens the engines found in their prefix caches.
func prefixHitRate(engines []*engine.Server) float64 {
	var hit, query int64
	for _, e := range engines {
		st := e.Stats()
		hit += st.PrefixHitTokens
		query += st.PrefixQueryTokens
	}
	if query == 0 {
		return 0
	}
	return float64(hit) / float64(query)
}

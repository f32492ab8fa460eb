package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/berth-sh/berth/internal/quantile"
	"github.com/berth-sh/berth/pkg/router/pick"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

type overheadConfig struct {
	engines   int
	conc      int
	warm, dur time.Duration
	runs      int
	nginx     string
	// cpuProfile, when set, is the prefix of a CPU profile per path of the first run's
	// closed loop (warm-up included; per-request figures assume the measured rate held
	// through it), split by goroutine label (component=generator, engine, router-...).
	cpuProfile string
	// rate, when set, replaces half nginx's max as the open-loop rate.
	rate float64
	// inProcess runs berth-router inside the benchmark's process (needed for cpuProfile's
	// split by component) instead of as its own process, as nginx runs.
	inProcess bool
	// rec, when not nil, keeps every sample for -figures.
	rec *recorder
}

// overheadBody is the smallest useful chat request: one token out, non-streaming.
var overheadBody = []byte(`{"model":"m","messages":[{"role":"user","content":"Say hello in one word, please."}],"max_tokens":1}`)

// path is one way of reaching the engines.
type path struct {
	name string
	t    *targets
	cl   *http.Client
	// cpuSeconds reads the proxy's own processes' CPU time; nil for the direct path and
	// for a router in the benchmark's process.
	cpuSeconds func() float64
}

// pathResult holds one path's figures from every run.
type pathResult struct {
	maxRPS, ratio, load, p50, p99, addedP50, addedP99 []float64
	// cpuPerRequest is the proxy's own process CPU per request in each run's closed loop,
	// µs (nginx's processes, or berth-router's when it runs as its own process).
	cpuPerRequest []float64
	errs          int64
	firstErr      error
}

// runOverhead measures what a proxy costs on engines that answer in microseconds: max
// requests/s in a closed loop and latency at half nginx's max, for the engines reached
// directly, through nginx and through berth-router (round robin and default scorers).
func runOverhead(ctx context.Context, c *cluster, cfg overheadConfig) (string, error) {
	ips := engineIPs(10, cfg.engines)
	if err := c.setPods(ctx, ips); err != nil {
		return "", err
	}
	// TimeScale 1e-4 makes a 1-token step of a few µs of real time: what is left of the
	// engine is its HTTP server and JSON.
	engines, err := startEngines(engine.Config{Model: modelName, TimeScale: 1e-4, MaxBatch: 1024}, ips)
	if err != nil {
		return "", err
	}
	defer closeEngines(engines)
	var direct []string
	var upstreams []string
	for _, ip := range ips {
		direct = append(direct, "http://"+engineAddr(ip)+"/v1/chat/completions")
		upstreams = append(upstreams, engineAddr(ip))
	}
	engineAlone, err := sequentialLatency(direct[0], 2000)
	if err != nil {
		return "", fmt.Errorf("engine sanity check: %w", err)
	}
	progress("overhead: one engine alone, one connection, sequential: p50 %.3f ms p99 %.3f ms", ms(engineAlone[0]), ms(engineAlone[1]))

	ngx, err := startNginx(cfg.nginx, upstreams)
	if err != nil {
		return "", err
	}
	defer ngx.stop()
	start := func(policy pick.Policy, scorers string) (*routerHandle, error) {
		return c.startRouter(ctx, policy, scorers, 0, overheadBody)
	}
	if !cfg.inProcess {
		dir, err := os.MkdirTemp("", "routerbench-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(dir)
		bin, err := buildRouter(dir)
		if err != nil {
			return "", err
		}
		start = func(policy pick.Policy, scorers string) (*routerHandle, error) {
			return c.startRouterProcess(ctx, bin, dir, policy, scorers, overheadBody)
		}
	}
	rr, err := start(pick.RoundRobin, "")
	if err != nil {
		return "", err
	}
	defer rr.stop()
	scored, err := start(pick.Scored, pick.DefaultScorers)
	if err != nil {
		return "", err
	}
	defer scored.stop()

	paths := []*path{
		{name: "direct", t: &targets{urls: direct}},
		{name: "nginx", t: &targets{urls: []string{ngx.url}}, cpuSeconds: ngx.cpuSeconds},
		{name: "berth-rr", t: &targets{urls: []string{rr.url}}, cpuSeconds: rr.cpuSeconds},
		{name: "berth-scored", t: &targets{urls: []string{scored.url}}, cpuSeconds: scored.cpuSeconds},
	}
	res := map[string]*pathResult{}
	for _, p := range paths {
		res[p.name] = &pathResult{}
	}
	var rates []float64
	var cpuSplit []string
	// Goroutines started from here on (the generator's) carry component=generator.
	defer pprof.SetGoroutineLabels(ctx)
	pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("component", "generator")))
	for run := range cfg.runs {
		// Rotate the order so no path always runs first (cold) or last (machine warm).
		order := append(slices.Clone(paths[run%len(paths):]), paths[:run%len(paths)]...)
		rps := map[string]float64{}
		for _, p := range order {
			// The same number of connections in all: conc to a proxy, conc/engines to each engine.
			p.cl = newHTTPClient((cfg.conc + len(p.t.urls) - 1) / len(p.t.urls))
			progress("overhead run %d/%d: %s closed loop, %d clients, %s + %s warm-up", run+1, cfg.runs, p.name, cfg.conc, cfg.dur, cfg.warm)
			var r float64
			var errs int64
			var ferr error
			ngxBefore := ngx.cpuSeconds()
			var proxyBefore float64
			if p.cpuSeconds != nil {
				proxyBefore = p.cpuSeconds()
			}
			prof, err := profiled(cfg.cpuProfile != "" && run == 0, func() {
				r, errs, ferr = closedLoop(p.cl, p.t, overheadBody, cfg.conc, cfg.warm, cfg.dur)
			})
			ngxCPU := ngx.cpuSeconds() - ngxBefore
			if p.cpuSeconds != nil && r > 0 {
				// Requests over warm-up and measurement, at the measured rate: the CPU counts both.
				us := 1e6 * (p.cpuSeconds() - proxyBefore) / (r * (cfg.warm + cfg.dur).Seconds())
				res[p.name].cpuPerRequest = append(res[p.name].cpuPerRequest, us)
				cfg.rec.proxyCPU(run, p.name, us)
			}
			if err != nil {
				return "", err
			}
			if prof != nil {
				file := cfg.cpuProfile + "-" + p.name + ".pprof"
				if err := os.WriteFile(file, prof, 0o644); err != nil {
					return "", err
				}
				split, err := cpuByComponent(prof)
				if err != nil {
					return "", err
				}
				if ngxCPU > 0 {
					split["nginx (processes)"] = ngxCPU
				}
				progress("  CPU profile %s; CPU per request by component: %s", file, split.perRequest(r*(cfg.warm+cfg.dur).Seconds()))
				cpuSplit = append(cpuSplit, fmt.Sprintf("| %s | %s |", p.name, split.perRequest(r*(cfg.warm+cfg.dur).Seconds())))
			}
			rps[p.name] = r
			res[p.name].maxRPS = append(res[p.name].maxRPS, r)
			cfg.rec.maxRate(run, p.name, r)
			res[p.name].note(errs, ferr)
			progress("  %.0f requests/s, %d errors", r, errs)
		}
		rate := rps["nginx"] / 2
		if cfg.rate > 0 {
			rate = cfg.rate
		}
		rates = append(rates, rate)
		lat := map[string][2]float64{}
		for _, p := range order {
			progress("overhead run %d/%d: %s open loop at %.0f requests/s for %s", run+1, cfg.runs, p.name, rate, cfg.dur)
			l, errs, ferr := openLoop(p.cl, p.t, overheadBody, rate, cfg.dur)
			res[p.name].note(errs, ferr)
			cfg.rec.openLoop(run, p.name, rate, l)
			lat[p.name] = [2]float64{ms(quantile.NearestRank(l, 0.5)), ms(quantile.NearestRank(l, 0.99))}
			progress("  p50 %.3f ms, p99 %.3f ms, %d errors", lat[p.name][0], lat[p.name][1], errs)
			p.cl.CloseIdleConnections()
		}
		for _, p := range paths {
			r := res[p.name]
			r.ratio = append(r.ratio, rps[p.name]/rps["nginx"])
			r.load = append(r.load, rate/rps[p.name])
			r.p50 = append(r.p50, lat[p.name][0])
			r.p99 = append(r.p99, lat[p.name][1])
			r.addedP50 = append(r.addedP50, lat[p.name][0]-lat["direct"][0])
			r.addedP99 = append(r.addedP99, lat[p.name][1]-lat["direct"][1])
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "### Overhead: %d engines, %d closed-loop clients, %s per measurement, %d run(s)\n\n", cfg.engines, cfg.conc, cfg.dur, cfg.runs)
	rateSays := "half nginx's max in the same run"
	if cfg.rate > 0 {
		rateSays = "the rate given by -rate"
	}
	fmt.Fprintf(&b, "Engine alone (one connection, sequential): p50 %.3f ms, p99 %.3f ms. Latency columns at a fixed open-loop rate, %s (median rate %.0f requests/s; \"rate ÷ own max\" is how loaded that leaves each path); added = path − direct. Medians of %d run(s).\n\n",
		ms(engineAlone[0]), ms(engineAlone[1]), rateSays, quantile.Median(rates), cfg.runs)
	b.WriteString("| path | max requests/s | ÷ nginx | rate ÷ own max | p50 ms | p99 ms | added p50 ms | added p99 ms | proxy CPU µs per request | ÷ nginx | errors |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	nginxCPU := quantile.Median(res["nginx"].cpuPerRequest)
	for _, p := range paths {
		r := res[p.name]
		added50, added99 := fmt.Sprintf("%.3f", quantile.Median(r.addedP50)), fmt.Sprintf("%.3f", quantile.Median(r.addedP99))
		if p.name == "direct" {
			added50, added99 = "–", "–"
		}
		cpu, cpuRatio := "–", "–"
		if len(r.cpuPerRequest) > 0 {
			cpu = fmt.Sprintf("%.0f", quantile.Median(r.cpuPerRequest))
			if nginxCPU > 0 {
				cpuRatio = fmt.Sprintf("%.2f", quantile.Median(r.cpuPerRequest)/nginxCPU)
			}
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.2f | %.2f | %.3f | %.3f | %s | %s | %s | %s | %d |\n", p.name, quantile.Median(r.maxRPS), quantile.Median(r.ratio), quantile.Median(r.load),
			quantile.Median(r.p50), quantile.Median(r.p99), added50, added99, cpu, cpuRatio, r.errs)
	}
	b.WriteString("\nTargets:\n\n")
	for _, name := range []string{"berth-rr", "berth-scored"} {
		r := res[name]
		if cfg.rate == 0 {
			fmt.Fprintf(&b, "- %s added p99 ≤ 1 ms at half nginx's max: %.3f ms — %s\n", name, quantile.Median(r.addedP99), verdict(quantile.Median(r.addedP99) <= 1))
		} else {
			fmt.Fprintf(&b, "- %s added p99 at %.0f requests/s (the target is set at half nginx's max, not this rate): %.3f ms\n", name, cfg.rate, quantile.Median(r.addedP99))
		}
		fmt.Fprintf(&b, "- %s max requests/s ≥ 0.8 × nginx: %.2f × — %s\n", name, quantile.Median(r.ratio), verdict(quantile.Median(r.ratio) >= 0.8))
		if len(r.cpuPerRequest) > 0 && nginxCPU > 0 {
			c := quantile.Median(r.cpuPerRequest) / nginxCPU
			fmt.Fprintf(&b, "- %s CPU per request ≤ 1.5 × nginx's (each its own processes): %.2f × — %s\n", name, c, verdict(c <= 1.5))
		}
	}
	if len(cpuSplit) > 0 {
		b.WriteString("\nCPU per request in the closed loop of run 1, from the CPU profile of this process by goroutine label (\"runtime\" is unlabelled work such as GC) and, for nginx, its processes' CPU time from /proc:\n\n| path | CPU µs per request |\n|---|---|\n")
		b.WriteString(strings.Join(cpuSplit, "\n") + "\n")
	}
	for _, p := range paths {
		if r := res[p.name]; r.firstErr != nil {
			fmt.Fprintf(&b, "\nFirst error through %s: %v\n", p.name, r.firstErr)
		}
	}
	return b.String(), nil
}

func (r *pathResult) note(errs int64, err error) {
	r.errs += errs
	if r.firstErr == nil {
		r.firstErr = err
	}
}

// sequentialLatency is p50 and p99 of n requests one after another on one connection.
func sequentialLatency(url string, n int) ([2]time.Duration, error) {
	cl := newHTTPClient(0)
	defer cl.CloseIdleConnections()
	t := &targets{urls: []string{url}}
	lat := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := doRequest(cl, t.pick(), overheadBody); err != nil {
			return [2]time.Duration{}, err
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	return [2]time.Duration{quantile.NearestRank(lat, 0.5), quantile.NearestRank(lat, 0.99)}, nil
}

func verdict(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**not met**"
}

// profiled runs f, under a CPU profile when on, and returns the profile.
func profiled(on bool, f func()) ([]byte, error) {
	if !on {
		f()
		return nil, nil
	}
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		return nil, err
	}
	f()
	pprof.StopCPUProfile()
	return buf.Bytes(), nil
}

// cpuSplit is CPU seconds by the component label of the goroutine that spent it.
type cpuSplit map[string]float64

func cpuByComponent(raw []byte) (cpuSplit, error) {
	p, err := profile.Parse(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			idx = i
		}
	}
	out := cpuSplit{}
	for _, s := range p.Sample {
		c := strings.Join(s.Label["component"], ",")
		if c == "" {
			c = "runtime"
		}
		out[c] += float64(s.Value[idx]) / 1e9
	}
	return out, nil
}

// perRequest renders the split as µs per request, largest first.
func (s cpuSplit) perRequest(requests float64) string {
	names := slices.Collect(maps.Keys(s))
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(s[b], s[a]) })
	total := 0.0
	var parts []string
	for _, n := range names {
		total += s[n]
		parts = append(parts, fmt.Sprintf("%s %.1f", n, s[n]/requests*1e6))
	}
	return fmt.Sprintf("total %.1f: %s", total/requests*1e6, strings.Join(parts, ", "))
}

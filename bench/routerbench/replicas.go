package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/berth-sh/berth/internal/quantile"
	"github.com/berth-sh/berth/internal/redistest"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/router/pick"
)

// replicaName names a replicas configuration in the table and figure.
func replicaName(n int) string {
	if n == 1 {
		return "1 replica"
	}
	return fmt.Sprintf("%d replicas", n)
}

const replicasRoundRobin = "round robin (1 router)"

// runReplicas replays the quality workload through 1, 2, 4… berth-router replicas with the
// default scorers behind a round-robin balancer (the client sends request i to replica
// i mod n, as a Service spreads connections), the replicas sharing their prefix index and
// in-flight counts through one redis-server (a fresh one per configuration, so none
// inherits another's picture), and through one round-robin router for comparison; each on
// freshly started engines.
func runReplicas(ctx context.Context, c *cluster, cfg qualityConfig, counts []int) (string, error) {
	ips := engineIPs(20, cfg.engines)
	if err := c.setPods(ctx, ips); err != nil {
		return "", err
	}
	ecfg, perSec := cfg.engineConfig()
	names := []string{replicasRoundRobin}
	for _, n := range counts {
		names = append(names, replicaName(n))
	}
	outcomes := map[string][]qualityOutcome{}
	for run := range cfg.runs {
		load := cfg.workload(run)
		for i, name := range names {
			n, o := 1, router.Options{Policy: pick.RoundRobin}
			var redis *redistest.Server
			if i > 0 {
				var err error
				if redis, err = redistest.New(); err != nil {
					return "", err
				}
				n, o = counts[i-1], router.Options{Policy: pick.Scored, Scorers: pick.DefaultScorers, RedisAddr: redis.Addr()}
			}
			progress("replicas run %d/%d: %s, %d requests", run+1, cfg.runs, name, len(load))
			out, err := qualityThrough(ctx, c, ecfg, ips, load, n, o)
			if redis != nil {
				redis.Close()
			}
			if err != nil {
				return "", err
			}
			progress("  TTFT p50 %.0f ms p90 %.0f ms, prefix hit rate %.0f%%, %d errors", out.ttftP50, out.ttftP90, 100*out.hitRate, out.errs)
			outcomes[name] = append(outcomes[name], out)
			cfg.rec.replicasRun(run, name, out.ttft)
		}
	}

	med := func(name string, f func(qualityOutcome) float64) float64 {
		var xs []float64
		for _, o := range outcomes[name] {
			xs = append(xs, f(o))
		}
		return quantile.Median(xs)
	}
	p90 := func(name string) float64 { return med(name, func(o qualityOutcome) float64 { return o.ttftP90 }) }
	var b strings.Builder
	fmt.Fprintf(&b, "### Replicas: the quality workload through router replicas sharing one Redis, %d engines, %d requests per configuration, %d run(s)\n\n",
		cfg.engines, cfg.requests, cfg.runs)
	fmt.Fprintf(&b, "%d system prompts of %d tokens, %d users, Poisson arrivals at %.1f requests/s (simulated, %.0f%% load), TimeScale %.3f. "+
		"Request i goes to replica i mod n (a round-robin balancer); the replicas run the default scorers and share their prefix index and in-flight counts through Redis (package pkg/router/shared). "+
		"TTFT in simulated ms. Medians of %d run(s).\n\n", cfg.prompts, cfg.systemTokens, cfg.users, perSec, 100*cfg.load, ecfg.TimeScale, cfg.runs)
	b.WriteString("| routers | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | p90 ÷ 1 replica | p90 ÷ round robin | prefix-cache hit rate | errors |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	rr := p90(replicasRoundRobin)
	one := rr
	if len(counts) > 0 {
		one = p90(replicaName(counts[0]))
	}
	for _, name := range names {
		errs := 0
		for _, o := range outcomes[name] {
			errs += o.errs
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %.2f | %.2f | %.0f%% | %d |\n", name,
			med(name, func(o qualityOutcome) float64 { return o.ttftP50 }), p90(name),
			med(name, func(o qualityOutcome) float64 { return o.ttftP99 }), p90(name)/one, p90(name)/rr,
			100*med(name, func(o qualityOutcome) float64 { return o.hitRate }), errs)
	}
	for _, n := range counts[min(1, len(counts)):] {
		p := p90(replicaName(n))
		fmt.Fprintf(&b, "\nTarget: %s TTFT p90 within 10%% of %s's (%.2f×) — %s; at least 75%% below round robin (%.0f%% below) — %s\n",
			replicaName(n), replicaName(counts[0]), p/one, verdict(p <= 1.1*one), 100*(1-p/rr), verdict(p <= 0.25*rr))
	}
	for _, name := range names {
		for _, o := range outcomes[name] {
			if o.firstErr != nil {
				fmt.Fprintf(&b, "\nFirst error through %s: %v\n", name, o.firstErr)
				break
			}
		}
	}
	return b.String(), nil
}

package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/quantile"
)

// result is one replay's measurements.
type result struct {
	mode     string
	run      int
	requests []request
	samples  []snapshot
	elapsed  time.Duration

	pendingGroupSeconds float64 // ∫ pending groups dt
	maxPending          int
	pendingAtEnd        int
	maxCheap, maxDear   int32
	failed              int
	overSLO             int     // answered with TTFT over the SLO, or failed
	p50, p90, p99       float64 // TTFT seconds of the answered requests
	overSLOSeconds      float64 // ∫ of the seconds in which some request sent then missed the SLO
	firstErr            error
}

func (r *result) summarize(c config) {
	for i, s := range r.samples {
		if i > 0 {
			r.pendingGroupSeconds += float64(r.samples[i-1].pending) * (s.at - r.samples[i-1].at).Seconds()
		}
		r.maxPending = max(r.maxPending, s.pending)
		r.maxCheap, r.maxDear = max(r.maxCheap, s.cheap), max(r.maxDear, s.dear)
	}
	if n := len(r.samples); n > 0 {
		r.pendingAtEnd = r.samples[n-1].pending
	}
	var ttfts []float64
	missed := map[int]bool{}
	for _, q := range r.requests {
		if q.err != nil {
			r.failed++
			r.overSLO++
			missed[int(q.at/time.Second)] = true
			if r.firstErr == nil {
				r.firstErr = q.err
			}
			continue
		}
		ttfts = append(ttfts, q.ttft.Seconds())
		if q.ttft > c.slo {
			r.overSLO++
			missed[int(q.at/time.Second)] = true
		}
	}
	r.overSLOSeconds = float64(len(missed))
	slices.Sort(ttfts)
	r.p50, r.p90, r.p99 = quantile.NearestRank(ttfts, 0.5), quantile.NearestRank(ttfts, 0.9), quantile.NearestRank(ttfts, 0.99)
}

func (r result) missRate() float64 {
	if len(r.requests) == 0 {
		return math.NaN()
	}
	return float64(r.overSLO) / float64(len(r.requests))
}

// line is the replay's one-line summary for the progress log.
func (r result) line() string {
	s := fmt.Sprintf("%d requests, %d failed, %.1f%% over the SLO (in %.0f s of the run); TTFT p50 %.2f p90 %.2f p99 %.2f s; pending group-seconds %.0f (at most %d at once, %d at the end); replicas at most cheap %d, dear %d",
		len(r.requests), r.failed, 100*r.missRate(), r.overSLOSeconds, r.p50, r.p90, r.p99, r.pendingGroupSeconds, r.maxPending, r.pendingAtEnd, r.maxCheap, r.maxDear)
	if r.firstErr != nil {
		s += fmt.Sprintf("; first error: %v", r.firstErr)
	}
	return s
}

// report is the markdown report: one row per replay, then the medians of each mode and
// their ratios.
func report(c config, results []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "capacitybench: cheap pool %d × 8 GPUs (%s), dear pool %d × 8 GPUs (%s), %d-GPU groups; optimizer max cheap %d, dear %d; "+
		"Poisson %.1f/s for %s, %.1f/s for %s, %.1f/s for %s; %d tokens per answer, engines batch %d; TTFT SLO %s; %d run(s), seed %d. "+
		"Both modes: the shipped defaults (capacity published every 5 s, autoscaler sync 5 s); blind is --placement-aware-scaling=false.\n\n",
		c.cheapNodes, cheapProduct, c.dearNodes, dearProduct, gpusPerGroup, c.cheapMax, c.dearMax,
		c.low, c.lowFor, c.high, c.highFor, c.low, c.lowFor, c.maxTokens, maxBatch, c.slo, c.runs, c.seed)
	b.WriteString("| run | mode | pending group-seconds | most groups pending | pending at end | replicas cheap / dear (most) | requests | failed | over SLO | seconds with a miss | TTFT p50 s | p90 s | p99 s |\n")
	b.WriteString("|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %d | %s | %.0f | %d | %d | %d / %d | %d | %d | %.1f%% | %.0f | %.2f | %.2f | %.2f |\n",
			r.run, r.mode, r.pendingGroupSeconds, r.maxPending, r.pendingAtEnd, r.maxCheap, r.maxDear, len(r.requests), r.failed, 100*r.missRate(), r.overSLOSeconds, r.p50, r.p90, r.p99)
	}
	med := func(mode string, f func(result) float64) float64 {
		var xs []float64
		for _, r := range results {
			if r.mode == mode {
				xs = append(xs, f(r))
			}
		}
		if len(xs) == 0 {
			return math.NaN()
		}
		return quantile.Median(xs)
	}
	metrics := []struct {
		name string
		f    func(result) float64
	}{
		{"pending group-seconds", func(r result) float64 { return r.pendingGroupSeconds }},
		{"requests over the SLO", func(r result) float64 { return r.missRate() }},
		{"seconds with a miss", func(r result) float64 { return r.overSLOSeconds }},
		{"TTFT p90 s", func(r result) float64 { return r.p90 }},
		{"failed requests", func(r result) float64 { return float64(r.failed) }},
	}
	fmt.Fprintf(&b, "\n| median of %d run(s) | %s | %s | %s ÷ %s |\n|---|---:|---:|---:|\n", c.runs, modeAware, modeBlind, modeAware, modeBlind)
	for _, m := range metrics {
		a, bl := med(modeAware, m.f), med(modeBlind, m.f)
		ratio := "–"
		if bl > 0 {
			ratio = fmt.Sprintf("%.2f", a/bl)
		}
		fmt.Fprintf(&b, "| %s | %.3g | %.3g | %s |\n", m.name, a, bl, ratio)
	}
	return b.String()
}

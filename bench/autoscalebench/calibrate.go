package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/quantile"
)

// calibrate loads one replica (no autoscaler) at each of -calibrate's request rates for 3
// simulated minutes with the trace's request mix, and prints what a replica sustains: TTFT
// percentiles, the seconds over the SLO, and the engine's running and waiting requests. It
// is how the default target was chosen.
func calibrate(ctx context.Context, o options, rc runConfig, log *os.File) (*result, error) {
	var rates []float64
	for _, f := range strings.Split(o.calibrate, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("-calibrate: bad rate %q", f)
		}
		rates = append(rates, r)
	}
	rc.sc.min = 1
	var b strings.Builder
	e := rc.ecfg
	fmt.Fprintf(&b, "One replica (max batch %d, prefill %s/token, decode step %s + %s/sequence), prompts %d–%d tokens log-uniform, %d–%d out; 3 simulated minutes per rate, TimeScale %g, SLO TTFT ≤ %s.\n\n",
		e.MaxBatch, e.PrefillPerToken, e.DecodeBase, e.DecodePerSeq, o.promptMin, o.promptMax, o.outMin, o.outMax, rc.timeScale, rc.slo)
	b.WriteString("| requests/s | TTFT p50 s | TTFT p90 s | TTFT p99 s | seconds over SLO | running mean | running p90 | waiting mean | CPU cores |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, rate := range rates {
		tc := o.traceConfig()
		tc.length, tc.baseLow, tc.baseHigh, tc.bursts, tc.fixedBursts, tc.noBaseWobble = 3*time.Minute, rate, rate, 0, nil, true
		tr := newTrace(tc)
		out, err := replay(ctx, rc, nil, tr, nameFixed, 60+i%150)
		if err != nil {
			return nil, err
		}
		s := summarize(out, tr, rc.slo)
		var running, waiting []int
		for _, l := range out.load[min(30, len(out.load)):] { // after 30 s of warm-up
			running = append(running, l.running)
			waiting = append(waiting, l.waiting)
		}
		fmt.Fprintf(&b, "| %.2f | %s | %s | %s | %d of %d | %.1f | %d | %.1f | %.2f |\n", rate, secs(s.p50), secs(s.p90), secs(s.p99),
			s.violationSeconds, int(tc.length.Seconds()), mean(running), quantile.Of(running, 0.9), mean(waiting), s.cpuCores)
		if log != nil {
			fmt.Fprintf(log, "%s rate %.2f done\n", time.Now().Format("15:04:05"), rate)
		}
	}
	return &result{text: b.String()}, nil
}

func mean(xs []int) float64 {
	if len(xs) == 0 {
		return 0
	}
	t := 0
	for _, x := range xs {
		t += x
	}
	return float64(t) / float64(len(xs))
}

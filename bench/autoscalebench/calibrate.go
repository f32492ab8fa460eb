package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/berth-sh/berth/bench/internal/figure"
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
	c := &calibration{table: figure.NewTable("requests_per_second", "ttft_p50_seconds", "ttft_p90_seconds", "ttft_p99_seconds",
		"seconds_over_slo", "seconds", "running_mean", "running_p90", "waiting_mean", "cpu_cores"), slo: rc.slo}
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
		c.table.Add(rate, s.p50, s.p90, s.p99, s.violationSeconds, int(tc.length.Seconds()), mean(running), quantile.Of(running, 0.9), mean(waiting), s.cpuCores)
		c.rates = append(c.rates, rate)
		c.p50, c.p90, c.p99 = append(c.p50, s.p50.Seconds()), append(c.p90, s.p90.Seconds()), append(c.p99, s.p99.Seconds())
		if log != nil {
			fmt.Fprintf(log, "%s rate %.2f done\n", time.Now().Format("15:04:05"), rate)
		}
	}
	return &result{text: b.String(), calibration: c}, nil
}

// calibration is what -calibrate measured per rate, for its figure.
type calibration struct {
	table         *figure.Table
	slo           time.Duration
	rates         []float64
	p50, p90, p99 []float64 // seconds
}

// write writes calibrate.svg (TTFT quantiles against the request rate, beside the SLO)
// and calibrate.csv (the table's numbers) into dir.
func (c *calibration) write(dir string) error {
	slo := figure.Series{Name: "SLO", X: []float64{c.rates[0], c.rates[len(c.rates)-1]}, Y: []float64{c.slo.Seconds(), c.slo.Seconds()}}
	if err := figure.Save(filepath.Join(dir, "calibrate.svg"), figure.Line{
		Title:  "One replica: TTFT against the request rate it is sent",
		XLabel: "requests per simulated second",
		YLabel: "TTFT, seconds (log scale)",
		LogY:   true,
		Series: []figure.Series{
			{Name: "p50", X: c.rates, Y: c.p50},
			{Name: "p90", X: c.rates, Y: c.p90},
			{Name: "p99", X: c.rates, Y: c.p99},
			slo,
		},
	}); err != nil {
		return err
	}
	return c.table.WriteFile(filepath.Join(dir, "calibrate.csv"))
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

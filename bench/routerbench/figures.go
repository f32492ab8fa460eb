package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/berth-sh/berth/bench/internal/figure"
	"github.com/berth-sh/berth/internal/quantile"
)

// recorder keeps the raw samples behind the tables for -figures: every open-loop latency
// of the overhead experiment, every closed-loop max rate, every request's TTFT of the
// quality experiments, and the later experiments' outcomes. A nil recorder records nothing.
type recorder struct {
	mu sync.Mutex
	// Overhead: per path (in the order first seen), the latencies (ms) of every run's open
	// loop pooled, with each run's quantiles in the CSV; the open-loop rates; the closed-loop
	// max rates.
	overhead *cdfSet
	openRate []float64
	rates    *figure.Table
	// Quality: per router configuration, every TTFT (simulated ms) pooled.
	quality *cdfSet
	// Replicas: per configuration (router replicas, or round robin), every TTFT pooled.
	replicas *cdfSet
	// Tenants: per configuration, every TTFT (ms) of the quiet tenant; the CSV one row per
	// request (there are few).
	tenants *cdfSet
	// P/D pairing: every request's TTFT per pairing; the CSV has every request.
	pd *cdfSet
	// Endpoint picker: decision latency and TTFT per picker; the CSVs their quantiles.
	eppDecision, eppTTFT *cdfSet
	// Proxy CPU: each run's µs per request of the proxy's own processes, per path.
	cpu *cdfSet
	// Scale-down: each run's TTFT p90 per rule for the bars; the CSV each run's outcome.
	scaledown *cdfSet
}

func newRecorder() *recorder {
	return &recorder{
		overhead:    newCDFSet("run", "path", "open_loop_requests_per_second", "requests", "quantile", "latency_ms"),
		rates:       figure.NewTable("run", "path", "closed_loop_max_requests_per_second"),
		quality:     newCDFSet("run", "router", "requests", "quantile", "ttft_simulated_ms"),
		replicas:    newCDFSet("run", "routers", "requests", "quantile", "ttft_simulated_ms"),
		tenants:     newCDFSet("configuration", "quiet_ttft_ms"),
		pd:          newCDFSet("pairing", "level_shared", "ttft_simulated_ms"),
		eppDecision: newCDFSet("picker", "requests", "quantile", "decision_ms"),
		eppTTFT:     newCDFSet("picker", "requests", "quantile", "ttft_simulated_ms"),
		cpu:         newCDFSet("run", "path", "proxy_cpu_us_per_request"),
		scaledown: newCDFSet("run", "rule", "removed", "group_costs", "group_requests_before", "ttft_p50_simulated_ms", "ttft_p90_simulated_ms", "ttft_p99_simulated_ms",
			"prefix_hit_rate_after", "requests", "errors"),
	}
}

// tenantsRun records every quiet-tenant TTFT (ms) of one tenants configuration.
func (r *recorder) tenantsRun(name string, ttft []float64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tenants.add(name, ttft)
	for _, v := range ttft {
		r.tenants.tab.Add(name, v)
	}
}

// replicasRun records every TTFT (simulated ms) of one replicas configuration's run.
func (r *recorder) replicasRun(run int, name string, ttft []float64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replicas.addQuantiles(name, ttft, run+1, name)
}

// maxRate records one path's closed-loop max requests/s of one run.
func (r *recorder) maxRate(run int, path string, rps float64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rates.Add(run+1, path, rps)
}

// openLoop records one path's open-loop latencies of one run at rate.
func (r *recorder) openLoop(run int, path string, rate float64, lat []time.Duration) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	vals := make([]float64, len(lat))
	for i, l := range lat {
		vals[i] = ms(l)
	}
	r.overhead.addQuantiles(path, vals, run+1, path, rate)
	r.openRate = append(r.openRate, rate)
}

// proxyCPU records one path's proxy CPU per request (µs) in one run's closed loop.
func (r *recorder) proxyCPU(run int, path string, us float64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cpu.add(path, []float64{us})
	r.cpu.tab.Add(run+1, path, us)
}

// qualityRun records every TTFT (simulated ms) of one router configuration's run.
func (r *recorder) qualityRun(run int, router string, ttft []float64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.quality.addQuantiles(router, ttft, run+1, router)
}

// cdfPoints are the quantiles the CSVs keep of a run's samples: every half percent, then
// 99.9%, 99.99% and the maximum. A run has tens of thousands of latencies; one row each
// would make CSVs of megabytes, too large to sit in the repository beside the figures.
func cdfPoints(vals []float64) [][2]float64 {
	if len(vals) == 0 {
		return nil
	}
	sorted := slices.Clone(vals)
	slices.Sort(sorted)
	var out [][2]float64
	for k := 0; k < 200; k++ {
		q := float64(k) / 200
		out = append(out, [2]float64{q, quantile.NearestRank(sorted, q)})
	}
	for _, q := range []float64{0.999, 0.9999, 1} {
		out = append(out, [2]float64{q, quantile.NearestRank(sorted, q)})
	}
	return out
}

// write writes what was recorded into dir: overhead-latency.svg (the CDF of each path's
// open-loop latency, every run pooled) with overhead-latency.csv (each run's quantiles),
// overhead-max.csv and overhead-cpu.svg/csv, quality-ttft.svg with quality-ttft.csv,
// replicas-ttft.svg with replicas-ttft.csv, tenants-ttft.svg with tenants-ttft.csv (every
// quiet request's TTFT), the pdtopology, epp-decision and epp-ttft figures with their CSVs,
// and the scale-down's (writeScaledown). An experiment that did not run writes nothing, so
// one directory can collect several runs' figures.
func (r *recorder) write(dir string) error {
	for _, c := range []struct {
		set                     *cdfSet
		svg, csv, title, xlabel string
	}{
		{r.overhead, "overhead-latency.svg", "overhead-latency.csv", fmt.Sprintf("Latency at a fixed open-loop rate (%s), every path", rateList(r.openRate)), "latency, ms (log scale)"},
		{r.quality, "quality-ttft.svg", "quality-ttft.csv", "Time to first token on the shared-prefix trace, per router policy", "TTFT, simulated ms (log scale)"},
		{r.replicas, "replicas-ttft.svg", "replicas-ttft.csv", "Time to first token on the shared-prefix trace through 1, 2 and 4 router replicas sharing one Redis", "TTFT, simulated ms (log scale)"},
		{r.tenants, "tenants-ttft.svg", "tenants-ttft.csv", "The quiet tenant's time to first token, alone and beside a noisy tenant", "TTFT, ms (log scale)"},
		{r.pd, "pdtopology-ttft.svg", "pdtopology.csv", "Time to first token with prefill/decode pairs chosen by topology or by load alone", "TTFT, simulated ms (log scale)"},
		{r.eppDecision, "epp-decision.svg", "epp-decision.csv", "Endpoint picker decision latency at the data plane, at a fixed open-loop rate", "decision, ms (log scale)"},
		{r.eppTTFT, "epp-ttft.svg", "epp-ttft.csv", "Time to first token on the shared-prefix trace through each endpoint picker", "TTFT, simulated ms (log scale)"},
	} {
		if err := c.set.save(dir, c.svg, c.csv, c.title, c.xlabel); err != nil {
			return err
		}
	}
	if len(r.overhead.names) > 0 {
		if err := r.rates.WriteFile(filepath.Join(dir, "overhead-max.csv")); err != nil {
			return err
		}
	}
	if len(r.cpu.names) > 0 {
		s := figure.BarSeries{Name: "median of the runs"}
		for _, p := range r.cpu.names {
			s.Values = append(s.Values, quantile.Median(r.cpu.vals[p]))
		}
		if err := figure.Save(filepath.Join(dir, "overhead-cpu.svg"), figure.Bars{
			Title:      "CPU per request of the proxy's own processes, in the closed loop",
			YLabel:     "µs per request",
			Categories: r.cpu.names,
			Series:     []figure.BarSeries{s},
		}); err != nil {
			return err
		}
		if err := r.cpu.tab.WriteFile(filepath.Join(dir, "overhead-cpu.csv")); err != nil {
			return err
		}
	}
	return r.writeScaledown(dir)
}

// rateList names the open-loop rate: one rate per path and run, usually a few distinct ones.
func rateList(rates []float64) string {
	seen := map[int]bool{}
	s := ""
	for _, v := range rates {
		k := int(v + 0.5)
		if seen[k] {
			continue
		}
		seen[k] = true
		if s != "" {
			s += ", "
		}
		s += fmt.Sprint(k)
	}
	return s + " requests/s"
}

// cdfSet keeps, per name in the order first seen, every sample behind one CDF figure, and
// the CSV rows written beside it.
type cdfSet struct {
	names []string
	vals  map[string][]float64
	tab   *figure.Table
}

func newCDFSet(header ...string) *cdfSet {
	return &cdfSet{vals: map[string][]float64{}, tab: figure.NewTable(header...)}
}

func (s *cdfSet) add(name string, v []float64) {
	if _, ok := s.vals[name]; !ok {
		s.names = append(s.names, name)
	}
	s.vals[name] = append(s.vals[name], v...)
}

// addQuantiles adds the samples and, to the CSV, their quantiles (cdfPoints) as rows of
// lead..., count, quantile, value; with no lead, the row starts with name.
func (s *cdfSet) addQuantiles(name string, v []float64, lead ...any) {
	s.add(name, v)
	if len(lead) == 0 {
		lead = []any{name}
	}
	for _, q := range cdfPoints(v) {
		s.tab.Add(append(slices.Clone(lead), len(v), q[0], q[1])...)
	}
}

// save writes the CDF figure and its CSV, if anything was recorded.
func (s *cdfSet) save(dir, svg, csv, title, xlabel string) error {
	if len(s.names) == 0 {
		return nil
	}
	var samples []figure.Sample
	for _, n := range s.names {
		samples = append(samples, figure.Sample{Name: n, Values: s.vals[n]})
	}
	if err := figure.Save(filepath.Join(dir, svg), figure.CDF{Title: title, XLabel: xlabel, LogX: true, Samples: samples}); err != nil {
		return err
	}
	return s.tab.WriteFile(filepath.Join(dir, csv))
}

// pdRun records one pairing's TTFTs (simulated ms) and every request's row (level shared,
// TTFT).
func (r *recorder) pdRun(name string, ttft []float64, rows [][2]string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pd.add(name, ttft)
	for _, row := range rows {
		r.pd.tab.Add(name, row[0], row[1])
	}
}

// eppLatency records one picker's decision latencies (ms, at the data plane).
func (r *recorder) eppLatency(picker string, samples []eppSample) {
	if r == nil {
		return
	}
	v, _, _ := sortedOK(samples, func(x eppSample) float64 { return ms(x.decision) })
	r.mu.Lock()
	defer r.mu.Unlock()
	r.eppDecision.addQuantiles(picker, v)
}

// eppQuality records one picker's TTFTs on the shared-prefix trace (simulated ms).
func (r *recorder) eppQuality(picker string, samples []eppSample, scale float64) {
	if r == nil {
		return
	}
	v, _, _ := sortedOK(samples, func(x eppSample) float64 { return float64(x.ttft) / scale / float64(time.Millisecond) })
	r.mu.Lock()
	defer r.mu.Unlock()
	r.eppTTFT.addQuantiles(picker, v)
}

// scaledownRun records one rule's outcome in one run.
func (r *recorder) scaledownRun(run int, rule string, o scaledownOutcome) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scaledown.add(rule, []float64{o.p90})
	r.scaledown.tab.Add(run, rule, o.victim, o.costs, o.served, o.p50, o.p90, o.p99, o.hitRate, o.inWindow, o.errs)
}

// writeScaledown writes scaledown-p90.svg (each run's TTFT p90 after the scale-down, per
// rule) with scaledown-runs.csv.
func (r *recorder) writeScaledown(dir string) error {
	if len(r.scaledown.names) == 0 {
		return nil
	}
	var categories []string
	for i := range r.scaledown.vals[r.scaledown.names[0]] {
		categories = append(categories, fmt.Sprintf("run %d", i))
	}
	var series []figure.BarSeries
	for _, rule := range r.scaledown.names {
		series = append(series, figure.BarSeries{Name: rule, Values: r.scaledown.vals[rule]})
	}
	if err := figure.Save(filepath.Join(dir, "scaledown-p90.svg"), figure.Bars{
		Title:      "TTFT p90 in the minute after one group is removed, per run and rule",
		YLabel:     "TTFT p90, simulated ms",
		Categories: categories,
		Series:     series,
	}); err != nil {
		return err
	}
	return r.scaledown.tab.WriteFile(filepath.Join(dir, "scaledown-runs.csv"))
}

package main

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/berth-sh/berth/bench/internal/figure"
	"github.com/berth-sh/berth/internal/quantile"
)

// writeFigures writes throughput.svg, the median pods/s of each mode per workload, and
// throughput.csv, every run's pods/s, into dir.
func (t *throughputResult) writeFigures(dir string) error {
	tab := figure.NewTable("workload", "pods", "mode", "run", "pods_per_second")
	var categories []string
	for _, w := range t.workloads {
		categories = append(categories, shortName(w))
		for _, m := range t.modes {
			for r, v := range t.rates[w.name][m] {
				tab.Add(w.name, w.gangs*w.podsPerGroup, string(m), r+1, v)
			}
		}
	}
	if err := tab.WriteFile(filepath.Join(dir, "throughput.csv")); err != nil {
		return err
	}
	var series []figure.BarSeries
	for _, m := range allModes {
		if !slices.Contains(t.modes, m) {
			continue
		}
		s := figure.BarSeries{Name: string(m)}
		for _, w := range t.workloads {
			v := t.median(w.name, m)
			if v == 0 {
				v = math.NaN()
			}
			s.Values = append(s.Values, v)
		}
		series = append(series, s)
	}
	return figure.Save(filepath.Join(dir, "throughput.svg"), figure.Bars{
		Title:      "Gang scheduling throughput (median of " + plural(t.runs, "run") + ")",
		YLabel:     "pods bound per second",
		Categories: categories,
		Series:     series,
	})
}

// shortName is a workload's label under its bars: "1000 gangs × 3" rather than the
// upstream name, which is too long to sit under a group of bars.
func shortName(w workload) string {
	if strings.HasPrefix(w.name, "5000Nodes_") {
		return fmt.Sprintf("%s × %d", plural(w.gangs, "gang"), w.podsPerGroup)
	}
	return w.name
}

// contentionFigures holds every contention run, per pool size and mode, for
// writeContentionFigures.
type contentionFigures struct {
	sizes   []int
	modes   []mode
	results map[int]map[mode][]contentionResult
}

// write writes contention.svg, the median GPU utilisation once settled per pool and mode,
// and contention.csv, every run's figures, into dir.
func (c *contentionFigures) write(dir string) error {
	tab := figure.NewTable("pool_nodes", "mode", "run", "util_stop", "util_settled", "gangs_min_placed", "gangs_created",
		"partial_groups", "partial_by_pod_count", "settle_seconds", "settle_capped", "starved", "bound_pods", "pods")
	var categories []string
	for _, n := range c.sizes {
		categories = append(categories, fmt.Sprintf("%d × %d GPUs", n, gpusPerNode))
		for _, m := range c.modes {
			for r, res := range c.results[n][m] {
				tab.Add(n, string(m), r+1, res.utilStop, res.utilSettled, res.minPlaced, res.created,
					res.partial, res.partialByCount, res.settle, res.capped, res.starved, res.boundPods, res.pods)
			}
		}
	}
	if err := tab.WriteFile(filepath.Join(dir, "contention.csv")); err != nil {
		return err
	}
	var series []figure.BarSeries
	for _, m := range c.modes {
		s := figure.BarSeries{Name: string(m)}
		for _, n := range c.sizes {
			s.Values = append(s.Values, 100*medianOf(c.results[n][m], func(r contentionResult) float64 { return r.utilSettled }))
		}
		series = append(series, s)
	}
	return figure.Save(filepath.Join(dir, "contention.svg"), figure.Bars{
		Title:      "GPU contention: GPUs allocated once settled (median)",
		YLabel:     "% of the pool's GPUs",
		Categories: categories,
		Series:     series,
	})
}

// preemptionFigures holds every preemption run, per pool size and mode, with the fewest
// gangs that suffice per pool.
type preemptionFigures struct {
	sizes   []int
	modes   []mode
	fewest  map[int]int
	results map[int]map[mode][]preemptionResult
}

// write writes preemption.svg (median time until the preemptor is bound, per pool and
// mode), preemption-evicted.svg (median gangs evicted beside the fewest that suffice) and
// preemption.csv (every run) into dir.
func (p *preemptionFigures) write(dir string) error {
	tab := figure.NewTable("pool_nodes", "mode", "run", "bound", "time_to_bound_seconds", "gangs_evicted", "fewest_sufficient", "pods_evicted", "partly_evicted_gangs")
	var categories []string
	for _, n := range p.sizes {
		categories = append(categories, fmt.Sprintf("%d × 8 GPUs", n))
		for _, m := range p.modes {
			for r, res := range p.results[n][m] {
				tab.Add(n, string(m), r+1, res.bound, res.elapsed, res.evicted, p.fewest[n], res.pods, res.partial)
			}
		}
	}
	if err := tab.WriteFile(filepath.Join(dir, "preemption.csv")); err != nil {
		return err
	}
	var times, evicted []figure.BarSeries
	for _, m := range p.modes {
		t := figure.BarSeries{Name: string(m)}
		e := figure.BarSeries{Name: string(m)}
		for _, n := range p.sizes {
			rs := p.results[n][m]
			var bound []preemptionResult
			for _, r := range rs {
				if r.bound {
					bound = append(bound, r)
				}
			}
			t.Values = append(t.Values, medianOf(bound, func(r preemptionResult) float64 { return r.elapsed.Seconds() }))
			e.Values = append(e.Values, medianOf(rs, func(r preemptionResult) float64 { return float64(r.evicted) }))
		}
		times = append(times, t)
		evicted = append(evicted, e)
	}
	fewest := figure.BarSeries{Name: "fewest sufficient"}
	for _, n := range p.sizes {
		fewest.Values = append(fewest.Values, float64(p.fewest[n]))
	}
	if err := figure.Save(filepath.Join(dir, "preemption.svg"), figure.Bars{
		Title:      "Preemption: time until the high-priority gang is bound (median)",
		YLabel:     "seconds",
		Categories: categories,
		Series:     times,
	}); err != nil {
		return err
	}
	return figure.Save(filepath.Join(dir, "preemption-evicted.svg"), figure.Bars{
		Title:      "Preemption: gangs evicted (median) beside the fewest that suffice",
		YLabel:     "gangs",
		Categories: categories,
		Series:     append(evicted, fewest),
	})
}

// medianOf is the median of f over rs, NaN (no bar) for none.
func medianOf[R any](rs []R, f func(R) float64) float64 {
	if len(rs) == 0 {
		return math.NaN()
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return quantile.Median(v)
}

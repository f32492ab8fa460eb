package main

import (
	"math"
	"path/filepath"
	"time"

	"github.com/berth-sh/berth/bench/internal/figure"
)

// writeFigures writes run 1's figures into dir: replicas.svg (each autoscaler's replicas
// and the trace's request rate per simulated second), slo.svg (each autoscaler's p90 TTFT
// per second against the SLO, a 10-second rolling maximum so that the plot stays legible),
// and timeline.csv with every second's raw numbers.
func writeFigures(dir string, tr *trace, ss []summary, slo time.Duration) error {
	seconds := int(math.Ceil(tr.cfg.length.Seconds()))
	rate := make([]float64, seconds)
	for _, r := range tr.reqs {
		if sec := int(r.at / time.Second); sec < seconds {
			rate[sec]++
		}
	}
	header := []string{"second", "requests"}
	for _, s := range ss {
		header = append(header, s.name+"_replicas", s.name+"_ttft_p90_s")
	}
	table := figure.NewTable(header...)
	xs := make([]float64, seconds)
	for sec := range seconds {
		xs[sec] = float64(sec) / 60
		row := []any{sec, rate[sec]}
		for _, s := range ss {
			row = append(row, s.replicasPerSecond[sec], s.p90PerSecond[sec])
		}
		table.Add(row...)
	}
	replicas := figure.Line{Title: "Replicas over the trace (run 1)", XLabel: "simulated minutes", YLabel: "replicas, requests/s (10 s mean)"}
	replicas.Series = append(replicas.Series, figure.Series{Name: "requests/s", X: xs, Y: rolling(rate, 10, meanOf)})
	ttft := figure.Line{Title: "p90 TTFT per second, 10 s rolling max (run 1)", XLabel: "simulated minutes", YLabel: "seconds", LogY: true}
	for _, s := range ss {
		ys := make([]float64, seconds)
		for i, n := range s.replicasPerSecond {
			ys[i] = float64(n)
		}
		replicas.Series = append(replicas.Series, figure.Series{Name: s.name, X: xs, Y: ys})
		// Failed requests and empty seconds are left out of the plot (the CSV keeps them).
		p := make([]float64, seconds)
		for i, v := range s.p90PerSecond {
			p[i] = v
			if math.IsInf(v, 0) {
				p[i] = math.NaN()
			}
		}
		ttft.Series = append(ttft.Series, figure.Series{Name: s.name, X: xs, Y: rolling(p, 10, maxOf)})
	}
	sloLine := make([]float64, seconds)
	for i := range sloLine {
		sloLine[i] = slo.Seconds()
	}
	ttft.Series = append(ttft.Series, figure.Series{Name: "SLO", X: xs, Y: sloLine})
	if err := figure.Save(filepath.Join(dir, "replicas.svg"), replicas); err != nil {
		return err
	}
	if err := figure.Save(filepath.Join(dir, "slo.svg"), ttft); err != nil {
		return err
	}
	return table.WriteFile(filepath.Join(dir, "timeline.csv"))
}

// rolling applies f to each window of w values ending at i (NaNs skipped; NaN when all are).
func rolling(xs []float64, w int, f func([]float64) float64) []float64 {
	out := make([]float64, len(xs))
	for i := range xs {
		var win []float64
		for _, v := range xs[max(0, i-w+1) : i+1] {
			if !math.IsNaN(v) {
				win = append(win, v)
			}
		}
		out[i] = math.NaN()
		if len(win) > 0 {
			out[i] = f(win)
		}
	}
	return out
}

func meanOf(xs []float64) float64 {
	var sum float64
	for _, v := range xs {
		sum += v
	}
	return sum / float64(len(xs))
}

func maxOf(xs []float64) float64 {
	m := xs[0]
	for _, v := range xs[1:] {
		m = max(m, v)
	}
	return m
}

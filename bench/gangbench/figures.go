package main

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/berth-sh/berth/bench/internal/figure"
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

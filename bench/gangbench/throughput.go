package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/berth-sh/berth/internal/quantile"
)

// throughputResult is what the upstream workloads measured: pods bound per second of every
// run of every mode, in the order the workloads ran.
type throughputResult struct {
	modes     []mode
	runs      int
	workloads []workload
	// rates[workload name][mode] are the runs' pods/s, in run order.
	rates map[string]map[mode][]float64
	// ratios[workload name] are berth/native of each run in which both ran.
	ratios map[string][]float64
}

// throughput runs each workload runs times in each mode, the modes interleaved and the
// first one rotating from run to run. cpuProfile, when set, profiles each workload's first
// berth run.
func (b *bench) throughput(ctx context.Context, ws []workload, modes []mode, runs int, cpuProfile string) (*throughputResult, error) {
	res := &throughputResult{modes: modes, runs: runs, workloads: ws,
		rates: map[string]map[mode][]float64{}, ratios: map[string][]float64{}}
	for _, w := range ws {
		res.rates[w.name] = map[mode][]float64{}
		for r := 0; r < runs; r++ {
			this := map[mode]float64{}
			for _, m := range rotate(modes, r) {
				profile := m == berth && r == 0 && cpuProfile != ""
				if profile {
					f, err := os.Create(cpuProfile)
					if err != nil {
						return nil, err
					}
					if err := pprof.StartCPUProfile(f); err != nil {
						return nil, err
					}
				}
				podsPerSec, err := b.run(ctx, w, m)
				if profile {
					pprof.StopCPUProfile()
				}
				if err != nil {
					return nil, err
				}
				this[m] = podsPerSec
				res.rates[w.name][m] = append(res.rates[w.name][m], podsPerSec)
				fmt.Fprintf(os.Stderr, "%-42s run %d/%d %-14s %8.1f pods/s\n", w.name, r+1, runs, m, podsPerSec)
			}
			if this[native] > 0 && this[berth] > 0 {
				res.ratios[w.name] = append(res.ratios[w.name], this[berth]/this[native])
			}
		}
	}
	return res, nil
}

// median is a workload's median pods/s in a mode, 0 when the mode did not run.
func (t *throughputResult) median(w string, m mode) float64 {
	if v := t.rates[w][m]; len(v) > 0 {
		return quantile.Median(v)
	}
	return 0
}

// table is the markdown table: medians per mode, berth's ratios to native, to its own
// no-gang ceiling and to the default profile without gangs, and the per-run berth/native range.
func (t *throughputResult) table(nodes int) string {
	var rows []string
	for _, w := range t.workloads {
		med := func(m mode) float64 { return t.median(w.name, m) }
		rangeCell := "–"
		if rs := t.ratios[w.name]; len(rs) > 0 {
			rangeCell = fmt.Sprintf("%.2f–%.2f", slices.Min(rs), slices.Max(rs))
		}
		rows = append(rows, fmt.Sprintf("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |", w.name, w.gangs*w.podsPerGroup,
			num(med(native), 0), num(med(berth), 0), num(med(berthNoGang), 0), num(med(defaultNoGang), 0),
			ratio(med(berth), med(native)), ratio(med(berth), med(berthNoGang)), ratio(med(berth), med(defaultNoGang)), rangeCell))
	}
	return fmt.Sprintf("Median of %s per mode (modes interleaved, the starting mode rotating from run to run), %d nodes; "+
		"every scheduler at the same client QPS and burst. berth-nogang is berth-scheduler's shipped profile on the same pods without PodGroups (the ceiling); "+
		"default-nogang is kube-scheduler's default profile without gangs.\n\n", plural(t.runs, "run"), nodes) +
		"| workload | pods | native pods/s | berth pods/s | berth-nogang pods/s | default-nogang pods/s | berth/native | berth/berth-nogang | berth/default-nogang | berth/native min–max |\n" +
		"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" + strings.Join(rows, "\n") + "\n"
}

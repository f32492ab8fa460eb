// Command capacitybench measures placement-aware scale-up against scaling blind, under a
// capacity squeeze, with the whole of Berth in one process (berth-scheduler publishing the
// groups that fit, berth-controller's autoscaler, the simulated kubelet and engines, and
// berth-router) on a fresh control plane per replay.
//
// The cluster has two GPU pools: a cheap one that holds few 4-GPU groups and a dear one
// with room. One ModelServing per pool serves the same model behind one ModelServer; a
// Kthena optimizer binding sizes both by the engines' running requests, cheapest first. A
// Poisson load steps from low to high and back. Scaling blind (berth-controller's
// --placement-aware-scaling=false, what every other autoscaler does), the optimizer gives
// the cheap target replicas its pool cannot place: they wait unplaced and the load stays on
// the groups that landed. Placement-aware, the cheap target is capped at what fits and the
// dear target takes the rest.
//
// Both modes run in the same invocation with the same settings (the shipped defaults:
// autoscaler sync 5 s, capacity publish period 5 s), alternating which goes first over
// -runs. Measured: pending group-seconds (ServingGroups with a pod not bound, integrated
// over the run), TTFT against the SLO, and failed requests.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// config is one invocation's settings.
type config struct {
	runs       int
	modes      []string
	cheapNodes int // nodes of the cheap pool (8 GPUs each: two 4-GPU groups)
	dearNodes  int
	cheapMax   int // the optimizer's maxReplicas of the cheap target
	dearMax    int
	low, high  float64       // requests per second in the low and high phases
	lowFor     time.Duration // each low phase (one before, one after the high one)
	highFor    time.Duration
	slo        time.Duration // TTFT SLO
	maxTokens  int64
	seed       uint64
	figures    string
	out        string
	log        io.Writer
}

const (
	modeAware = "aware" // berth-controller as shipped: placement-aware scale-up
	modeBlind = "blind" // --placement-aware-scaling=false
)

func defaults() config {
	return config{runs: 1, modes: []string{modeAware, modeBlind}, cheapNodes: 1, dearNodes: 2, cheapMax: 8, dearMax: 4,
		low: 1, high: 6, lowFor: 30 * time.Second, highFor: 2 * time.Minute, slo: time.Second, maxTokens: 200, seed: 1, log: os.Stderr}
}

func main() {
	c := defaults()
	flag.IntVar(&c.runs, "runs", c.runs, "runs; each replays the load once per mode, the order alternating; the summary gives medians")
	flag.IntVar(&c.cheapNodes, "cheap-nodes", c.cheapNodes, "8-GPU nodes in the cheap pool (each holds two groups)")
	flag.IntVar(&c.dearNodes, "dear-nodes", c.dearNodes, "8-GPU nodes in the dear pool")
	flag.IntVar(&c.cheapMax, "cheap-max", c.cheapMax, "maxReplicas of the cheap target")
	flag.IntVar(&c.dearMax, "dear-max", c.dearMax, "maxReplicas of the dear target")
	flag.Float64Var(&c.low, "low", c.low, "requests per second in the low phases")
	flag.Float64Var(&c.high, "high", c.high, "requests per second in the high phase")
	flag.DurationVar(&c.lowFor, "low-for", c.lowFor, "length of each low phase (one before the high phase, one after)")
	flag.DurationVar(&c.highFor, "high-for", c.highFor, "length of the high phase")
	flag.DurationVar(&c.slo, "slo", c.slo, "TTFT SLO")
	flag.Int64Var(&c.maxTokens, "max-tokens", c.maxTokens, "tokens generated per request (about 9 ms each in the engine)")
	flag.Uint64Var(&c.seed, "seed", c.seed, "seed of the arrivals (run r uses seed+r)")
	flag.StringVar(&c.figures, "figures", "", "write the figures (SVG) and raw numbers (CSV) of run 1 into this directory")
	flag.StringVar(&c.out, "out", "", "also write the report to this file")
	flag.Parse()
	klogQuiet()
	results, err := runAll(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "capacitybench:", err)
		os.Exit(1)
	}
	text := report(c, results)
	fmt.Print(text)
	if c.out != "" {
		must(os.MkdirAll(filepath.Dir(c.out), 0o755))
		must(os.WriteFile(c.out, []byte(text), 0o644))
	}
	if c.figures != "" {
		must(writeFigures(c.figures, c, results))
	}
}

// runAll replays the load once per mode per run, the first mode alternating between runs
// so that neither always runs on a cooler machine.
func runAll(c config) ([]result, error) {
	var results []result
	for run := range c.runs {
		modes := c.modes
		if run%2 == 1 {
			modes = []string{c.modes[len(c.modes)-1]}
			modes = append(modes, c.modes[:len(c.modes)-1]...)
		}
		for _, mode := range modes {
			fmt.Fprintf(c.log, "%s run %d, %s\n", time.Now().Format("15:04:05"), run+1, mode)
			r, err := replay(c, run, mode)
			if err != nil {
				return nil, fmt.Errorf("run %d, %s: %w", run+1, mode, err)
			}
			fmt.Fprintf(c.log, "  %s\n", r.line())
			results = append(results, r)
		}
	}
	return results, nil
}

// klogQuiet discards the components' logs (klog, and controller-runtime's through it): a
// replay's thousands of lines would bury the report.
func klogQuiet() {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	ctrllog.SetLogger(klog.Background())
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "capacitybench:", err)
		os.Exit(1)
	}
}

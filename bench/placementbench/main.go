// Command placementbench measures placement quality: where berth-scheduler (the shipped
// profile, manifests/scheduler/config.yaml) puts a stream of GPU groups on a two-tier
// network fabric, beside kube-scheduler's default profile given the same pods.
//
// The fabric (default 4 spines × 8 leaves × 16 nodes of 8 GPUs) exists as node labels
// (network.berth.sh/leaf, network.berth.sh/spine) and as Volcano HyperNodes (tier 1 "leaf",
// tier 2 "spine"). The stream is deterministic (-seed): groups of 1–8 pods, every pod of a
// group asking the same 1, 2, 4 or 8 GPUs. For berth each group is a Volcano PodGroup
// (minMember = its pods, networkTopology soft within tier 1); the default scheduler gets the
// same pods with no PodGroup.
//
// Each scheduler runs alone on the empty fabric. Groups are fed one at a time, in stream
// order: create the pods, wait until each is bound or reported unschedulable. A group not
// bound whole is withdrawn (its pods deleted). The run records the state at the first group
// that could not be placed, then feeds on until a group of whole-node pods cannot be placed.
// With -fabric nvl72 the fabric is GB200 NVL72 racks (NVLink domains of 18 nodes × 4 GPUs),
// the stream tensor-parallel groups of 4..72 GPUs in pods of 4, and berth's PodGroups ask
// for one NVLink domain (hard); -dra gives the nodes DRA GPUs that pods claim. Feeding goes
// on past the first failure, counting the groups a scheduler failed although the bench's fit
// check (enough free nodes in one domain) places them.
//
// See bench/README.md, "Placement quality".
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/pkg/sim"
)

// options are the bench's settings, from the flags.
type options struct {
	fabric    *fabric
	seed      uint64
	repeat    int
	weights   string
	maxPods   int
	groupPods string // pods per group by weight; empty: 1..maxPods uniform
	maxGroups int
	modes     []mode
	timeout   time.Duration
	stopAfter int
}

func main() {
	fabricName := flag.String("fabric", "leafspine", "leafspine: spines × leaves × nodes of H100s; nvl72: GB200 NVL72 racks, each rack a leaf and one NVLink domain "+
		"of 18 nodes × 4 GPUs (2 spines × 4 racks unless -spines, -leaves say otherwise), a stream of tensor-parallel groups of 4..72 GPUs "+
		"in pods of 4, berth's groups asking for one NVLink domain (hard)")
	dra := flag.Bool("dra", false, "nodes publish their GPUs through the simulated gpu.nvidia.com DRA driver; pods claim them with a ResourceClaimTemplate")
	spines := flag.Int("spines", 4, "spine switches")
	leaves := flag.Int("leaves", 8, "leaf switches per spine (racks per spine with -fabric nvl72)")
	nodesPerLeaf := flag.Int("nodes-per-leaf", 16, "nodes per leaf switch")
	gpusPerNode := flag.Int("gpus-per-node", 8, "GPUs per node (a pod of this many GPUs takes a whole node)")
	flag.StringVar(&nodeCPU, "node-cpu", nodeCPU, "CPU of each node (pods ask for 500m)")
	flag.StringVar(&nodeMemory, "node-memory", nodeMemory, "memory of each node (pods ask for 1Gi)")
	seed := flag.Uint64("seed", 1, "seed of the group stream")
	repeat := flag.Int("repeat", 3, "run each scheduler on this many streams, seeds seed, seed+1, ...")
	weightsFlag := flag.String("gpu-weights", "1:40,2:25,4:20,8:15", "GPUs per pod and their relative weights in the stream (4:1 with -fabric nvl72)")
	maxPods := flag.Int("max-group-pods", 8, "groups have 1..this many pods (uniform; 18 with -fabric nvl72)")
	groupPods := flag.String("group-pods", "", "pods per group and their relative weights instead of 1..-max-group-pods uniform, "+
		"e.g. 1:1,2:1,4:1,8:1,16:1,18:1 for tensor-parallel sizes of 4, 8, 16, 32, 64 and 72 GPUs with -fabric nvl72")
	maxGroups := flag.Int("max-groups", 5000, "stop feeding after this many groups")
	stopAfter := flag.Int("stop-after-failures", 1, "once a group of whole-node pods has failed, stop feeding at the failure that makes this many (10 with -fabric nvl72)")
	modes := flag.String("modes", "berth,default", "which schedulers to run, in order")
	timeout := flag.Duration("timeout", 30*time.Second, "how long to wait for one group to be bound or reported unschedulable")
	out := flag.String("out", "", "also write the markdown table to this file")
	figures := flag.String("figures", "", "write the placement maps (SVG) and the raw numbers (CSV) into this directory")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (schedulers, apiserver and feeder share the process) to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		must(err)
		must(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })

	o := options{seed: *seed, repeat: *repeat, weights: *weightsFlag, maxPods: *maxPods, groupPods: *groupPods, maxGroups: *maxGroups,
		timeout: *timeout, stopAfter: *stopAfter}
	switch *fabricName {
	case "leafspine":
		o.fabric = newFabric(*spines, *leaves, *nodesPerLeaf, *gpusPerNode)
		o.fabric.dra = *dra
	case "nvl72":
		nv := sim.NVL72(2, 4)
		if set["spines"] {
			nv.Spines = *spines
		}
		if set["leaves"] {
			nv.LeavesPerSpine = *leaves
		}
		if set["node-cpu"] {
			nv.CPU = nodeCPU
		}
		if set["node-memory"] {
			nv.Memory = nodeMemory
		}
		if set["nodes-per-leaf"] || set["gpus-per-node"] {
			must(fmt.Errorf("-fabric nvl72: racks have 18 nodes of 4 GPUs (-nodes-per-leaf, -gpus-per-node do not apply)"))
		}
		must(nv.Validate())
		o.fabric = newFabricOf(nv, *dra)
		if !set["gpu-weights"] {
			o.weights = "4:1"
		}
		if !set["max-group-pods"] {
			o.maxPods = nv.NodesPerNVLink
		}
		if !set["stop-after-failures"] {
			o.stopAfter = 10
		}
	default:
		must(fmt.Errorf("-fabric: unknown fabric %q (want leafspine, nvl72)", *fabricName))
	}
	for _, m := range strings.Split(*modes, ",") {
		switch mode(strings.TrimSpace(m)) {
		case berthMode:
			o.modes = append(o.modes, berthMode)
		case defaultMode:
			o.modes = append(o.modes, defaultMode)
		default:
			must(fmt.Errorf("-modes: unknown mode %q (want berth, default)", m))
		}
	}

	start := time.Now()
	report, results, err := runAll(context.Background(), o)
	must(err)
	if *figures != "" {
		must(writeFigures(*figures, o.fabric, o.modes, results))
	}
	fmt.Print(report)
	fmt.Fprintf(os.Stderr, "total %s\n", time.Since(start).Round(time.Second))
	if *out != "" {
		must(os.WriteFile(*out, []byte(report), 0o644))
	}
}

// runAll starts a control plane, creates the fabric and runs each scheduler on each seed's
// stream; it returns the markdown report and the results by mode.
func runAll(ctx context.Context, o options) (string, map[mode][]result, error) {
	weights, err := parseWeights(o.weights, o.fabric.gpusPerNode)
	if err != nil {
		return "", nil, err
	}
	podWeights, err := parseGroupPods(o.groupPods, max(o.maxPods, 1))
	if err != nil {
		return "", nil, fmt.Errorf("-group-pods: %w", err)
	}
	// The schedulers alone, as kube-scheduler's scheduler_perf measures them: no garbage
	// collector or other controllers beside them; with DRA GPUs the ResourceClaim
	// controller is needed (it makes each pod's claim from its template and frees it when
	// the pod goes), so the controllers run.
	fmt.Fprintf(os.Stderr, "starting control plane...\n")
	cp, err := controlplane.Start(ctx, controlplane.Options{APIServerFlags: append(controlplane.DefaultAPIServerFlags(),
		"--delete-collection-workers=16"), NoControllers: !o.fabric.dra})
	if err != nil {
		return "", nil, err
	}
	defer cp.Stop()
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = 5000, 5000

	f := o.fabric
	b := &bench{cp: cp, kube: kubernetes.NewForConfigOrDie(cfg), vc: volcanoclient.NewForConfigOrDie(cfg), fabric: f,
		timeout: o.timeout, stopAfter: o.stopAfter}
	fmt.Fprintf(os.Stderr, "creating %d nodes (%d GPUs) and their HyperNodes...\n", len(f.nodes), f.totalGPUs())
	if err := f.create(ctx, b.kube, b.vc); err != nil {
		return "", nil, err
	}

	results := map[mode][]result{}
	for i := 0; i < o.repeat; i++ {
		s := o.seed + uint64(i)
		groups := streamGroups(s, weights, o.maxPods, o.maxGroups, podWeights)
		ceil, fit, bounded := f.bounds(groups)
		if bounded {
			fmt.Fprintf(os.Stderr, "seed %d: a one-domain scheduler fails at group %d or before (%d GPUs placed); best fit fails at group %d (%d GPUs)\n",
				s, ceil.first, ceil.gpus, fit.first, fit.gpus)
		}
		for _, m := range o.modes {
			fmt.Fprintf(os.Stderr, "%s seed %d: feeding groups...\n", m, s)
			r, err := b.run(ctx, m, s, groups)
			if err != nil {
				return "", nil, err
			}
			r.ceiling, r.bestFit, r.bounded = ceil, fit, bounded
			results[m] = append(results[m], r)
			fmt.Fprintf(os.Stderr, "%s seed %d: done in %s\n", m, s, r.elapsed.Round(time.Second))
		}
	}
	seeds := fmt.Sprintf("seed %d", o.seed)
	if o.repeat > 1 {
		seeds = fmt.Sprintf("seeds %d–%d (mean, and min–max over the seeds)", o.seed, o.seed+uint64(o.repeat)-1)
	}
	gpus := "nvidia.com/gpu"
	if f.dra {
		gpus = "DRA gpu.nvidia.com"
	}
	pods := fmt.Sprintf("1–%d pods per group", o.maxPods)
	if o.groupPods != "" {
		pods = "pods per group " + o.groupPods
	}
	report := fmt.Sprintf("Fabric: %s = %d nodes, %d %s GPUs. Stream: %s, %s, GPUs per pod %s.\n\n",
		f.sim.Describe(), len(f.nodes), f.totalGPUs(), gpus, seeds, pods, o.weights) + table(f, o.modes, results)
	return report, results, nil
}

// metric is one row of the table: a number per run, or (text) a description per run.
type metric struct {
	name   string
	value  func(r result) (float64, bool) // false: undefined for this run
	format func(v float64) string
	text   func(r result) string
	// domains, noDomains: shown only on a fabric with (without) NVLink domains.
	domains, noDomains bool
}

func count(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func percent(v float64) string    { return fmt.Sprintf("%.1f%%", 100*v) }
func oneDecimal(v float64) string { return fmt.Sprintf("%.1f", v) } // rates and milliseconds
func seconds(v float64) string    { return fmt.Sprintf("%.0fs", v) }

// table renders the results side by side: per mode the mean over the runs (with the range
// when there are several), and the ratio of berth's mean to default's when both ran.
func table(f *fabric, modes []mode, rs map[mode][]result) string {
	total := float64(f.totalGPUs())
	metrics := []metric{
		{name: "groups placed before the first failure", format: count,
			value: func(r result) (float64, bool) { return float64(r.groupsPlaced), true }},
		{name: "first group not placed (stream index: pods × GPUs)",
			text: func(r result) string {
				if r.firstFailure == nil {
					return "none"
				}
				return fmt.Sprintf("#%d: %s", r.firstFailure.index, r.firstFailure)
			}},
		{name: "GPUs allocated at the first failure", format: percent,
			value: func(r result) (float64, bool) { return float64(r.gpusAtFirst) / total, true }},
		{name: "… the most any one-domain scheduler can have at its first failure on this stream (exhaustive)", format: percent, domains: true,
			value: func(r result) (float64, bool) { return float64(r.ceiling.gpus) / total, r.bounded && r.ceiling.exact }},
		{name: "… this scheduler's share of that most", format: percent, domains: true,
			value: func(r result) (float64, bool) {
				return float64(r.gpusAtFirst) / float64(r.ceiling.gpus), r.bounded && r.ceiling.exact && r.ceiling.gpus > 0
			}},
		{name: "… best fit (each group into the fullest domain that holds it), by the bench's model", format: percent, domains: true,
			value: func(r result) (float64, bool) { return float64(r.bestFit.gpus) / total, r.bounded }},
		{name: "(1) multi-pod groups inside one leaf", format: percent, noDomains: true,
			value: func(r result) (float64, bool) { return ratioOf(r.spread.oneLeaf, r.spread.multiPod) }},
		{name: "(1) multi-pod groups inside one NVLink domain", format: percent, domains: true,
			value: func(r result) (float64, bool) { return ratioOf(r.spread.oneDomain, r.spread.multiPod) }},
		{name: "(5) multi-pod groups spanning more than one spine", format: percent,
			value: func(r result) (float64, bool) { return ratioOf(r.spread.manySpines, r.spread.multiPod) }},
		{name: fmt.Sprintf("(3) whole free nodes at the first failure (of %d)", len(f.nodes)), format: count,
			value: func(r result) (float64, bool) { return float64(r.freeNodesAtFirst), true }},
		{name: fmt.Sprintf("(2) GPUs allocated when the first %d-GPU group failed", f.gpusPerNode), format: percent,
			value: func(r result) (float64, bool) { return float64(r.gpusAtBig) / total, r.bigFailure != nil }},
		{name: "(4) pods bound per second while feeding", format: oneDecimal,
			value: func(r result) (float64, bool) { return float64(r.podsPlaced) / r.feeding.Seconds(), r.feeding > 0 }},
		{name: "(4a) ms per group placed: creating its PodGroup and pods", format: oneDecimal,
			value: func(r result) (float64, bool) { return r.spans.perGroup(r.spans.create) }},
		{name: "(4b) ms per group placed: last pod created to the first seen bound", format: oneDecimal,
			value: func(r result) (float64, bool) { return r.spans.perGroup(r.spans.first) }},
		{name: "(4c) ms per group placed: first pod bound to the last", format: oneDecimal,
			value: func(r result) (float64, bool) { return r.spans.perGroup(r.spans.spread) }},
		{name: "pods of the first failing group bound, then withdrawn", format: count,
			value: func(r result) (float64, bool) { return float64(r.firstFailureBound), true }},
		{name: "groups placed after the first failure", format: count,
			value: func(r result) (float64, bool) { return float64(r.placedAfter), true }},
		{name: "groups fed, placed in all", format: count, domains: true,
			text: func(r result) string { return fmt.Sprintf("%d, %d", r.groupsFed, r.groupsPlaced+r.placedAfter) }},
		{name: "GPUs allocated at the end", format: percent, domains: true,
			value: func(r result) (float64, bool) { return float64(r.gpusAtEnd) / total, true }},
		{name: "groups failed or left partial that the fit check places", format: count,
			value: func(r result) (float64, bool) { return float64(r.feasibleFailures), true }},
		{name: "run time", format: seconds,
			value: func(r result) (float64, bool) { return r.elapsed.Seconds(), true }},
	}
	both := len(rs[berthMode]) > 0 && len(rs[defaultMode]) > 0
	var sb strings.Builder
	sb.WriteString("| |")
	for _, m := range modes {
		sb.WriteString(" " + string(m) + " |")
	}
	if both {
		sb.WriteString(" berth/default |")
	}
	sb.WriteString("\n|---|" + strings.Repeat("---:|", len(modes)))
	if both {
		sb.WriteString("---:|")
	}
	sb.WriteString("\n")
	for _, mt := range metrics {
		if (mt.domains && !f.hasDomains()) || (mt.noDomains && f.hasDomains()) {
			continue
		}
		sb.WriteString("| " + mt.name + " |")
		means := map[mode]float64{}
		defined := map[mode]bool{}
		for _, m := range modes {
			if mt.text != nil {
				var parts []string
				for _, r := range rs[m] {
					parts = append(parts, mt.text(r))
				}
				sb.WriteString(" " + strings.Join(parts, ", ") + " |")
				continue
			}
			var vals []float64
			for _, r := range rs[m] {
				if v, ok := mt.value(r); ok {
					vals = append(vals, v)
				}
			}
			cell := "–"
			if len(vals) > 0 {
				mean, lo, hi := summarize(vals)
				means[m], defined[m] = mean, len(vals) == len(rs[m])
				cell = mt.format(mean)
				if len(rs[m]) > 1 {
					cell += " (" + mt.format(lo) + "–" + mt.format(hi) + ")"
				}
				if len(vals) < len(rs[m]) {
					cell += fmt.Sprintf(", %d of %d runs", len(vals), len(rs[m]))
				}
			}
			sb.WriteString(" " + cell + " |")
		}
		if both {
			cell := "–"
			if mt.text == nil && defined[berthMode] && defined[defaultMode] && means[defaultMode] != 0 {
				cell = fmt.Sprintf("%.2f", means[berthMode]/means[defaultMode])
			}
			sb.WriteString(" " + cell + " |")
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

func summarize(vals []float64) (mean, lo, hi float64) {
	lo, hi = vals[0], vals[0]
	for _, v := range vals {
		mean += v
		lo, hi = min(lo, v), max(hi, v)
	}
	return mean / float64(len(vals)), lo, hi
}

func ratioOf(n, of int) (float64, bool) {
	if of == 0 {
		return 0, false
	}
	return float64(n) / float64(of), true
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "placementbench:", err)
		os.Exit(1)
	}
}

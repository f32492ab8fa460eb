// Command autoscalebench replays one bursty request trace against simulated vLLM engines
// (pkg/sim/engine) twice in the same run: once scaled by Berth's autoscaler (pkg/autoscale:
// RecommendAll and Scaler.Decide under an AutoscalingPolicy with panic mode), once by
// kube-controller-manager's own HorizontalPodAutoscaler controller running in this process,
// with the same engines, load balancer, metric, target, sync period, tolerance and behavior
// (rate limits and stabilization windows). Both act on a Deployment's scale subresource on a
// real kube-apiserver; the replicas follow its spec.replicas. It reports, per autoscaler, the
// seconds in which time to first token broke the SLO, the replica-seconds spent, TTFT
// percentiles and how replicas moved, and the ratios Berth/HPA.
//
// Everything runs in this process on a simulated clock: real = simulated × -time-scale (the
// HPA controller runs on the wall clock, so its durations are given to it in real seconds).
// A replica is one engine on its own loopback address; it is requested by the autoscaler,
// takes traffic after -cold-start (the model load) and, when scaled away, drains before it
// stops. A least-in-flight load balancer spreads streaming chat completions over the ready
// replicas. Both autoscalers read the same engine gauge from every ready replica every -sync.
//
// Progress goes to stderr, the report to stdout (and -out), figures to -figures.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/quantile"
	"github.com/berth-sh/berth/pkg/autoscale"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// options are the command's flags.
type options struct {
	seed      uint64
	timeScale float64
	runs      int
	quick     bool
	out       string
	verbose   bool
	calibrate string
	only      string
	static    int
	model     bool
	figures   string

	length      time.Duration
	baseLow     float64
	baseHigh    float64
	bursts      int
	burstMin    float64
	burstMax    float64
	coldStart   time.Duration
	sync        time.Duration
	berthSync   time.Duration
	slo         time.Duration
	metric      string
	target      float64
	minReplicas int
	maxReplicas int
	port        int

	maxBatch     int
	prefill      time.Duration
	decodeBase   time.Duration
	decodePerSeq time.Duration
	promptMin    int
	promptMax    int
	outMin       int
	outMax       int

	policy berthPolicy
}

func defaultOptions() options {
	return options{
		seed: 1, timeScale: 1.0 / 15, runs: 1,
		length: 35 * time.Minute, baseLow: 0.4, baseHigh: 1.6, bursts: 4, burstMin: 4, burstMax: 8,
		coldStart: 30 * time.Second, sync: 15 * time.Second, slo: 2 * time.Second,
		metric: "vllm:num_requests_running", target: 6, minReplicas: 1, maxReplicas: 12, port: 18000,
		maxBatch: 64, prefill: 200 * time.Microsecond, decodeBase: 80 * time.Millisecond, decodePerSeq: 5 * time.Millisecond,
		promptMin: 128, promptMax: 4096, outMin: 8, outMax: 40,
		policy: berthPolicy{
			tolerancePercent: 10,
			panicThreshold:   200,
			panicPercent:     1000,
			panicHold:        60 * time.Second,
			upInstances:      4,
			upPercent:        100,
			downWindow:       2 * time.Minute,
			downInstances:    1,
			downPercent:      10,
		},
	}
}

func main() {
	o := defaultOptions()
	flag.Uint64Var(&o.seed, "seed", o.seed, "seed of the trace")
	flag.Float64Var(&o.timeScale, "time-scale", o.timeScale, "real seconds per simulated second (the HPA controller runs on the wall clock and takes whole seconds, so 15 simulated seconds and the scale-down window must be whole real seconds: 1/15, 2/15, …)")
	flag.IntVar(&o.runs, "runs", o.runs, "runs (each replays the trace with both autoscalers, the order alternating); the summary gives medians")
	flag.BoolVar(&o.quick, "quick", false, "a short trace (5 simulated minutes, one burst) for a smoke check")
	flag.StringVar(&o.out, "out", "", "also write the report to this file")
	flag.BoolVar(&o.verbose, "decisions", false, "log every autoscaler decision to stderr (-v is klog's, registered by the HPA controller's packages)")
	flag.StringVar(&o.only, "only", "", "replay with this autoscaler alone (berth, hpa, hpa-model, or static with -static), for a look with -decisions")
	flag.IntVar(&o.static, "static", 0, "also replay with this many replicas and no autoscaler, as a reference (not in the ratios)")
	flag.BoolVar(&o.model, "hpa-model", false, "also replay with the bench's own model of the HPA algorithm (scalers.go), as a reference beside the HPA controller (not in the ratios)")
	flag.StringVar(&o.figures, "figures", "", "write the figures (SVG) and the raw numbers (CSV) of run 1 into this directory")
	flag.StringVar(&o.calibrate, "calibrate", "", "instead of the comparison, load one replica at these comma-separated request rates (per simulated second) for 3 simulated minutes each and print TTFT and the metric")

	flag.DurationVar(&o.length, "length", o.length, "trace length (simulated)")
	flag.Float64Var(&o.baseLow, "base-low", o.baseLow, "base request rate at the ends of the trace, per simulated second")
	flag.Float64Var(&o.baseHigh, "base-high", o.baseHigh, "base request rate at the middle of the trace")
	flag.IntVar(&o.bursts, "bursts", o.bursts, "bursts in the trace")
	flag.Float64Var(&o.burstMin, "burst-min", o.burstMin, "lowest burst multiplier")
	flag.Float64Var(&o.burstMax, "burst-max", o.burstMax, "highest burst multiplier")
	flag.DurationVar(&o.coldStart, "cold-start", o.coldStart, "simulated time from a replica's request to its first request (model load)")
	flag.DurationVar(&o.sync, "sync", o.sync, "simulated sync period of both autoscalers")
	flag.DurationVar(&o.berthSync, "berth-sync", 0, "simulated sync period of Berth's autoscaler alone, to show what a shorter one buys (berth-controller's --autoscale-sync-period, default 5s; 0: -sync, equal to the HPA's)")
	flag.DurationVar(&o.slo, "slo", o.slo, "TTFT SLO (simulated)")
	flag.StringVar(&o.metric, "metric", o.metric, "engine metric both autoscalers scale on (a gauge)")
	flag.Float64Var(&o.target, "target", o.target, "target value of the metric per replica, for both")
	flag.IntVar(&o.minReplicas, "min", o.minReplicas, "min replicas")
	flag.IntVar(&o.maxReplicas, "max", o.maxReplicas, "max replicas")
	flag.IntVar(&o.port, "port", o.port, "port of every engine (each replica has its own 127.x.y.z address)")

	flag.IntVar(&o.maxBatch, "max-batch", o.maxBatch, "engine: max running sequences")
	flag.DurationVar(&o.prefill, "prefill-per-token", o.prefill, "engine: simulated prefill time per prompt token")
	flag.DurationVar(&o.decodeBase, "decode-base", o.decodeBase, "engine: simulated time of a decode step")
	flag.DurationVar(&o.decodePerSeq, "decode-per-seq", o.decodePerSeq, "engine: added per sequence in a decode step")
	flag.IntVar(&o.promptMin, "prompt-min", o.promptMin, "shortest prompt, tokens")
	flag.IntVar(&o.promptMax, "prompt-max", o.promptMax, "longest prompt, tokens")
	flag.IntVar(&o.outMin, "out-min", o.outMin, "fewest tokens generated per request")
	flag.IntVar(&o.outMax, "out-max", o.outMax, "most tokens generated per request")

	p := &o.policy
	i32 := func(v *int32, name, usage string) {
		flag.Func(name, fmt.Sprintf("%s (default %d)", usage, *v), func(s string) error {
			var x int32
			_, err := fmt.Sscan(s, &x)
			*v = x
			return err
		})
	}
	i32(&p.tolerancePercent, "berth-tolerance", "Berth policy: tolerancePercent")
	i32(&p.panicThreshold, "berth-panic-threshold", "Berth policy: panicThresholdPercent")
	i32(&p.panicPercent, "berth-panic-percent", "Berth policy: panicPolicy.percent")
	flag.DurationVar(&p.panicHold, "berth-panic-hold", p.panicHold, "Berth policy: panicModeHold")
	i32(&p.upInstances, "berth-up-instances", "Berth policy: scaleUp.stablePolicy.instances")
	i32(&p.upPercent, "berth-up-percent", "Berth policy: scaleUp.stablePolicy.percent")
	flag.DurationVar(&p.downWindow, "berth-down-window", p.downWindow, "Berth policy: scaleDown.stabilizationWindow")
	i32(&p.downInstances, "berth-down-instances", "Berth policy: scaleDown.instances")
	i32(&p.downPercent, "berth-down-percent", "Berth policy: scaleDown.percent")
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	report, err := run(ctx, o, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "autoscalebench:", err)
		os.Exit(1)
	}
	fmt.Print(report.text)
	if o.figures != "" && len(report.byRun) > 0 {
		if err := writeFigures(o.figures, report.trace, report.byRun[0], o.slo); err != nil {
			fmt.Fprintln(os.Stderr, "autoscalebench:", err)
			os.Exit(1)
		}
	}
	if o.figures != "" && report.calibration != nil {
		if err := report.calibration.write(o.figures); err != nil {
			fmt.Fprintln(os.Stderr, "autoscalebench:", err)
			os.Exit(1)
		}
	}
	if o.out != "" {
		header := fmt.Sprintf("Command: `go run ./bench/autoscalebench %s`\n\n", strings.Join(os.Args[1:], " "))
		if err := os.WriteFile(o.out, []byte(header+report.text), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "autoscalebench:", err)
			os.Exit(1)
		}
	}
}

// traceConfig is the trace the options describe (-quick: 5 minutes at the low base rate
// with one ×6 burst of 90 s from 1:30).
func (o options) traceConfig() traceConfig {
	c := traceConfig{
		seed: o.seed, length: o.length, baseLow: o.baseLow, baseHigh: o.baseHigh, bursts: o.bursts,
		burstMin: o.burstMin, burstMax: o.burstMax, burstDurMin: time.Minute, burstDurMax: 3 * time.Minute,
		promptMin: o.promptMin, promptMax: o.promptMax, maxTokensMin: o.outMin, maxTokensMax: o.outMax,
		quietBeginning: 2 * time.Minute,
	}
	if o.quick {
		c.length = 5 * time.Minute
		c.baseHigh = c.baseLow
		c.noBaseWobble = true
		c.fixedBursts = []burst{{start: 90 * time.Second, dur: 90 * time.Second, mult: 6}}
	}
	return c
}

func (o options) engineConfig() engine.Config {
	return engine.Config{MaxBatch: o.maxBatch, PrefillPerToken: o.prefill, DecodeBase: o.decodeBase, DecodePerSeq: o.decodePerSeq}
}

func (o options) runConfig() (runConfig, error) {
	sc := scalerConfig{metric: o.metric, target: o.target, min: int32(o.minReplicas), max: int32(o.maxReplicas)}
	pol, err := autoscale.NewPolicy(o.policy.spec(sc))
	if err != nil {
		return runConfig{}, fmt.Errorf("Berth policy: %w", err)
	}
	switch {
	case o.timeScale <= 0 || o.timeScale > 1:
		return runConfig{}, fmt.Errorf("-time-scale must be in (0, 1]")
	case o.runs < 1:
		return runConfig{}, fmt.Errorf("-runs must be at least 1")
	case o.minReplicas < 1 || o.maxReplicas < o.minReplicas:
		return runConfig{}, fmt.Errorf("need 1 ≤ -min ≤ -max (the load balancer needs a replica)")
	case o.promptMin < 1 || o.promptMax < o.promptMin || o.outMin < 1 || o.outMax < o.outMin:
		return runConfig{}, fmt.Errorf("bad prompt or output lengths")
	case o.length < time.Minute || o.sync <= 0:
		return runConfig{}, fmt.Errorf("-length must be at least 1m and -sync positive")
	}
	berthSync := o.berthSync
	if berthSync <= 0 {
		berthSync = o.sync
	}
	hpa, err := hpaSpec(sc, o.policy, o.timeScale)
	if err != nil && o.calibrate == "" {
		return runConfig{}, err
	}
	return runConfig{timeScale: o.timeScale, coldStart: o.coldStart, sync: o.sync, berthSync: berthSync, requestTimeout: 10 * time.Minute,
		ecfg: o.engineConfig(), sc: sc, policy: pol, slo: o.slo, port: o.port, verbose: o.verbose,
		hpa: hpa, tolerance: pol.Tolerance}, nil
}

// result is a whole benchmark's report and figures.
type result struct {
	text        string
	calibration *calibration // -calibrate's measurements
	trace       *trace
	byRun       [][]summary // per run, berth then hpa (then hpa-model, then the static reference)
	ratios      []float64   // per run: violation seconds berth/hpa
	rsRatio     []float64   // per run: replica-seconds berth/hpa
}

// run is the benchmark: -runs replays of the trace with each autoscaler, the order
// alternating, then the report.
func run(ctx context.Context, o options, log *os.File) (*result, error) {
	rc, err := o.runConfig()
	if err != nil {
		return nil, err
	}
	if o.calibrate != "" {
		return calibrate(ctx, o, rc, log)
	}
	tr := newTrace(o.traceConfig())
	say := func(format string, args ...any) {
		if log != nil {
			fmt.Fprintf(log, time.Now().Format("15:04:05 ")+format+"\n", args...)
		}
	}
	say("autoscalebench: %d run(s), TimeScale %g: %s of trace ≈ %s real per autoscaler", o.runs, o.timeScale,
		tr.cfg.length, time.Duration(float64(tr.cfg.length)*o.timeScale).Round(time.Second))
	say("starting the control plane (etcd, kube-apiserver)")
	cl, err := startCluster(ctx)
	if err != nil {
		return nil, err
	}
	defer cl.stop()
	res := &result{trace: tr}
	for r := range o.runs {
		order := []string{nameBerth, nameHPA}
		if r%2 == 1 {
			order = []string{nameHPA, nameBerth}
		}
		if o.model {
			order = append(order, nameModel)
		}
		if o.static > 0 {
			order = append(order, nameStatic)
		}
		got := map[string]summary{}
		for i, name := range order {
			if o.only != "" && name != o.only {
				continue
			}
			say("run %d/%d: %s", r+1, o.runs, name)
			rcx, kind := rc, name
			if name == nameStatic {
				rcx.sc.min, kind = int32(o.static), nameFixed
			}
			out, err := replay(ctx, rcx, cl, tr, kind, 60+(4*r+i)%150)
			if err != nil {
				return nil, fmt.Errorf("run %d, %s: %w", r+1, name, err)
			}
			if name == nameStatic {
				out.name = fmt.Sprintf("static-%d", o.static)
			}
			s := summarize(out, tr, o.slo)
			say("  %d SLO-violation s, %.0f replica-s, %d served, %d failed, TTFT p90 %ss, peak %d replicas; CPU %.2f cores, %d requests sent over %s late (at most %s)",
				s.violationSeconds, s.replicaSeconds, s.served, s.failed, secs(s.p90), s.peak, s.cpuCores, s.late, lateAfter, s.maxLag.Round(time.Millisecond))
			got[name] = s
		}
		if o.only != "" {
			if _, ok := got[o.only]; !ok {
				return nil, fmt.Errorf("-only: no autoscaler %q", o.only)
			}
			s := got[o.only]
			res.text = tableHeader + tableRow(s.name, s) + "\n```\n" + timelines(tr, []summary{s}) + "```\n"
			continue
		}
		b, h := got[nameBerth], got[nameHPA]
		row := []summary{b, h}
		if o.model {
			row = append(row, got[nameModel])
		}
		if o.static > 0 {
			row = append(row, got[nameStatic])
		}
		res.byRun = append(res.byRun, row)
		res.ratios = append(res.ratios, safeRatio(float64(b.violationSeconds), float64(h.violationSeconds)))
		res.rsRatio = append(res.rsRatio, safeRatio(b.replicaSeconds, h.replicaSeconds))
	}
	if o.only == "" {
		res.text = render(o, rc, res)
	}
	return res, nil
}

func safeRatio(a, b float64) float64 {
	if b == 0 {
		if a == 0 {
			return 1
		}
		return float64(1 << 30)
	}
	return a / b
}

// render writes the report.
func render(o options, rc runConfig, res *result) string {
	var b strings.Builder
	tr := res.trace
	fmt.Fprintf(&b, "## Autoscaling under bursts: Berth vs the HorizontalPodAutoscaler controller\n\n")
	b.WriteString(tr.describe())
	e := rc.ecfg
	fmt.Fprintf(&b, "Replicas: one simulated vLLM engine each (max batch %d, prefill %s/token, decode step %s + %s/sequence), ready %s after being requested; "+
		"min %d, max %d, starting from 1 ready replica. Load balancer: least requests in flight. TimeScale %g (1 simulated s = %s real).\n",
		e.MaxBatch, e.PrefillPerToken, e.DecodeBase, e.DecodePerSeq, rc.coldStart, rc.sc.min, rc.sc.max, rc.timeScale, time.Duration(float64(time.Second)*rc.timeScale))
	fmt.Fprintf(&b, "Both autoscalers: metric %s (gauge, averaged over the ready replicas; replicas still loading count as missing), target %g per replica, sync every %s",
		rc.sc.metric, rc.sc.target, rc.sync)
	if rc.berthSync != rc.sync {
		fmt.Fprintf(&b, " (berth: every %s)", rc.berthSync)
	}
	b.WriteString(".\n")
	b.WriteString("Both act on the same kind of target, a Deployment, through its scale subresource; the replicas follow its spec.replicas (a pod per replica, not Ready while its model loads). One kube-apiserver and etcd in this process.\n")
	fmt.Fprintf(&b, "- berth: pkg/autoscale (RecommendAll, Scaler.Decide, as berth-controller runs them for a binding) with the policy %s.\n", describePolicy(rc.policy))
	fmt.Fprintf(&b, "- hpa: kube-controller-manager's HorizontalPodAutoscaler controller (k8s.io/kubernetes/pkg/controller/podautoscaler) in this process, sync period %s, tolerance %g, "+
		"an autoscaling/v2 HPA with a Pods metric (AverageValue %g) read through a custom-metrics client that reads the same gauge from the same pods, and the behavior %s.\n",
		rc.sync, rc.tolerance, rc.sc.target, describeBehavior(rc.hpa, rc.timeScale))
	if o.model {
		b.WriteString("- hpa-model: the bench's own model of the HPA algorithm with its default behavior (scale-down window 5 min, no scale-down rate limit), kept as a reference; not the peer, not in the ratios.\n")
	}
	if o.static > 0 {
		fmt.Fprintf(&b, "- static-%d: %d ready replicas throughout, no autoscaler (a reference, not in the ratios).\n", o.static, o.static)
	}
	fmt.Fprintf(&b, "SLO: TTFT ≤ %s. An SLO-violation second is a simulated second of the trace whose arrivals' p90 TTFT (nearest rank; with fewer than 10 arrivals, the slowest) exceeds it, failed requests counting as infinitely slow. "+
		"Replica-seconds run from a replica's request to its engine's stop after draining, within the trace. TTFT is measured by the client from sending the request to the first content chunk.\n\n",
		rc.slo)

	b.WriteString(tableHeader)
	if len(res.byRun) > 1 {
		for r, ss := range res.byRun {
			for _, s := range ss {
				b.WriteString(tableRow(fmt.Sprintf("%s (run %d)", s.name, r+1), s))
			}
		}
	}
	meds := medians(res.byRun)
	label := func(name string) string {
		if len(res.byRun) > 1 {
			return name + " (median)"
		}
		return name
	}
	for _, s := range meds {
		b.WriteString(tableRow(label(s.name), s))
	}
	vr, rr := quantile.Median(res.ratios), quantile.Median(res.rsRatio)
	fmt.Fprintf(&b, "\nBerth ÷ HPA: SLO-violation seconds %.2f, replica-seconds %.2f", vr, rr)
	if len(res.byRun) > 1 {
		var per []string
		for i := range res.ratios {
			per = append(per, fmt.Sprintf("%.2f / %.2f", res.ratios[i], res.rsRatio[i]))
		}
		fmt.Fprintf(&b, " (medians of the runs' ratios; per run: %s)", strings.Join(per, ", "))
	}
	met := vr <= 1.0/3 && rr <= 1
	fmt.Fprintf(&b, ".\nTarget: violation seconds at most 1/3 of the HPA's at no more replica-seconds: %s.\n\n", map[bool]string{true: "met", false: "not met"}[met])

	fmt.Fprintf(&b, "Replicas (the most requested in each simulated minute; a=10, b=11, c=12) and SLO-violation seconds per minute (. none, - 1–9, + 10–29, # 30–60), run 1:\n\n```\n")
	b.WriteString(timelines(tr, res.byRun[0]))
	b.WriteString("```\n")
	var notes []string
	for r, ss := range res.byRun {
		for _, s := range ss {
			if s.firstErr != nil {
				notes = append(notes, fmt.Sprintf("run %d, %s: first failure: %v", r+1, s.name, s.firstErr))
			}
			if s.readErrors > 0 {
				notes = append(notes, fmt.Sprintf("run %d, %s: metrics of some replica unread at %d syncs (it counted as missing); first at %s", r+1, s.name, s.readErrors, s.firstReadErr))
			}
			if s.late > 0 {
				notes = append(notes, fmt.Sprintf("run %d, %s: %d of %d requests sent more than %s (simulated) after their due time, at most %s (real-time hiccups of the machine; TTFT is timed from the send); the process used %.2f cores",
					r+1, s.name, s.late, s.requests, lateAfter, s.maxLag.Round(time.Millisecond), s.cpuCores))
			}
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n" + strings.Join(notes, "\n") + "\n")
	}
	return b.String()
}

// medians is, per autoscaler, the median of each figure over the runs.
func medians(byRun [][]summary) []summary {
	var out []summary
	for i := range byRun[0] {
		var f [8][]float64
		for _, ss := range byRun {
			s := ss[i]
			for j, v := range []float64{float64(s.violationSeconds), s.replicaSeconds, float64(s.served), float64(s.failed),
				float64(s.p50), float64(s.p90), float64(s.p99), float64(s.peak)} {
				f[j] = append(f[j], v)
			}
		}
		m := byRun[0][i]
		m.violationSeconds = int(quantile.Median(f[0]))
		m.replicaSeconds = quantile.Median(f[1])
		m.served, m.failed = int(quantile.Median(f[2])), int(quantile.Median(f[3]))
		m.p50, m.p90, m.p99 = time.Duration(quantile.Median(f[4])), time.Duration(quantile.Median(f[5])), time.Duration(quantile.Median(f[6]))
		m.peak = int(quantile.Median(f[7]))
		var ups, downs []float64
		for _, ss := range byRun {
			ups = append(ups, float64(ss[i].scaleUps))
			downs = append(downs, float64(ss[i].scaleDowns))
		}
		m.scaleUps, m.scaleDowns = int(quantile.Median(ups)), int(quantile.Median(downs))
		out = append(out, m)
	}
	return out
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

// Command routerbench measures berth-router against simulated vLLM engines
// (pkg/sim/engine) on the in-process control plane, with the peers in the same run:
//
//   - -overhead: what the router costs as a proxy. Engines that answer in microseconds,
//     reached directly (the load generator round-robins over them), through nginx as a
//     plain round-robin reverse proxy, and through berth-router with round robin and with
//     its default scorers: max requests/s in a closed loop, and p50/p99 latency at a fixed
//     open-loop rate of half nginx's max.
//   - -quality: what picking buys. Shared-prefix chat traffic (a few long system prompts,
//     many users) at a Poisson rate, through berth-router with round robin, least-requests
//     and the default prefix-aware scorers, each on freshly started engines: time to first
//     token, completed requests/s and the engines' prefix-cache hit rate.
//   - -replicas 1,2,4: the quality workload through that many berth-router replicas behind a
//     round-robin balancer, sharing their prefix index and in-flight counts through one
//     redis-server, and through one round-robin router: does prefix affinity survive
//     running several replicas? Given alone, -replicas runs only this experiment.
//   - -epp: berth-router as an endpoint picker (--mode=epp) beside a peer picker binary
//     (-epp-peer, the Inference Extension's reference EPP), both over one InferencePool of
//     the same engines and driven by the same emulated Envoy (pkg/router/epp/epptest):
//     decision latency at a fixed rate, and TTFT on the quality workload against round
//     robin. Given alone, -epp runs only this experiment.
//   - -tenants: the fair queue. A noisy tenant keeps a backlog of streams against engines
//     the router (--auth=api-key, --queue-concurrency) keeps saturated, while a quiet tenant
//     sends short requests: the quiet tenant's TTFT alone, beside the noisy one through the
//     fair queue, in FIFO order, and through the fair queue with --queue-reserve. Given alone, it runs only this experiment.
//   - -pd-topology: prefill/decode pairing by the fabric. Prefill and decode engines on
//     nodes in NVLink domains under leaves, one PD group across them all, the simulated
//     engines charging each KV handoff by the level it crosses (-pd-costs): TTFT through
//     berth-router pairing topology-aware and blind (by load alone), same workload. Given
//     alone, it runs only this experiment.
//   - -scaledown: the quality workload on engines standing for the groups of a ModelServing,
//     one group removed halfway by berth-controller's rule, blind (the highest ordinal) and
//     with the routers' deletion costs: TTFT in the simulated minute after. Given alone, it
//     runs only this experiment.
//
// Progress goes to stderr, the markdown tables to stdout (and -out).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func main() {
	doOverhead := flag.Bool("overhead", true, "run the proxy overhead experiment")
	doQuality := flag.Bool("quality", true, "run the routing quality experiment")
	runs := flag.Int("runs", 1, "runs of each experiment; tables give medians")
	seed := flag.Uint64("seed", 1, "seed of the quality workload")
	out := flag.String("out", "", "also write the tables to this file")
	figures := flag.String("figures", "", "write the figures (SVG) of the experiments run and their numbers (CSV) into this directory")
	nginxBin := flag.String("nginx", "/usr/sbin/nginx", "nginx binary")

	engines := flag.Int("engines", 4, "overhead: engines")
	conc := flag.Int("concurrency", 64, "overhead: closed-loop clients")
	dur := flag.Duration("duration", 10*time.Second, "overhead: length of each measurement")
	cpuProfile := flag.String("cpuprofile", "", "overhead: write a CPU profile of each path's first closed loop to PREFIX-<path>.pprof and print CPU per request by component")
	inProcess := flag.Bool("router-in-process", false, "overhead and epp: run berth-router inside the benchmark's process instead of as its own (implied by -cpuprofile for overhead)")
	rate := flag.Float64("rate", 0, "overhead: open-loop rate in requests/s (0: half nginx's max in the same run)")
	warm := flag.Duration("warmup", 3*time.Second, "overhead: closed-loop warm-up before each measurement")

	qEngines := flag.Int("quality-engines", 4, "quality: engines")
	prompts := flag.Int("prompts", 8, "quality: distinct system prompts")
	users := flag.Int("users", 200, "quality: users (user i sends system prompt i % prompts)")
	requests := flag.Int("quality-requests", 1500, "quality: requests per router configuration")
	systemTokens := flag.Int("system-tokens", 2000, "quality: tokens per system prompt")
	userTokens := flag.Int("user-tokens", 50, "quality: tokens per user message")
	maxTokens := flag.Int("max-tokens", 32, "quality: tokens generated per request")
	cachePrompts := flag.Float64("cache-prompts", 0, "quality: prefix cache per engine, in prompts (0: 2 × prompts/engines)")
	load := flag.Float64("load", 0.7, "quality: offered load, fraction of what the engines serve at round robin's expected hit rate")
	realSeconds := flag.Float64("quality-seconds", 15, "quality: real seconds of arrivals per configuration (sets TimeScale)")

	doEPP := flag.Bool("epp", false, "run the endpoint picker experiment (alone, unless -overhead or -quality is given too)")
	eppPeer := flag.String("epp-peer", "", "epp: the peer endpoint picker binary (the Inference Extension's cmd/epp; see bench/README.md); empty: berth-router's picker alone")
	eppRate := flag.Float64("epp-rate", 1000, "epp: open-loop requests/s of the decision latency measurement")
	eppDur := flag.Duration("epp-duration", 10*time.Second, "epp: length of the decision latency measurement")
	eppWarm := flag.Duration("epp-warmup", 2*time.Second, "epp: warm-up at the same rate before it")
	eppEngines := flag.Int("epp-engines", 4, "epp: engines of the decision latency measurement")
	eppCSV := flag.String("epp-csv", "/tmp/routerbench-epp.csv", "epp: raw samples, one line per request (empty: none)")
	doTenants := flag.Bool("tenants", false, "run the noisy/quiet tenants experiment (alone, unless -overhead or -quality is given too)")
	tEngines := flag.Int("tenants-engines", 1, "tenants: engines")
	tConc := flag.Int("tenants-concurrency", 2, "tenants: requests the router sends to an engine at a time (--queue-concurrency)")
	tNoisy := flag.Int("tenants-noisy", 20, "tenants: streams the noisy tenant keeps open")
	tNoisyTokens := flag.Int("tenants-noisy-tokens", 12, "tenants: tokens generated per noisy request")
	tQuiet := flag.Int("tenants-quiet-requests", 50, "tenants: requests of the quiet tenant per configuration")
	tQuietTokens := flag.Int("tenants-quiet-tokens", 1000, "tenants: prompt tokens of each quiet request (each prompt new: about 100 ms of prefill at time scale 1)")
	tGap := flag.Duration("tenants-quiet-gap", 50*time.Millisecond, "tenants: pause between the quiet tenant's requests")
	tScale := flag.Float64("tenants-timescale", 1, "tenants: engine time scale (1: real time; a 12-token answer takes about 100 ms)")
	tCSV := flag.String("tenants-csv", "/tmp/routerbench-tenants.csv", "tenants: the quiet tenant's TTFTs, one line per request (empty: none)")
	doPD := flag.Bool("pd-topology", false, "run the topology-aware prefill/decode pairing experiment (alone, unless -overhead or -quality is given too)")
	pdLeaves := flag.Int("pd-leaves", 2, "pd-topology: leaves")
	pdDomains := flag.Int("pd-domains", 2, "pd-topology: NVLink domains per leaf")
	pdNodes := flag.Int("pd-nodes", 2, "pd-topology: nodes per NVLink domain (one prefill and one decode engine each)")
	pdRequests := flag.Int("pd-requests", 800, "pd-topology: requests per pairing policy")
	pdPrompt := flag.Int("pd-prompt-tokens", 2000, "pd-topology: new prompt tokens per request")
	pdMaxTokens := flag.Int("pd-max-tokens", 16, "pd-topology: tokens generated per request")
	pdLoad := flag.Float64("pd-load", 0.6, "pd-topology: offered load, fraction of the prefill engines' capacity")
	pdSeconds := flag.Float64("pd-seconds", 15, "pd-topology: real seconds of arrivals per policy (sets TimeScale)")
	pdCosts := flag.String("pd-costs", "0.7ms,0.7ms,13ms,26ms", "pd-topology: simulated time of one KV handoff when prefill and decode share the node, the NVLink domain, the leaf, nothing (see bench/README.md)")
	pdCSV := flag.String("pd-csv", "/tmp/routerbench-pdtopology.csv", "pd-topology: one line per request: pairing, level shared, TTFT (empty: none)")
	doScaledown := flag.Bool("scaledown", false, "run the scale-down experiment: the quality workload on -quality-engines groups of a ModelServing, one removed halfway by the highest ordinal and by the routers' deletion costs (alone, unless -overhead or -quality is given too)")
	sdWindow := flag.Duration("scaledown-window", time.Minute, "scaledown: simulated time after the scale-down whose requests are measured")
	sdSkew := flag.Float64("scaledown-skew", 0, "scaledown: above 1, draw each request's system prompt by Zipf popularity of this exponent (some groups then hold hot prompt families, others cold ones); runs: -runs")
	sdCSV := flag.String("scaledown-csv", "/tmp/routerbench-scaledown.csv", "scaledown: the window's TTFTs, one line per request (empty: none)")
	replicas := flag.String("replicas", "", "replicas: comma-separated router replica counts to run the quality workload through (e.g. 1,2,4; needs redis-server on PATH); empty: not run")
	flag.Parse()
	var replicaCounts []int
	for _, f := range strings.Split(*replicas, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			must(fmt.Errorf("-replicas %q: want counts of 1 or more, such as 1,2,4", *replicas))
		}
		replicaCounts = append(replicaCounts, n)
	}
	var costs []time.Duration
	for _, f := range strings.Split(*pdCosts, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 0 {
			must(fmt.Errorf("-pd-costs %q: want durations such as 0.7ms,0.7ms,13ms,26ms", *pdCosts))
		}
		costs = append(costs, d)
	}
	if *doEPP || *doTenants || *doPD || *doScaledown || len(replicaCounts) > 0 {
		// -epp, -tenants, -pd-topology, -scaledown or -replicas alone runs that experiment only; the others run when asked for.
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		*doOverhead = *doOverhead && set["overhead"]
		*doQuality = *doQuality && set["quality"]
	}

	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	ctrllog.SetLogger(klog.Background())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	progress("routerbench: seed %d, %d run(s); starting the control plane", *seed, *runs)
	c, err := startCluster(ctx)
	must(err)
	defer c.stop()

	var rec *recorder
	if *figures != "" {
		rec = newRecorder()
	}
	var tables []string
	if *doOverhead {
		t, err := runOverhead(ctx, c, overheadConfig{engines: *engines, conc: *conc, warm: *warm, dur: *dur, runs: *runs, nginx: *nginxBin, cpuProfile: *cpuProfile, rate: *rate, inProcess: *inProcess || *cpuProfile != "", rec: rec})
		if err != nil {
			c.stop()
			must(err)
		}
		tables = append(tables, t)
		fmt.Println(t)
	}
	cp := *cachePrompts
	if cp == 0 {
		cp = 2 * float64(*prompts) / float64(*qEngines)
	}
	qcfg := qualityConfig{engines: *qEngines, prompts: *prompts, users: *users, requests: *requests,
		systemTokens: *systemTokens, userTokens: *userTokens, maxTokens: *maxTokens, cachePrompts: cp,
		load: *load, realSeconds: *realSeconds, runs: *runs, seed: *seed}
	if *doQuality {
		qcfg := qcfg
		qcfg.rec = rec
		t, err := runQuality(ctx, c, qcfg)
		if err != nil {
			c.stop()
			must(err)
		}
		tables = append(tables, t)
		fmt.Println(t)
	}
	if len(replicaCounts) > 0 {
		qcfg := qcfg
		qcfg.rec = rec
		t, err := runReplicas(ctx, c, qcfg, replicaCounts)
		if err != nil {
			c.stop()
			must(err)
		}
		tables = append(tables, t)
		fmt.Println(t)
	}
	if *doEPP {
		r, err := runEPP(ctx, c, eppConfig{peer: *eppPeer, inProcess: *inProcess, engines: *eppEngines, rate: *eppRate, warm: *eppWarm, dur: *eppDur,
			csv: *eppCSV, quality: qcfg, rec: rec})
		if err != nil {
			c.stop()
			must(err)
		}
		tables = append(tables, r.table)
		fmt.Println(r.table)
	}
	if *doTenants {
		t, err := runTenants(ctx, c, tenantsConfig{engines: *tEngines, concurrency: *tConc, noisyConc: *tNoisy, noisyTokens: *tNoisyTokens,
			quietRequests: *tQuiet, quietTokens: *tQuietTokens, quietGap: *tGap, timeScale: *tScale, csv: *tCSV, rec: rec})
		if err != nil {
			c.stop()
			must(err)
		}
		tables = append(tables, t)
		fmt.Println(t)
	}
	if *doPD {
		t, err := runPDTopology(ctx, c, pdTopologyConfig{leaves: *pdLeaves, domainsPerLeaf: *pdDomains, nodesPerDomain: *pdNodes,
			requests: *pdRequests, promptTokens: *pdPrompt, maxTokens: *pdMaxTokens, load: *pdLoad, realSeconds: *pdSeconds,
			costs: costs, seed: *seed, csv: *pdCSV, rec: rec})
		if err != nil {
			c.stop()
			must(err)
		}
		tables = append(tables, t)
		fmt.Println(t)
	}
	if *doScaledown {
		qcfg := qcfg
		qcfg.skew = *sdSkew
		t, err := runScaledown(ctx, c, scaledownConfig{quality: qcfg, window: *sdWindow, csv: *sdCSV, rec: rec})
		if err != nil {
			c.stop()
			must(err)
		}
		tables = append(tables, t)
		fmt.Println(t)
	}
	if rec != nil {
		must(rec.write(*figures))
	}
	if *out != "" {
		header := fmt.Sprintf("Command: `go run ./bench/routerbench %s` (seed %d)\n\n", strings.Join(os.Args[1:], " "), *seed)
		must(os.WriteFile(*out, []byte(header+strings.Join(tables, "\n")), 0o644))
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "routerbench:", err)
		os.Exit(1)
	}
}

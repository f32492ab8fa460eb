package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/berth-sh/berth/internal/chatstream"
	"github.com/berth-sh/berth/internal/quantile"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/router/epp/epptest"
	"github.com/berth-sh/berth/pkg/router/pick"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// poolName is the InferencePool both endpoint pickers serve: the engine pods, port 8000.
const poolName = "engines"

// peerConfig is the Inference Extension reference EPP's scheduling configuration as its
// inferencepool chart ships it (templates/epp-config.yaml of v1.2.0): queue 2,
// KV-cache utilization 2, prefix cache 3, max-score picker. Written here so the run does
// not depend on a file next to the binary.
const peerConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
`

// peerScrape is the reference EPP's default --refresh-metrics-interval; berth-router's
// default --scrape-interval is 1s. Each picker reads the engines at its own default,
// scaled to the engines' clock.
const peerScrape = 50 * time.Millisecond

// eppBody is the latency experiment's request: one token out, streamed. Streamed because
// the reference EPP holds a non-streamed answer until its end before passing it on, which
// the lockstep data plane of epptest (one answer per chunk) cannot drive; a 1-token stream
// costs both pickers the same few chunks.
var eppBody = []byte(`{"model":"m","messages":[{"role":"user","content":"Say hello in one word, please."}],"max_tokens":1,"stream":true}`)

type eppConfig struct {
	peer      string // the peer EPP binary; "" runs berth-router's picker alone
	inProcess bool   // berth-router's picker inside this process instead of its own
	engines   int
	rate      float64 // latency: open-loop requests/s
	warm, dur time.Duration
	quality   qualityConfig
	csv       string // raw samples, one line per request
	rec       *recorder
}

// eppSetup is one picker configuration under test.
type eppSetup struct {
	name    string
	peer    bool // the reference EPP (else berth-router --mode=epp)
	policy  pick.Policy
	scorers string
}

// eppHandle is a running picker and Envoy's gRPC connection to it.
type eppHandle struct {
	conn       *grpc.ClientConn
	client     extprocv3.ExternalProcessorClient
	metricsURL string // its Prometheus endpoint
	histogram  string // its decision-time histogram there
	stop       func()
}

// eppSample is one request through a picker.
type eppSample struct {
	due      time.Time
	decision time.Duration // request end sent → decision received, at the data plane
	ttft     time.Duration // due → first content chunk back through the picker
	endpoint string
	err      error
}

// latencyOutcome is one picker's decision latency (ms) at the fixed rate.
type latencyOutcome struct {
	n, errs       int
	completed     float64 // requests/s answered: below the rate when the run could not keep up
	firstErr      error
	p50, p90, p99 float64
	max           float64
	serverLE1ms   float64 // share of decisions ≤ 1 ms by the picker's own histogram
	serverN       float64 // decisions that histogram counted
}

// eppReport is the experiment's outcome by picker name, and its tables.
type eppReport struct {
	latency map[string]latencyOutcome
	quality map[string]qualityOutcome
	samples int // lines of the CSV
	table   string
}

// runEPP runs both experiments for berth-router's picker (round robin and default scorers
// in the quality one) and, when cfg.peer names it, the reference EPP, each on fresh
// engines and a fresh picker, driven by the same emulated Envoy.
func runEPP(ctx context.Context, c *cluster, cfg eppConfig) (*eppReport, error) {
	if err := c.ensurePool(ctx); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "routerbench-epp-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := c.cp.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	var bin string
	if !cfg.inProcess {
		progress("epp: building cmd/router")
		if bin, err = buildRouter(dir); err != nil {
			return nil, err
		}
	}
	start := func(s eppSetup, scrape time.Duration) (*eppHandle, error) {
		switch {
		case s.peer:
			return startPeerEPP(ctx, cfg.peer, kubeconfig, dir, scrape)
		case cfg.inProcess:
			return c.startBerthEPP(ctx, s.policy, s.scorers, scrape)
		default:
			return startBerthEPPProcess(ctx, bin, kubeconfig, dir, s.policy, s.scorers, scrape)
		}
	}
	berth := eppSetup{name: "berth-router (default scorers)", policy: pick.Scored, scorers: pick.DefaultScorers}
	peer := eppSetup{name: "reference EPP (" + filepath.Base(cfg.peer) + ")", peer: true}
	latencySetups := []eppSetup{berth}
	qualitySetups := []eppSetup{{name: "round-robin (berth-router)", policy: pick.RoundRobin}, berth}
	if cfg.peer != "" {
		latencySetups = append(latencySetups, peer)
		qualitySetups = append(qualitySetups, peer)
	}
	var rows [][]string

	// Decision latency: fast engines, an open loop at cfg.rate.
	ips := engineIPs(30, cfg.engines)
	if err := c.setPods(ctx, ips); err != nil {
		return nil, err
	}
	lat := map[string]latencyOutcome{}
	for _, s := range latencySetups {
		progress("epp latency: %s, %.0f requests/s for %s after %s", s.name, cfg.rate, cfg.dur, cfg.warm)
		engines, err := startEngines(engine.Config{Model: modelName, TimeScale: 1e-4, MaxBatch: 1024}, ips)
		if err != nil {
			return nil, err
		}
		h, err := start(s, 0)
		if err != nil {
			closeEngines(engines)
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		o, samples := measureDecisions(ctx, h, cfg.rate, cfg.warm, cfg.dur)
		h.stop()
		closeEngines(engines)
		for i, x := range samples {
			rows = append(rows, sampleRow("latency", s.name, i, samples[0].due, x))
		}
		lat[s.name] = o
		cfg.rec.eppLatency(s.name, samples)
	}

	// Quality: the quality experiment's shared-prefix workload and engines.
	q := cfg.quality
	qips := engineIPs(31, q.engines)
	if err := c.setPods(ctx, qips); err != nil {
		return nil, err
	}
	ecfg, perSec := q.engineConfig()
	load := q.workload(0)
	progress("epp quality: %d requests at %.1f requests/s (simulated), TimeScale %.3f", len(load), perSec, ecfg.TimeScale)
	qual := map[string]qualityOutcome{}
	for _, s := range qualitySetups {
		progress("epp quality: %s", s.name)
		engines, err := startEngines(ecfg, qips)
		if err != nil {
			return nil, err
		}
		scrape := time.Duration(float64(time.Second) * ecfg.TimeScale)
		if s.peer {
			scrape = time.Duration(float64(peerScrape) * ecfg.TimeScale)
		}
		h, err := start(s, scrape)
		if err != nil {
			closeEngines(engines)
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		cl := newHTTPClient(0)
		samples := eppReplay(ctx, h, cl, load, ecfg.TimeScale)
		h.stop()
		cl.CloseIdleConnections()
		o := summarizeQuality(samples, ecfg.TimeScale, engines)
		closeEngines(engines)
		for i, x := range samples {
			rows = append(rows, sampleRow("quality", s.name, i, samples[0].due, x))
		}
		progress("  TTFT p50 %.0f ms p90 %.0f ms, prefix hit rate %.0f%%, %d errors", o.ttftP50, o.ttftP90, 100*o.hitRate, o.errs)
		qual[s.name] = o
		cfg.rec.eppQuality(s.name, samples, ecfg.TimeScale)
	}

	if cfg.csv != "" {
		if err := writeCSV(cfg.csv, rows); err != nil {
			return nil, err
		}
		progress("epp: %d samples written to %s", len(rows), cfg.csv)
	}

	var b strings.Builder
	where := "its own process"
	if cfg.inProcess {
		where = "the benchmark's process"
	}
	fmt.Fprintf(&b, "### Endpoint picker: decision latency, %d engines, %.0f requests/s for %s (after %s warm-up)\n\n", cfg.engines, cfg.rate, cfg.dur, cfg.warm)
	fmt.Fprintf(&b, "Each request is one ext_proc stream driven as Envoy drives it (pkg/router/epp/epptest, full-duplex streamed both ways): "+
		"headers and body, the decision, the request to the endpoint named, the streamed 1-token answer back through the picker. "+
		"Decision = from the request's last message sent to the decision received, at the data plane (client side, so it includes gRPC on loopback and waiting for CPU); "+
		"completed/s = requests ÷ time until the last was answered: below the rate, the run did not keep up and the latencies are queueing. "+
		"berth-router in %s; server side, the share of decisions its own histogram puts at ≤ 1 ms (berth: %s, parse to decision; peer: %s, scheduling only).\n\n",
		where, berthDecisionHistogram, peerDecisionHistogram)
	b.WriteString("| picker | requests | completed/s | decision p50 ms | p90 ms | p99 ms | max ms | ≤ 1 ms (own histogram) | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range latencySetups {
		o := lat[s.name]
		le := "–"
		if o.serverN > 0 {
			le = fmt.Sprintf("%.1f%% of %.0f", 100*o.serverLE1ms, o.serverN)
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.3f | %.3f | %.3f | %.3f | %s | %d |\n", s.name, o.n, o.completed, o.p50, o.p90, o.p99, o.max, le, o.errs)
	}
	bp99 := lat[berth.name].p99
	// The target is judged on the picker's own decision time (its histogram: p99 ≤ 1 ms when
	// at least 99% of decisions are ≤ 1 ms), at a rate the run sustained. The client-side
	// figure is shown beside it: on a 2-core machine it also counts gRPC on loopback and the
	// emulated Envoy waiting for the same cores, which a real Envoy on its own cores does not.
	bo := lat[berth.name]
	sustained := bo.completed >= 0.95*cfg.rate
	fmt.Fprintf(&b, "\nTarget: berth-router's decision p99 ≤ 1 ms at %.0f requests/s, by its own histogram at a rate the run sustained: "+
		"%.1f%% of decisions ≤ 1 ms, %.0f completed/s — %s (at the data plane, client side: p99 %.3f ms)\n",
		cfg.rate, 100*bo.serverLE1ms, bo.completed, verdict(sustained && bo.serverN > 0 && bo.serverLE1ms >= 0.99), bp99)
	if cfg.peer != "" {
		po := lat[peer.name]
		fmt.Fprintf(&b, "Ratios berth ÷ peer: decision p50 %.2f, p99 %.2f\n", lat[berth.name].p50/po.p50, bp99/po.p99)
	}
	for _, s := range latencySetups {
		if e := lat[s.name].firstErr; e != nil {
			fmt.Fprintf(&b, "\nFirst error through %s: %v\n", s.name, e)
		}
	}

	perSecQ, service := q.rate()
	fmt.Fprintf(&b, "\n### Endpoint picker: picking quality, %d engines, %d system prompts of %d tokens, %d users, %d requests\n\n",
		q.engines, q.prompts, q.systemTokens, q.users, len(load))
	fmt.Fprintf(&b, "The quality experiment's workload and engines (Poisson arrivals at %.1f requests/s simulated, %.0f%% of round robin's estimated capacity at %s per request; TimeScale %.3f), "+
		"the same trace for every picker, each on fresh engines. Each picker reads the engines' metrics at its own default interval in simulated time "+
		"(berth-router 1s, the reference EPP %s). TTFT in simulated ms, from each request's due time to the first content chunk passed back by the picker.\n\n",
		perSecQ, 100*q.load, service.Round(time.Millisecond), ecfg.TimeScale, peerScrape)
	b.WriteString("| picker | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | p90 ÷ round robin | prefix-cache hit rate | errors |\n|---|---:|---:|---:|---:|---:|---:|\n")
	rr := qual[qualitySetups[0].name].ttftP90
	for _, s := range qualitySetups {
		o := qual[s.name]
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %.2f | %.0f%% | %d |\n", s.name, o.ttftP50, o.ttftP90, o.ttftP99, o.ttftP90/rr, 100*o.hitRate, o.errs)
	}
	if cfg.peer != "" {
		bp, pp := qual[berth.name].ttftP90, qual[peer.name].ttftP90
		fmt.Fprintf(&b, "\nTarget: berth-router's TTFT p90 no worse than the peer's on the same trace: %.0f ms against %.0f (%.2f×) — %s\n", bp, pp, bp/pp, verdict(bp <= pp))
	}
	for _, s := range qualitySetups {
		if e := qual[s.name].firstErr; e != nil {
			fmt.Fprintf(&b, "\nFirst error through %s: %v\n", s.name, e)
		}
	}
	return &eppReport{latency: lat, quality: qual, samples: len(rows), table: b.String()}, nil
}

// measureDecisions sends eppBody through the picker at rate, for warm and then for dur,
// and summarizes the decisions of the second part: at the data plane, and as the
// picker's own histogram counts them.
func measureDecisions(ctx context.Context, h *eppHandle, rate float64, warm, dur time.Duration) (latencyOutcome, []eppSample) {
	cl := newHTTPClient(0)
	defer cl.CloseIdleConnections()
	eppOpenLoop(ctx, h, cl, rate, warm)
	before, _ := scrapeHistogram(h.metricsURL, h.histogram)
	t0 := time.Now()
	samples := eppOpenLoop(ctx, h, cl, rate, dur)
	o := latencyOutcome{n: len(samples), completed: float64(len(samples)) / time.Since(t0).Seconds()}
	after, herr := scrapeHistogram(h.metricsURL, h.histogram)

	ds, errs, firstErr := sortedOK(samples, func(x eppSample) float64 { return ms(x.decision) })
	o.errs, o.firstErr = errs, firstErr
	o.p50, o.p90, o.p99 = quantile.NearestRank(ds, 0.5), quantile.NearestRank(ds, 0.9), quantile.NearestRank(ds, 0.99)
	if len(ds) > 0 {
		o.max = ds[len(ds)-1]
	}
	if herr == nil {
		o.serverN = after.count - before.count
		if o.serverN > 0 {
			o.serverLE1ms = (after.le1ms - before.le1ms) / o.serverN
		}
	} else {
		progress("  reading %s from %s: %v", h.histogram, h.metricsURL, herr)
	}
	progress("  decision p50 %.3f ms, p99 %.3f ms; %.1f%% ≤ 1 ms by its own histogram; %.0f requests/s completed; %d errors", o.p50, o.p99, 100*o.serverLE1ms, o.completed, o.errs)
	return o, samples
}

// ensurePool creates the InferencePool of the engine pods (once per control plane).
func (c *cluster) ensurePool(ctx context.Context) error {
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1",
		"kind":       "InferencePool",
		"metadata":   map[string]any{"namespace": namespace, "name": poolName},
		"spec": map[string]any{
			"selector":    map[string]any{"matchLabels": map[string]any{"app": engineLabel}},
			"targetPorts": []any{map[string]any{"number": int64(enginePort)}},
		},
	}}
	if err := c.cl.Create(ctx, p); err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("creating InferencePool %s/%s: %w", namespace, poolName, err)
	}
	return nil
}

const (
	berthDecisionHistogram = "berth_router_epp_decision_duration_seconds"
	peerDecisionHistogram  = "inference_extension_scheduler_e2e_duration_seconds"
)

// startBerthEPP runs berth-router's picker in this process, over the pool.
func (c *cluster) startBerthEPP(ctx context.Context, policy pick.Policy, scorers string, scrape time.Duration) (*eppHandle, error) {
	r, err := router.New(c.cp.RESTConfig(), router.Options{Mode: router.ModeEPP, EPPAddr: "127.0.0.1:0", EPPHealthAddr: "127.0.0.1:0",
		EPPFallbacks: 2, EPPPool: namespace + "/" + poolName, AdminAddr: "127.0.0.1:0",
		Policy: policy, Scorers: scorers, ScrapeInterval: scrape, ShutdownTimeout: 5 * time.Second}, logr.Discard())
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	stop := func() { cancel(); <-done }
	select {
	case <-r.Ready():
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("berth-router stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		stop()
		return nil, errors.New("berth-router not ready after 30s")
	}
	h, err := dialEPP(ctx, r.EPPAddr(), "http://"+r.AdminAddr()+"/metrics", berthDecisionHistogram, stop, nil)
	if err != nil {
		stop()
		return nil, err
	}
	return h, nil
}

// startBerthEPPProcess runs the cmd/router binary in epp mode over the pool.
func startBerthEPPProcess(ctx context.Context, bin, kubeconfig, dir string, policy pick.Policy, scorers string, scrape time.Duration) (*eppHandle, error) {
	addr, haddr, aaddr, err := freePorts3()
	if err != nil {
		return nil, err
	}
	args := []string{"--kubeconfig", kubeconfig, "--mode", "epp", "--epp-addr", addr, "--epp-health-addr", haddr, "--epp-secure-serving=false",
		"--epp-pool", namespace + "/" + poolName, "--admin-addr", aaddr, "--metrics-auth=false", "--shutdown-delay", "0s",
		"--policy", string(policy)}
	if scorers != "" {
		args = append(args, "--scorers", scorers)
	}
	if scrape > 0 {
		args = append(args, "--scrape-interval", scrape.String())
	}
	return startEPPProcess(ctx, bin, args, nil, filepath.Join(dir, "berth-router-"+string(policy)+".log"), addr,
		"http://"+aaddr+"/metrics", berthDecisionHistogram)
}

// startPeerEPP runs the reference EPP binary over the same pods, with its chart's
// scheduling configuration, plaintext and without the metrics endpoint's authentication
// or tracing (nothing here collects traces). It is given the pool's selector and target
// port on its command line (its --endpoint-selector mode) rather than the pool's name:
// with a pool name it also watches InferenceObjectives (inference.networking.x-k8s.io),
// an API the control plane here does not serve. Either way it picks among the same Ready
// pods on the same port. In that mode it names its endpoint pool after POD_NAME, which a
// Deployment would set.
func startPeerEPP(ctx context.Context, bin, kubeconfig, dir string, scrape time.Duration) (*eppHandle, error) {
	addr, haddr, maddr, err := freePorts3()
	if err != nil {
		return nil, err
	}
	port := func(a string) string { return a[strings.LastIndex(a, ":")+1:] }
	args := []string{"--endpoint-selector", "app=" + engineLabel, "--endpoint-target-ports", strconv.Itoa(enginePort), "--pool-namespace", namespace,
		"--grpc-port", port(addr), "--grpc-health-port", port(haddr), "--metrics-port", port(maddr),
		"--secure-serving=false", "--metrics-endpoint-auth=false", "--tracing=false", "--enable-pprof=false",
		"--config-text", peerConfig}
	if scrape > 0 {
		args = append(args, "--refresh-metrics-interval", scrape.String())
	}
	return startEPPProcess(ctx, bin, args, []string{"KUBECONFIG=" + kubeconfig, "POD_NAME=routerbench-peer-epp"}, filepath.Join(dir, "peer-epp.log"), addr,
		"http://"+maddr+"/metrics", peerDecisionHistogram)
}

func freePorts3() (a, b, c string, err error) {
	if a, err = freePort(); err == nil {
		if b, err = freePort(); err == nil {
			c, err = freePort()
		}
	}
	return a, b, c, err
}

// startEPPProcess starts a picker binary, its output to logPath, and waits until it picks.
func startEPPProcess(ctx context.Context, bin string, args, env []string, logPath, addr, metricsURL, histogram string) (*eppHandle, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	h, err := dialEPP(ctx, addr, metricsURL, histogram, stop, exited)
	if err != nil {
		stop()
		return nil, fmt.Errorf("%s: %w (its log: %s)", filepath.Base(bin), err, tail(logPath))
	}
	return h, nil
}

// tail is the end of a log file, for an error message.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}
	return string(b)
}

// dialEPP connects to a picker and waits until a probe request goes through it to an
// engine: then its view holds the pool's pods. The probe has no system prompt, so it
// leaves nothing in a prefix cache a later request could hit.
func dialEPP(ctx context.Context, addr, metricsURL, histogram string, stop func(), exited <-chan struct{}) (*eppHandle, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	h := &eppHandle{conn: conn, client: extprocv3.NewExternalProcessorClient(conn), metricsURL: metricsURL, histogram: histogram}
	h.stop = func() { conn.Close(); stop() }
	cl := newHTTPClient(0)
	defer cl.CloseIdleConnections()
	for deadline := time.Now().Add(90 * time.Second); ; {
		x := envoyOnce(ctx, h, cl, eppBody, time.Now())
		if x.err == nil {
			return h, nil
		}
		if time.Now().After(deadline) {
			conn.Close()
			return nil, fmt.Errorf("picker at %s does not pick: %w", addr, x.err)
		}
		select {
		case <-exited:
			conn.Close()
			return nil, errors.New("picker exited before picking")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// envoyOnce sends one request through the picker as Envoy does: the ext_proc stream's
// request half, the request to the endpoint named, its answer back through the picker.
func envoyOnce(ctx context.Context, h *eppHandle, cl *http.Client, body []byte, due time.Time) (s eppSample) {
	s.due = due
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	x, err := epptest.Start(ctx, h.client, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED)
	if err != nil {
		s.err = err
		return s
	}
	d, err := x.SendRequest(epptest.Request{Method: http.MethodPost, Path: "/v1/chat/completions",
		Header: map[string]string{"content-type": "application/json"}, Body: body})
	if err != nil {
		s.err = fmt.Errorf("ext_proc request: %w", err)
		return s
	}
	s.decision = d.Answered.Sub(d.Sent)
	if d.Immediate != nil {
		s.err = fmt.Errorf("refused by the picker: %d %s", d.Immediate.GetStatus().GetCode(), d.Immediate.GetBody())
		return s
	}
	eps := d.Endpoints()
	if len(eps) == 0 && d.Metadata != "" {
		eps = strings.Split(d.Metadata, ",")
	}
	if len(eps) == 0 {
		s.err = errors.New("no endpoint named")
		return s
	}
	s.endpoint = eps[0]
	fwd := d.Body
	if len(fwd) == 0 {
		fwd = body
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.endpoint+"/v1/chat/completions", bytes.NewReader(fwd))
	if err != nil {
		s.err = err
		return s
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		s.err = err
		return s
	}
	defer resp.Body.Close()
	// The client reads what the picker passes back, as it reaches Envoy.
	pr, pw := io.Pipe()
	type first struct {
		d   time.Duration
		err error
	}
	got := make(chan first, 1)
	go func() {
		d, err := chatstream.FirstToken(pr, due)
		_, _ = io.Copy(io.Discard, pr)
		got <- first{d, err}
	}()
	_, err = x.SendResponse(epptest.Response{Status: resp.StatusCode, Header: resp.Header, Served: s.endpoint, Body: resp.Body,
		OnChunk: func(b []byte) { _, _ = pw.Write(b) }})
	pw.Close()
	f := <-got
	switch {
	case err != nil:
		s.err = fmt.Errorf("ext_proc response: %w", err)
	case resp.StatusCode/100 != 2:
		s.err = statusError(resp.StatusCode)
	case f.err != nil:
		s.err = f.err
	default:
		s.ttft = f.d
	}
	return s
}

// eppOpenLoop sends eppBody through the picker at rate for dur, each request on its own
// goroutine whatever the others do.
func eppOpenLoop(ctx context.Context, h *eppHandle, cl *http.Client, rate float64, dur time.Duration) []eppSample {
	n := int(rate * dur.Seconds())
	out := make([]eppSample, n)
	interval := time.Duration(float64(time.Second) / rate)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		wg.Go(func() { out[i] = envoyOnce(ctx, h, cl, eppBody, due) })
	}
	wg.Wait()
	return out
}

// eppReplay replays the quality workload through the picker on the engines' clock.
func eppReplay(ctx context.Context, h *eppHandle, cl *http.Client, load []arrival, scale float64) []eppSample {
	out := make([]eppSample, len(load))
	var wg sync.WaitGroup
	start := time.Now()
	for i, a := range load {
		due := start.Add(time.Duration(float64(a.at) * scale))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		wg.Go(func() { out[i] = envoyOnce(ctx, h, cl, a.body, due) })
	}
	wg.Wait()
	return out
}

// summarizeQuality gives TTFT in simulated ms and the engines' prefix-cache hit rate.
func summarizeQuality(samples []eppSample, scale float64, engines []*engine.Server) qualityOutcome {
	var o qualityOutcome
	good, errs, firstErr := sortedOK(samples, func(x eppSample) float64 { return float64(x.ttft) / scale / float64(time.Millisecond) })
	o.errs, o.firstErr = errs, firstErr
	o.ttftP50, o.ttftP90, o.ttftP99 = quantile.NearestRank(good, 0.5), quantile.NearestRank(good, 0.9), quantile.NearestRank(good, 0.99)
	o.hitRate = prefixHitRate(engines)
	return o
}

func sampleRow(experiment, picker string, i int, t0 time.Time, x eppSample) []string {
	e := ""
	if x.err != nil {
		e = x.err.Error()
	}
	return []string{experiment, picker, strconv.Itoa(i), strconv.FormatFloat(ms(x.due.Sub(t0)), 'f', 3, 64),
		strconv.FormatFloat(float64(x.decision)/float64(time.Microsecond), 'f', 1, 64),
		strconv.FormatFloat(ms(x.ttft), 'f', 3, 64), x.endpoint, e}
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"experiment", "picker", "request", "due_ms", "decision_us", "ttft_real_ms", "endpoint", "error"})
	_ = w.WriteAll(rows)
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// histogramReading is a decision histogram's count and its ≤ 1 ms bucket, summed over
// its label sets.
type histogramReading struct{ count, le1ms float64 }

// scrapeHistogram reads name's _count and le="0.001" bucket from a Prometheus text page.
// Both pickers' histograms have a 1 ms bound, so the share at or under it is exact, not
// interpolated.
func scrapeHistogram(url, name string) (histogramReading, error) {
	var r histogramReading
	resp, err := http.Get(url)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, statusError(resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return r, err
	}
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"_") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(line, name+"_count"):
			r.count += v
			found = true
		case strings.HasPrefix(line, name+"_bucket") && strings.Contains(line, `le="0.001"`):
			r.le1ms += v
		}
	}
	if !found {
		return r, fmt.Errorf("no %s on the page", name)
	}
	return r, nil
}

// sortedOK is f of every sample without an error, sorted, with the errors counted and the
// first kept.
func sortedOK(samples []eppSample, f func(eppSample) float64) (vals []float64, errs int, first error) {
	for _, x := range samples {
		if x.err != nil {
			errs++
			if first == nil {
				first = x.err
			}
			continue
		}
		vals = append(vals, f(x))
	}
	slices.Sort(vals)
	return vals, errs, first
}

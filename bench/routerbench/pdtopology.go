package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-sh/berth/internal/chatstream"
	"github.com/berth-sh/berth/internal/quantile"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// The -pd-topology experiment: a disaggregated ModelServer whose pdGroup lets every prefill
// pair with every decode (one groupKey value across them), on nodes in NVLink domains under
// leaves, with the simulated engines charging each KV handoff by how far it travels. The
// same Poisson workload goes through berth-router pairing by topology (its default) and
// pairing blind (--pd-topology=false: by load alone).

const (
	pdModel      = "pd"
	pdServerName = "pd-engines"
	pdLabel      = "routerbench-pd"
)

// pdTierNames name the levels of an engine's Location, nearest first, and the last entry
// of pdTopologyConfig.costs (no level shared).
var pdTierNames = []string{"node", "nvlink", "leaf", "far"}

type pdTopologyConfig struct {
	leaves, domainsPerLeaf, nodesPerDomain int // one prefill and one decode engine per node
	requests                               int
	promptTokens, maxTokens                int
	load                                   float64 // fraction of the prefill engines' capacity
	realSeconds                            float64
	// costs is the simulated time of one KV handoff by the level the prefill and decode
	// share, as pdTierNames.
	costs []time.Duration
	seed  uint64
	csv   string // one line per request (empty: none)
	rec   *recorder
}

type pdTopologyOutcome struct {
	name     string
	ttft     []float64      // ms, simulated
	tiers    map[string]int // pairs by level shared
	rows     [][2]string    // per request, in arrival order: level shared, TTFT (ms)
	errs     int
	firstErr error
}

var pdTopologyPolicies = []struct {
	name    string
	disable bool
}{{"topology-aware", false}, {"blind (by load)", true}}

// pdEngine is one engine of the experiment: its pod, node and place in the fabric.
type pdEngine struct {
	ip, pod, node string
	role          engine.Role
	location      []string // node, NVLink domain, leaf
}

func (cfg pdTopologyConfig) engines() []pdEngine {
	var out []pdEngine
	ips := engineIPs(70, 2*cfg.leaves*cfg.domainsPerLeaf*cfg.nodesPerDomain)
	for l := range cfg.leaves {
		for d := range cfg.domainsPerLeaf {
			for n := range cfg.nodesPerDomain {
				node := fmt.Sprintf("pd-l%d-d%d-n%d", l, d, n)
				loc := []string{node, fmt.Sprintf("l%d-d%d", l, d), fmt.Sprintf("l%d", l)}
				for _, role := range []engine.Role{engine.RolePrefill, engine.RoleDecode} {
					ip := ips[len(out)]
					out = append(out, pdEngine{ip: ip, pod: fmt.Sprintf("%s-%s", node, role), node: node, role: role, location: loc})
				}
			}
		}
	}
	return out
}

// rate is the arrival rate per simulated second: load × what the prefill engines prefill
// (prefill runs one prompt at a time per engine and dominates).
func (cfg pdTopologyConfig) rate() float64 {
	prefills := cfg.leaves * cfg.domainsPerLeaf * cfg.nodesPerDomain
	service := time.Duration(cfg.promptTokens)*prefillPerToken + decodeBase
	return cfg.load * float64(prefills) / service.Seconds()
}

func (cfg pdTopologyConfig) timeScale() float64 {
	span := float64(cfg.requests) / cfg.rate()
	return min(1, max(0.01, cfg.realSeconds/span))
}

// workload is the same for both policies: Poisson arrivals of prompts that share nothing
// (no prefix cache hit blurs the transfer cost).
func (cfg pdTopologyConfig) workload() []arrival {
	rng := rand.New(rand.NewPCG(cfg.seed, 7))
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	type request struct {
		Model     string    `json:"model"`
		Messages  []message `json:"messages"`
		MaxTokens int       `json:"max_tokens"`
		Stream    bool      `json:"stream"`
	}
	out := make([]arrival, cfg.requests)
	var at float64
	for i := range out {
		at += rng.ExpFloat64() / cfg.rate()
		body, _ := json.Marshal(request{Model: pdModel, MaxTokens: cfg.maxTokens, Stream: true, Messages: []message{
			{Role: "user", Content: words(rng, fmt.Sprintf("Request %d: ", i), cfg.promptTokens*4)}}})
		out[i] = arrival{at: time.Duration(at * float64(time.Second)), body: body}
	}
	return out
}

func runPDTopology(ctx context.Context, c *cluster, cfg pdTopologyConfig) (string, error) {
	engs := cfg.engines()
	if err := c.setPDObjects(ctx, engs); err != nil {
		return "", err
	}
	load := cfg.workload()
	var outs []pdTopologyOutcome
	for _, p := range pdTopologyPolicies {
		progress("pd-topology: %s (%d engines, %d requests at %.1f/s simulated, time scale %.3f)", p.name, len(engs), cfg.requests, cfg.rate(), cfg.timeScale())
		o, err := pdTopologyOnce(ctx, c, cfg, engs, load, p.disable)
		if err != nil {
			return "", fmt.Errorf("%s: %w", p.name, err)
		}
		o.name = p.name
		outs = append(outs, o)
		cfg.rec.pdRun(o.name, o.ttft, o.rows)
	}
	if cfg.csv != "" {
		if err := writePDTopologyCSV(cfg.csv, outs); err != nil {
			return "", err
		}
	}
	var b strings.Builder
	costs := make([]string, len(cfg.costs))
	for i, d := range cfg.costs {
		costs[i] = fmt.Sprintf("%s %s", pdTierNames[min(i, len(pdTierNames)-1)], d)
	}
	fmt.Fprintf(&b, "Topology-aware P/D pairing: %d leaves × %d NVLink domains × %d nodes, one prefill and one decode engine per node, one PD group across all; %d requests of %d new prompt tokens and %d out at %.0f%% of the prefill capacity (Poisson); a KV handoff costs (simulated) %s. TTFT in simulated ms; pairs by the closest level the prefill and decode share.\n\n",
		cfg.leaves, cfg.domainsPerLeaf, cfg.nodesPerDomain, cfg.requests, cfg.promptTokens, cfg.maxTokens, 100*cfg.load, strings.Join(costs, ", "))
	b.WriteString("| pairing | TTFT p50 | TTFT p90 | TTFT p99 | same node | same NVLink domain | same leaf | farther | errors |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, o := range outs {
		total := 0
		for _, n := range o.tiers {
			total += n
		}
		share := func(t string) string {
			if total == 0 {
				return "-"
			}
			return fmt.Sprintf("%.0f%%", 100*float64(o.tiers[t])/float64(total))
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.1f | %s | %s | %s | %s | %d |\n", o.name,
			quantile.NearestRank(o.ttft, 0.5), quantile.NearestRank(o.ttft, 0.9), quantile.NearestRank(o.ttft, 0.99),
			share("node"), share("nvlink"), share("leaf"), share("far"), o.errs)
	}
	for _, o := range outs {
		if o.firstErr != nil {
			fmt.Fprintf(&b, "\n%s: first error: %v\n", o.name, o.firstErr)
		}
	}
	return b.String(), nil
}

// pdTopologyOnce starts fresh engines and one router, replays load and stops them.
func pdTopologyOnce(ctx context.Context, c *cluster, cfg pdTopologyConfig, engs []pdEngine, load []arrival, blind bool) (pdTopologyOutcome, error) {
	scale := cfg.timeScale()
	hub := engine.NewKVHub()
	var servers []*engine.Server
	defer func() { closeEngines(servers) }()
	where := map[string][]string{}
	for _, e := range engs {
		s := engine.New(engine.Config{Model: pdModel, ID: namespace + "/" + e.pod, Role: e.role, Hub: hub, TimeScale: scale,
			PrefillPerToken: prefillPerToken, DecodeBase: decodeBase, DecodePerSeq: decodePerSeq,
			Location: e.location, KVTransferByTier: cfg.costs})
		if err := s.Start(engineAddr(e.ip)); err != nil {
			_ = s.Close()
			return pdTopologyOutcome{}, fmt.Errorf("engine %s: %w", e.pod, err)
		}
		servers = append(servers, s)
		where[namespace+"/"+e.pod] = e.location
	}
	probe := []byte(`{"model":"` + pdModel + `","messages":[{"role":"user","content":"hello"}],"max_tokens":1}`)
	rt, err := c.startRouterWith(ctx, router.Options{DisablePDTopology: blind, EndpointHeader: true, DisableGateway: true,
		ScrapeInterval: time.Duration(float64(time.Second) * scale)}, probe)
	if err != nil {
		return pdTopologyOutcome{}, err
	}
	defer rt.stop()

	cl := newHTTPClient(0)
	defer cl.CloseIdleConnections()
	ttft := make([]time.Duration, len(load))
	pairs := make([]string, len(load))
	failed := make([]error, len(load))
	var wg sync.WaitGroup
	start := time.Now()
	for i, a := range load {
		due := start.Add(time.Duration(float64(a.at) * scale))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		wg.Go(func() { ttft[i], pairs[i], failed[i] = pdStream(cl, rt.url, a.body, due) })
	}
	wg.Wait()

	o := pdTopologyOutcome{tiers: map[string]int{}}
	for i := range load {
		if failed[i] != nil {
			o.errs++
			if o.firstErr == nil {
				o.firstErr = failed[i]
			}
			continue
		}
		o.ttft = append(o.ttft, float64(ttft[i])/scale/float64(time.Millisecond))
		p, d, _ := strings.Cut(pairs[i], "+")
		tier := sharedLevel(where[p], where[d])
		o.tiers[tier]++
		o.rows = append(o.rows, [2]string{tier, strconv.FormatFloat(o.ttft[len(o.ttft)-1], 'f', 3, 64)})
	}
	slices.Sort(o.ttft)
	return o, nil
}

// sharedLevel names the closest level two locations share, as pdTierNames.
func sharedLevel(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] == b[i] {
			return pdTierNames[i]
		}
	}
	return pdTierNames[len(pdTierNames)-1]
}

// pdStream is streamOne that also returns the pair that served (X-Berth-Endpoint).
func pdStream(cl *http.Client, url string, body []byte, due time.Time) (time.Duration, string, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, "", statusError(resp.StatusCode)
	}
	d, err := chatstream.FirstToken(resp.Body, due)
	return d, resp.Header.Get("X-Berth-Endpoint"), err
}

// setPDObjects installs the experiment's Nodes (labelled as berth-scheduler's default
// tiers read them), its ModelServer and ModelRoute, and one Ready pod per engine on its
// node.
func (c *cluster) setPDObjects(ctx context.Context, engs []pdEngine) error {
	objs := []client.Object{
		&networkingv1alpha1.ModelServer{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: pdServerName},
			Spec: networkingv1alpha1.ModelServerSpec{
				InferenceEngine: networkingv1alpha1.VLLM,
				WorkloadSelector: &networkingv1alpha1.WorkloadSelector{MatchLabels: map[string]string{"app": pdLabel},
					PDGroup: &networkingv1alpha1.PDGroup{GroupKey: "pd-group",
						PrefillLabels: map[string]string{"pd-role": "prefill"}, DecodeLabels: map[string]string{"pd-role": "decode"}}},
				WorkloadPort: &networkingv1alpha1.WorkloadPort{Port: enginePort},
				KVConnector:  &networkingv1alpha1.KVConnectorSpec{Type: networkingv1alpha1.ConnectorTypeHTTP},
			},
		},
		&networkingv1alpha1.ModelRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: pdModel},
			Spec: networkingv1alpha1.ModelRouteSpec{
				ModelName: pdModel,
				Rules: []networkingv1alpha1.Rule{{Name: "all",
					TargetModels: []networkingv1alpha1.TargetModel{{ModelServerName: pdServerName, Weight: ptr.To[uint32](100)}}}},
			},
		},
	}
	nodes := map[string][]string{}
	for _, e := range engs {
		nodes[e.node] = e.location
	}
	for name, loc := range nodes {
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			corev1.LabelHostname: name, fabric.CliqueLabel: loc[1], "network.berth.sh/leaf": loc[2]}}})
	}
	for _, o := range objs {
		if err := c.cl.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	for _, e := range engs {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: e.pod,
				Labels: map[string]string{"app": pdLabel, "pd-group": "all", "pd-role": string(e.role)}},
			Spec: corev1.PodSpec{NodeName: e.node, Containers: []corev1.Container{{Name: "engine", Image: "vllm",
				Ports: []corev1.ContainerPort{{ContainerPort: enginePort}}}}},
		}
		if err := c.cl.Create(ctx, p); err != nil {
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			return err
		}
		now := metav1.Now()
		p.Status = corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: e.ip, PodIPs: []corev1.PodIP{{IP: e.ip}}, StartTime: &now,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		}
		if err := c.cl.Status().Update(ctx, p); err != nil {
			return fmt.Errorf("setting pod %s Running and Ready: %w", p.Name, err)
		}
	}
	return nil
}

func writePDTopologyCSV(path string, outs []pdTopologyOutcome) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"pairing", "level_shared", "ttft_ms"})
	for _, o := range outs {
		for _, r := range o.rows {
			_ = w.Write([]string{o.name, r[0], r[1]})
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

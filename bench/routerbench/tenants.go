package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/internal/chatstream"
	"github.com/berth-sh/berth/internal/quantile"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/router/fairqueue"
	"github.com/berth-sh/berth/pkg/router/tenant"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// tenantsConfig is the noisy/quiet tenants experiment: a noisy tenant keeps noisyConc
// streaming requests open (closed loop, noisyTokens out each) against engines the router
// sends at most concurrency requests at a time; a quiet tenant sends quietRequests short
// ones, one after another with quietGap between. The quiet tenant's TTFT is measured
// alone, beside the noisy one through the fair queue, and beside it in FIFO order.
type tenantsConfig struct {
	engines, concurrency   int
	noisyConc, noisyTokens int
	quietRequests          int
	quietTokens            int
	quietGap               time.Duration
	timeScale              float64
	csv                    string
	rec                    *recorder // nil: no figures
}

// tenantsOutcome is one configuration's result.
type tenantsOutcome struct {
	name     string
	ttft     []float64 // ms, the quiet tenant's
	wait     float64   // ms, the quiet tenant's mean queue wait
	noisyRPS float64
	errs     int64
	firstErr error
}

type tenantsSetup struct {
	name    string
	noisy   bool
	policy  fairqueue.Policy
	reserve bool
}

var tenantsConfigs = []tenantsSetup{
	{"quiet alone", false, fairqueue.Fair, false},
	{"with noisy, fair queue", true, fairqueue.Fair, false},
	{"with noisy, FIFO", true, fairqueue.FIFO, false},
	{"with noisy, fair queue + reserve", true, fairqueue.Fair, true},
}

func runTenants(ctx context.Context, c *cluster, cfg tenantsConfig) (string, error) {
	for _, k := range []string{"quiet", "noisy"} {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "key-" + k,
				Labels: map[string]string{tenant.APIKeyLabel: "true", tenant.TenantLabel: k}},
			Data: map[string][]byte{tenant.KeyField: []byte("sk-" + k)},
		}
		if err := c.cl.Create(ctx, s); err != nil && !strings.Contains(err.Error(), "already exists") {
			return "", err
		}
	}
	ips := engineIPs(60, cfg.engines)
	if err := c.setPods(ctx, ips); err != nil {
		return "", err
	}
	var outs []tenantsOutcome
	for _, tc := range tenantsConfigs {
		progress("tenants: %s (%d engines, %d requests each at a time)", tc.name, cfg.engines, cfg.concurrency)
		o, err := tenantsOnce(ctx, c, cfg, ips, tc)
		if err != nil {
			return "", fmt.Errorf("%s: %w", tc.name, err)
		}
		o.name = tc.name
		outs = append(outs, o)
		cfg.rec.tenantsRun(tc.name, o.ttft)
	}
	if cfg.csv != "" {
		if err := writeTenantsCSV(cfg.csv, outs); err != nil {
			return "", err
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Noisy and quiet tenants: %d engine(s), %d requests at a time each (--queue-concurrency), a noisy tenant keeping %d streams open (a cached 2000-token context, %d tokens out), a quiet one sending %d requests of %d new prompt tokens and 2 out, one after another (%s apart); the quiet tenant's TTFT (ms, real time at engine time scale %g).\n\n",
		cfg.engines, cfg.concurrency, cfg.noisyConc, cfg.noisyTokens, cfg.quietRequests, cfg.quietTokens, cfg.quietGap, cfg.timeScale)
	b.WriteString("| configuration | quiet TTFT p50 | quiet TTFT p90 | p90 / alone | quiet mean queue wait | noisy req/s | errors |\n|---|---|---|---|---|---|---|\n")
	alone := quantile.NearestRank(outs[0].ttft, 0.9)
	for _, o := range outs {
		p90 := quantile.NearestRank(o.ttft, 0.9)
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %.2f | %.1f | %.1f | %d |\n", o.name, quantile.NearestRank(o.ttft, 0.5), p90, p90/alone, o.wait, o.noisyRPS, o.errs)
	}
	for _, o := range outs {
		if o.firstErr != nil {
			fmt.Fprintf(&b, "\n%s: first error: %v\n", o.name, o.firstErr)
		}
	}
	return b.String(), nil
}

func tenantsOnce(ctx context.Context, c *cluster, cfg tenantsConfig, ips []string, tc tenantsSetup) (tenantsOutcome, error) {
	noisy := tc.noisy
	engines, err := startEngines(engine.Config{Model: modelName, TimeScale: cfg.timeScale}, ips)
	if err != nil {
		return tenantsOutcome{}, err
	}
	defer closeEngines(engines)
	r, err := router.New(c.cp.RESTConfig(), router.Options{
		Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second, ScrapeInterval: 100 * time.Millisecond, DisableGateway: true,
		Auth: router.AuthAPIKey, APIKeyNamespaces: []string{namespace},
		QueueConcurrency: cfg.concurrency, QueuePolicy: tc.policy, QueueReserve: tc.reserve, QueueTimeout: 5 * time.Minute,
	}, logr.Discard())
	if err != nil {
		return tenantsOutcome{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-r.Ready():
	case err := <-done:
		return tenantsOutcome{}, fmt.Errorf("router stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		return tenantsOutcome{}, fmt.Errorf("router not ready after 30s")
	}
	url := "http://" + r.Addr() + "/v1/chat/completions"
	cl := newHTTPClient(0)
	defer cl.CloseIdleConnections()
	// Each quiet prompt is new (its first block differs), so the engine prefills all of it:
	// its TTFT is mostly prefill, as a real question's is, not a prefix cache hit.
	quietN := 0
	quietBody := func() []byte {
		quietN++
		return []byte(fmt.Sprintf(`{"model":"m","stream":true,"messages":[{"role":"user","content":"q%06d %s"}],"max_tokens":2}`,
			quietN, strings.Repeat("word ", max(0, cfg.quietTokens*4-8)/5)))
	}
	// The noisy tenant sends one long context again and again (an agent's, a RAG corpus's):
	// the engine finds it in its prefix cache, but it counts in the tenant's tokens, so the
	// noisy tenant is the heavy one by tokens as well as by requests.
	noisyBody := []byte(fmt.Sprintf(`{"model":"m","stream":true,"messages":[{"role":"user","content":"A long task. %s"}],"max_tokens":%d}`,
		strings.Repeat("context ", 1000), cfg.noisyTokens))
	for deadline := time.Now().Add(30 * time.Second); ; {
		if _, err := tenantStream(cl, url, "sk-quiet", quietBody()); err == nil {
			break
		} else if time.Now().After(deadline) {
			return tenantsOutcome{}, fmt.Errorf("router at %s does not serve: %w", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	var o tenantsOutcome
	var noisyDone atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	fail := func(err error) { // with mu held
		if o.errs++; o.errs == 1 {
			o.firstErr = err
		}
	}
	if noisy {
		for range cfg.noisyConc {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := tenantStream(cl, url, "sk-noisy", noisyBody); err != nil {
						mu.Lock()
						fail(err)
						mu.Unlock()
						return
					}
					noisyDone.Add(1)
				}
			})
		}
		// The backlog builds before the quiet tenant starts.
		time.Sleep(time.Second)
	}
	waitCount0, waitSum0 := quietWait(r)
	start, before := time.Now(), noisyDone.Load()
	for range cfg.quietRequests {
		d, err := tenantStream(cl, url, "sk-quiet", quietBody())
		if err != nil {
			mu.Lock()
			fail(err)
			mu.Unlock()
		} else {
			o.ttft = append(o.ttft, float64(d)/float64(time.Millisecond))
		}
		time.Sleep(cfg.quietGap)
	}
	o.noisyRPS = float64(noisyDone.Load()-before) / time.Since(start).Seconds()
	waitCount, waitSum := quietWait(r)
	if n := waitCount - waitCount0; n > 0 {
		o.wait = (waitSum - waitSum0) / float64(n) * 1000
	}
	close(stop)
	wg.Wait()
	slices.Sort(o.ttft)
	if len(o.ttft) == 0 {
		return o, fmt.Errorf("no quiet request answered: %v", o.firstErr)
	}
	return o, nil
}

// tenantStream sends a streaming request with key and returns its time to first token.
func tenantStream(cl *http.Client, url, key string, body []byte) (time.Duration, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	start := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, statusError(resp.StatusCode)
	}
	return chatstream.FirstToken(resp.Body, start)
}

// quietWait is the quiet tenant's queue wait histogram: count and sum (seconds).
func quietWait(r *router.Router) (uint64, float64) {
	families, err := r.MetricsRegistry().Gather()
	if err != nil {
		return 0, 0
	}
	for _, f := range families {
		if f.GetName() != "berth_router_tenant_queue_wait_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabel(m, "tenant", "quiet") {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// writeTenantsCSV writes every quiet request's TTFT: configuration, ttft_ms.
func writeTenantsCSV(path string, outs []tenantsOutcome) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"configuration", "ttft_ms"})
	for _, o := range outs {
		for _, v := range o.ttft {
			_ = w.Write([]string{o.name, strconv.FormatFloat(v, 'f', 3, 64)})
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

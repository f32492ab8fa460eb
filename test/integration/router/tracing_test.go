package router

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"

	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/router/epp/epptest"
	"github.com/berth-sh/berth/pkg/router/tracing"
	"github.com/berth-sh/berth/pkg/router/tracing/tracingtest"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// tracedRouter is a berth-router of its own exporting spans to an in-process OTLP
// collector (the package's shared replicas do not trace).
// adjust, when set, changes its options.
func tracedRouter(t *testing.T, adjust ...func(*router.Options)) (*router.Router, *tracingtest.Collector) {
	t.Helper()
	coll, err := tracingtest.Start()
	require.NoError(t, err)
	t.Cleanup(coll.Close)
	o := router.Options{Addr: "127.0.0.1:0", EndpointHeader: true, ScrapeInterval: 100 * time.Millisecond,
		MaxBodyBytes: 1 << 20, ShutdownTimeout: time.Second, DisableGateway: true,
		Tracing: tracing.Config{Endpoint: coll.Addr(), Insecure: true, BatchTimeout: 50 * time.Millisecond}}
	for _, f := range adjust {
		f(&o)
	}
	r, err := router.New(cp.RESTConfig(), o, klog.Background().WithName("traced-router"))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("the traced router stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the traced router is not ready after 30s")
	}
	return r, coll
}

// headerLog records the traceparent of every completion request an engine receives.
type headerLog struct {
	mu   sync.Mutex
	seen map[string][]string // pod -> traceparents, in order
}

func (h *headerLog) watch(t *testing.T, w *world, pods ...string) {
	for _, p := range pods {
		e := w.engine(p)
		e.SetRequestHook(func(r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/completions") {
				h.mu.Lock()
				h.seen[p] = append(h.seen[p], r.Header.Get("Traceparent"))
				h.mu.Unlock()
			}
		})
		t.Cleanup(func() { e.SetRequestHook(nil) })
	}
}

func (h *headerLog) of(pod string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen[pod]...)
}

// post sends a chat completion with traceparent to the router at addr.
func post(t *testing.T, addr, model, traceparent string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
		strings.NewReader(fmt.Sprintf(`{"model":%q,"max_tokens":3,"messages":[{"role":"user","content":"trace me"}]}`, model)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", traceparent)
	req.Header.Set("Tracestate", "vendor=1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

// spansOf waits until the collector holds n spans of trace id and returns them by name.
func spansOf(w *world, coll *tracingtest.Collector, id string, n int) map[string][]tracingtest.Span {
	w.t.Helper()
	var got []tracingtest.Span
	w.eventually(fmt.Sprintf("%d spans of trace %s reach the collector", n, id), 10*time.Second, func() bool {
		got = coll.Trace(id)
		return len(got) >= n
	})
	time.Sleep(200 * time.Millisecond) // none more come
	got = coll.Trace(id)
	require.Len(w.t, got, n, "spans of trace %s: %+v", id, got)
	by := map[string][]tracingtest.Span{}
	for _, s := range got {
		by[s.Name] = append(by[s.Name], s)
	}
	return by
}

// parentOf is the parent span id of a traceparent header ("00-trace-span-flags").
func parentOf(t *testing.T, traceparent string) (traceID, spanID string) {
	t.Helper()
	parts := strings.Split(traceparent, "-")
	require.Len(t, parts, 4, "traceparent %q", traceparent)
	return parts[1], parts[2]
}

// With an OTLP endpoint configured, a request that came with a W3C traceparent makes
// spans in the caller's trace: the router's server span under the caller's span, a pick
// and an upstream attempt under it, naming the endpoint and attempt; the engine receives a
// traceparent whose parent is the attempt's span, so its spans join the trace. A retried
// request has two attempt spans, the first saying why it was retried.
func TestTraceSpansAndContext(t *testing.T) {
	w := newWorld(t, 1)
	r, coll := tracedRouter(t)
	w.servedPods("traced", 2, `  trafficPolicy: {retry: {attempts: 1, retryInterval: 10ms}}`, nil)
	w.eventually("the traced router scraped both endpoints", 30*time.Second, func() bool { return scrapedServer(r, w.ns, "traced", 2) })
	seen := &headerLog{seen: map[string][]string{}}
	pods := []string{"traced-0", "traced-1"}
	seen.watch(t, w, pods...)

	const trace1, caller = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	resp := post(t, r.Addr(), "traced", "00-"+trace1+"-"+caller+"-01")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	by := spansOf(w, coll, trace1, 3)
	require.Len(t, by["POST /v1/chat/completions"], 1, "one server span")
	server := by["POST /v1/chat/completions"][0]
	assert.Equal(t, caller, server.ParentID, "the router's span is a child of the caller's")
	assert.Equal(t, "berth-router", server.Service)
	assert.Equal(t, "200", server.Attrs["http.response.status_code"])
	assert.Equal(t, w.ns+"/traced", server.Attrs["berth.route"])
	require.Len(t, by["berth-router.pick"], 1)
	pk := by["berth-router.pick"][0]
	assert.Equal(t, server.ID, pk.ParentID, "the pick is a child of the request")
	endpoint := resp.Header.Get("X-Berth-Endpoint")
	assert.Equal(t, endpoint, pk.Attrs["berth.endpoint"])
	require.Len(t, by["berth-router.upstream"], 1)
	up := by["berth-router.upstream"][0]
	assert.Equal(t, server.ID, up.ParentID, "the attempt is a child of the request")
	assert.Equal(t, endpoint, up.Attrs["berth.endpoint"])
	assert.Equal(t, "1", up.Attrs["berth.attempt"])
	assert.Equal(t, "200", up.Attrs["http.response.status_code"])
	served := strings.TrimPrefix(resp.Header.Get("X-Sim-Engine"), w.ns+"/")
	got := seen.of(served)
	require.Len(t, got, 1, "engine %s got the request", served)
	tid, parent := parentOf(t, got[0])
	assert.Equal(t, trace1, tid, "the engine's traceparent carries the caller's trace")
	assert.Equal(t, up.ID, parent, "the engine's traceparent names the attempt's span as its parent")

	// Both engines fail: the request is tried on one, then (retry attempts: 1) the other,
	// whose 503 the client gets.
	for _, p := range pods {
		w.engine(p).SetFault(engine.Fault{Status: http.StatusServiceUnavailable})
	}
	const trace2 = "5bf92f3577b34da6a3ce929d0e0e4737"
	resp = post(t, r.Addr(), "traced", "00-"+trace2+"-"+caller+"-01")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	by = spansOf(w, coll, trace2, 5) // request, two picks, two attempts
	server = by["POST /v1/chat/completions"][0]
	assert.Equal(t, "2", server.Attrs["berth.attempts"])
	attempts := by["berth-router.upstream"]
	require.Len(t, attempts, 2, "a retried request has two attempt spans")
	if attempts[0].Attrs["berth.attempt"] == "2" {
		attempts[0], attempts[1] = attempts[1], attempts[0]
	}
	assert.Equal(t, "1", attempts[0].Attrs["berth.attempt"])
	assert.Equal(t, "2", attempts[1].Attrs["berth.attempt"])
	assert.Equal(t, "503", attempts[0].Attrs["berth.retry_reason"], "the first attempt says why it was retried")
	assert.Empty(t, attempts[1].Attrs["berth.retry_reason"], "the last attempt was not retried")
	assert.NotEqual(t, attempts[0].Attrs["berth.endpoint"], attempts[1].Attrs["berth.endpoint"], "the retry went to the other endpoint")
	spanOf := map[string]string{} // engine pod -> its attempt span
	for _, a := range attempts {
		assert.Equal(t, server.ID, a.ParentID)
		assert.Equal(t, "503", a.Attrs["http.response.status_code"])
		spanOf[strings.TrimPrefix(a.Attrs["berth.endpoint"], w.ns+"/")] = a.ID
	}
	for _, p := range pods {
		got := seen.of(p)
		require.NotEmpty(t, got, "engine %s", p)
		tid, parent := parentOf(t, got[len(got)-1])
		assert.Equal(t, trace2, tid)
		assert.Equal(t, spanOf[p], parent, "engine %s's traceparent names the attempt that reached it", p)
	}

	// The package's replicas do not trace: the caller's traceparent reaches the engine
	// unchanged.
	for _, p := range pods {
		w.engine(p).SetFault(engine.Fault{})
	}
	in := "00-6bf92f3577b34da6a3ce929d0e0e4738-" + caller + "-01"
	resp = post(t, routers[0].Addr(), "traced", in)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	served = strings.TrimPrefix(resp.Header.Get("X-Sim-Engine"), w.ns+"/")
	got = seen.of(served)
	assert.Equal(t, in, got[len(got)-1], "without tracing the router passes the traceparent on as it came")
	assert.Empty(t, coll.Trace("6bf92f3577b34da6a3ce929d0e0e4738"), "a router without tracing exports nothing")
}

// A disaggregated ModelServer's attempt has a span per leg, each the parent of the
// traceparent its engine received.
func TestTraceSpansPDLegs(t *testing.T) {
	w := newWorld(t, 1)
	r, coll := tracedRouter(t)
	const name = "traced-pd"
	for _, role := range []string{"prefill", "decode"} {
		w.pod(name+"-"+role, map[string]string{"app": name, "pd-group": "g1", "pd-role": role})
	}
	w.apply(fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: %[1]s}
spec:
  model: base-model
  inferenceEngine: vLLM
  workloadSelector:
    matchLabels: {app: %[1]s}
    pdGroup: {groupKey: pd-group, prefillLabels: {pd-role: prefill}, decodeLabels: {pd-role: decode}}
  kvConnector: {type: http}
`, name), fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: %[1]s}
spec:
  modelName: %[1]s
  rules: [{targetModels: [{modelServerName: %[1]s}]}]
`, name))
	w.waitEndpoints(name, 2)
	w.eventually("the traced router scraped both endpoints", 30*time.Second, func() bool { return scrapedServer(r, w.ns, name, 2) })
	seen := &headerLog{seen: map[string][]string{}}
	seen.watch(t, w, name+"-prefill", name+"-decode")

	const id = "7bf92f3577b34da6a3ce929d0e0e4739"
	resp := post(t, r.Addr(), name, "00-"+id+"-00f067aa0ba902b7-01")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	by := spansOf(w, coll, id, 5) // request, pick, attempt, prefill, decode
	require.Len(t, by["berth-router.upstream"], 1)
	up := by["berth-router.upstream"][0]
	assert.Equal(t, "http", up.Attrs["berth.kv_connector"])
	for _, leg := range []string{"prefill", "decode"} {
		spans := by["berth-router.upstream."+leg]
		require.Len(t, spans, 1, leg)
		assert.Equal(t, up.ID, spans[0].ParentID, "the %s leg is a child of the attempt", leg)
		assert.Equal(t, "200", spans[0].Attrs["http.response.status_code"])
		got := seen.of(name + "-" + leg)
		require.Len(t, got, 1, leg)
		tid, parent := parentOf(t, got[0])
		assert.Equal(t, id, tid)
		assert.Equal(t, spans[0].ID, parent, "the %s engine's traceparent names its leg's span", leg)
	}
}

// In epp mode the picker's decision is a span under the trace context of the headers the
// gateway passed on, naming the endpoints it chose.
func TestTraceSpanEPPPick(t *testing.T) {
	w := newWorld(t, 1)
	w.servedPods("traced-epp", 2, "", nil)
	r, coll := tracedRouter(t, func(o *router.Options) {
		o.Mode, o.EPPAddr, o.EPPHealthAddr, o.EPPFallbacks = router.ModeEPP, "127.0.0.1:0", "127.0.0.1:0", 1
	})
	w.eventually("the traced picker scraped both endpoints", 30*time.Second, func() bool { return scrapedServer(r, w.ns, "traced-epp", 2) })
	conn, err := grpc.NewClient(r.EPPAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	x, err := epptest.Start(ctx, extprocv3.NewExternalProcessorClient(conn), filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_NONE)
	require.NoError(t, err)
	const id, caller = "8bf92f3577b34da6a3ce929d0e0e4740", "00f067aa0ba902b7"
	d, err := x.SendRequest(epptest.Request{Method: "POST", Path: "/v1/chat/completions",
		Header: map[string]string{"content-type": "application/json", "traceparent": "00-" + id + "-" + caller + "-01"},
		Body:   []byte(`{"model":"traced-epp","max_tokens":3,"messages":[{"role":"user","content":"pick"}]}`)})
	require.NoError(t, err)
	require.Nil(t, d.Immediate, "picked, not refused")
	by := spansOf(w, coll, id, 1)
	require.Len(t, by["berth-router.pick"], 1)
	pk := by["berth-router.pick"][0]
	assert.Equal(t, caller, pk.ParentID, "the pick is a child of the gateway's span")
	assert.Equal(t, "epp", pk.Attrs["berth.mode"])
	assert.Equal(t, w.ns+"/traced-epp", pk.Attrs["berth.route"])
	assert.Equal(t, d.Endpoints()[0], pk.Attrs["berth.endpoint"], "the span names the primary endpoint")
}

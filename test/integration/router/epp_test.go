package router

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"k8s.io/apimachinery/pkg/types"

	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/router/epp/epptest"
	"github.com/berth-sh/berth/pkg/router/gateway"
)

// picker is a berth-router in epp mode over the test's control plane, with an ext_proc
// and a health client: Envoy's side of the protocol.
type picker struct {
	r      *router.Router
	client extprocv3.ExternalProcessorClient
	health healthpb.HealthClient
}

// startPicker runs a berth-router in epp mode until the test ends. Bodies are limited to
// 256 KiB so that the oversized case stays small. secure serves ext_proc over TLS with a
// self-signed certificate, which the client does not verify (as gateways configure it).
func startPicker(t *testing.T, secure bool) *picker { return startPickerFor(t, secure, "") }

// startPickerFor is startPicker choosing among the pods of InferencePool pool
// ("namespace/name"; "" matches ModelRoutes).
func startPickerFor(t *testing.T, secure bool, pool string) *picker {
	t.Helper()
	startSystem(t)
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{})
	r, err := router.New(cp.RESTConfig(), router.Options{Mode: router.ModeEPP, EPPAddr: "127.0.0.1:0", EPPHealthAddr: "127.0.0.1:0",
		EPPFallbacks: 2, EPPSecureServing: secure, EPPPool: pool,
		ScrapeInterval: 100 * time.Millisecond, MaxBodyBytes: 256 << 10, ShutdownTimeout: time.Second}, log.WithName("epp-router"))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			assert.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Error("the endpoint picker did not stop")
		}
	})
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("the endpoint picker stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the endpoint picker did not become ready")
	}
	creds := insecure.NewCredentials()
	if secure {
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a self-signed picker, as gateways reach it
	}
	conn, err := grpc.NewClient(r.EPPAddr(), grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	hconn, err := grpc.NewClient(r.EPPHealthAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { hconn.Close() })
	return &picker{r: r, client: extprocv3.NewExternalProcessorClient(conn), health: healthpb.NewHealthClient(hconn)}
}

func (p *picker) exchange(t *testing.T, ctx context.Context) *epptest.Exchange {
	t.Helper()
	x, err := epptest.Start(ctx, p.client, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, filterv3.ProcessingMode_FULL_DUPLEX_STREAMED)
	require.NoError(t, err)
	return x
}

// waitPicker waits until the picker sees n endpoints of the ModelServer, scraped.
func (w *world) waitPicker(p *picker, server string, n int) {
	w.t.Helper()
	w.eventually(fmt.Sprintf("the picker sees %d endpoints of ModelServer %s, each scraped", n, server), 60*time.Second, func() bool {
		return scrapedServer(p.r, w.ns, server, n)
	})
}

// podAt is the pod behind an endpoint address, as the picker's view knows it.
func (w *world) podAt(p *picker, server, addr string) string {
	for _, e := range p.r.View().Snapshot().Server(w.ns, server).Endpoints {
		if e.Address == addr {
			return e.Pod
		}
	}
	return ""
}

// envoyForward does what Envoy does with a decision: sends the body it was given to the
// first endpoint named, and passes the answer back through the picker.
func envoyForward(t *testing.T, ctx context.Context, x *epptest.Exchange, d *epptest.Decision, path string, onChunk func([]byte)) (served string, resp *http.Response, body []byte) {
	t.Helper()
	served = d.Endpoints()[0]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+served+path, bytes.NewReader(d.Body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Length", d.Header["content-length"])
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err = x.SendResponse(epptest.Response{Status: resp.StatusCode, Header: resp.Header, Served: served, Body: resp.Body, OnChunk: onChunk})
	require.NoError(t, err)
	return served, resp, body
}

// A whole ext_proc stream as Envoy drives it: the chat request in body chunks, the
// decision (header and envoy.lb metadata agreeing, fallbacks after the primary, the model
// name rewritten to the ModelServer's, content-length to match), the request sent to the
// endpoint named, and its streamed answer back through the picker chunk by chunk. The
// endpoint named is the one whose engine served; the load accounting is back to zero and
// the request is counted with the tokens the stream reported.
func TestEPPFullStream(t *testing.T) {
	w := newWorld(t, 1)
	// Real-time engines: tokens come tens of milliseconds apart, so the answer passes the
	// picker in pieces however slowly this process runs (under -race, a faster engine's 12
	// tokens could be read as one).
	w.servedPods("epp-chat", 3, "", map[string]string{timeScaleLabel: "1"})
	p := startPicker(t, false)
	w.waitPicker(p, "epp-chat", 3)

	for _, svc := range []string{"liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"} {
		r, err := p.health.Check(w.ctx, &healthpb.HealthCheckRequest{Service: svc})
		require.NoError(t, err, svc)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, r.GetStatus(), "%s is SERVING once the view is synced", svc)
	}

	before := map[string]int64{}
	for i := range 3 {
		pod := fmt.Sprintf("epp-chat-%d", i)
		before[pod] = w.engine(pod).Stats().Requests
	}
	ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	x := p.exchange(t, ctx)
	body := []byte(`{"model":"epp-chat","stream":true,"stream_options":{"include_usage":true},"max_tokens":12,"messages":[{"role":"user","content":"tell me about berths"}]}`)
	d, err := x.SendRequest(epptest.Request{Method: "POST", Path: "/v1/chat/completions", Header: map[string]string{"content-type": "application/json"},
		Body: body, ChunkSize: 16})
	require.NoError(t, err)
	require.Nil(t, d.Immediate, "picked, not refused")
	eps := d.Endpoints()
	require.Len(t, eps, 3, "the primary and two fallbacks")
	assert.Equal(t, strings.Join(eps, ","), d.Metadata, "header and envoy.lb metadata agree")
	assert.True(t, d.ClearRouteCache)
	assert.Contains(t, string(d.Body), `"model":"base-model"`, "the route's model name is rewritten to the ModelServer's")
	assert.Equal(t, fmt.Sprint(len(d.Body)), d.Header["content-length"])

	chunks := 0
	served, resp, out := envoyForward(t, ctx, x, d, "/v1/chat/completions", func([]byte) { chunks++ })
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(out))
	pod := w.podAt(p, "epp-chat", served)
	require.NotEmpty(t, pod)
	assert.Equal(t, w.ns+"/"+pod, resp.Header.Get("X-Sim-Engine"), "the endpoint named is the one that served")
	for i := range 3 {
		other := fmt.Sprintf("epp-chat-%d", i)
		want := before[other]
		if other == pod {
			want++
		}
		assert.Equal(t, want, w.engine(other).Stats().Requests, "engine %s's requests", other)
	}
	assert.Contains(t, string(out), "data: [DONE]", "the streamed answer reached the client whole")
	assert.Greater(t, chunks, 1, "streamed through in pieces")

	reg := p.r.MetricsRegistry()
	route := w.ns + "/epp-chat"
	w.eventually("the request is counted as served", 5*time.Second, func() bool {
		return counter(t, reg, "berth_router_requests_total", map[string]string{"route": route, "model": "epp-chat", "status": "200"}) == 1
	})
	assert.Zero(t, gauge(t, reg, "berth_router_inflight_requests"), "the in-flight slot is freed")
	assert.Equal(t, 12.0, counter(t, reg, "berth_router_tokens_total",
		map[string]string{"route": route, "model": "epp-chat", "type": "output", "target_kind": "ModelServer", "target": route}), "output tokens from the stream's usage")
	assert.Equal(t, 1.0, counter(t, reg, "berth_router_epp_requests_total", map[string]string{"result": "picked"}))
}

// Prefix affinity works as in the proxy: requests sharing a long prompt go to the endpoint
// that served it first (the prefix-cache scorer), while another prompt may go elsewhere.
func TestEPPPrefixAffinity(t *testing.T) {
	w := newWorld(t, 1)
	w.servedPods("epp-prefix", 3, "", nil)
	p := startPicker(t, false)
	w.waitPicker(p, "epp-prefix", 3)
	prompt := strings.Repeat("You are a careful assistant for harbour logistics. ", 20)
	var first string
	for i := range 5 {
		ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
		x := p.exchange(t, ctx)
		d, err := x.SendRequest(epptest.Request{Method: "POST", Path: "/v1/completions",
			Body: []byte(fmt.Sprintf(`{"model":"epp-prefix","max_tokens":2,"prompt":%q}`, prompt+fmt.Sprint(i)))})
		require.NoError(t, err)
		require.Nil(t, d.Immediate)
		served, resp, _ := envoyForward(t, ctx, x, d, "/v1/completions", nil)
		cancel()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		if i == 0 {
			first = served
		}
		assert.Equal(t, first, served, "request %d shares the prompt prefix and goes where it is cached", i)
	}
}

// Bad input gets a clear answer, never a crash (here over ext_proc with TLS): a model no route serves (404 with an OpenAI
// error), a body over the limit (413 as soon as it crosses it), a stream that ends in the
// middle of the body (no decision, counted cancelled); the picker serves the next request.
func TestEPPBadInput(t *testing.T) {
	w := newWorld(t, 1)
	w.servedPods("epp-bad", 1, "", nil)
	p := startPicker(t, true)
	w.waitPicker(p, "epp-bad", 1)
	ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	reg := p.r.MetricsRegistry()

	d, err := p.exchange(t, ctx).SendRequest(epptest.Request{Method: "POST", Path: "/v1/chat/completions",
		Body: []byte(`{"model":"nobody-serves-this","messages":[{"role":"user","content":"x"}]}`)})
	require.NoError(t, err)
	require.NotNil(t, d.Immediate)
	assert.EqualValues(t, http.StatusNotFound, d.Immediate.GetStatus().GetCode())
	assert.Contains(t, string(d.Immediate.GetBody()), `"code":"model_not_found"`)

	big := []byte(`{"model":"epp-bad","prompt":"` + strings.Repeat("x", 300<<10) + `"}`)
	d, err = p.exchange(t, ctx).SendRequest(epptest.Request{Method: "POST", Path: "/v1/completions", Body: big, ChunkSize: 32 << 10})
	require.NoError(t, err)
	require.NotNil(t, d.Immediate)
	assert.EqualValues(t, http.StatusRequestEntityTooLarge, d.Immediate.GetStatus().GetCode())
	assert.Contains(t, string(d.Immediate.GetBody()), "request body exceeds 262144 bytes")

	x := p.exchange(t, ctx)
	require.NoError(t, x.SendHeadersOnly("POST", "/v1/chat/completions"))
	require.NoError(t, x.SendPartialBody([]byte(`{"model":"epp-bad","messages":`)))
	require.NoError(t, x.Stream.CloseSend())
	_, err = x.Stream.Recv()
	assert.ErrorIs(t, err, io.EOF, "the picker ends the stream without an answer")
	w.eventually("the early end is counted", 5*time.Second, func() bool {
		return counter(t, reg, "berth_router_epp_requests_total", map[string]string{"result": "cancelled"}) == 1
	})

	// A bodiless GET /v1/models is answered by the picker, as by the proxy.
	d, err = p.exchange(t, ctx).SendRequest(epptest.Request{Method: "GET", Path: "/v1/models"})
	require.NoError(t, err)
	require.NotNil(t, d.Immediate)
	assert.EqualValues(t, http.StatusOK, d.Immediate.GetStatus().GetCode())
	assert.Contains(t, string(d.Immediate.GetBody()), `"id":"epp-bad"`)

	// A stream cancelled while the answer streams (the client went away) frees the
	// endpoint's in-flight slot; it is counted with the status that already went out, as
	// the proxy counts a stream its client cut.
	sctx, cancelStream := context.WithCancel(ctx)
	x = p.exchange(t, sctx)
	d, err = x.SendRequest(epptest.Request{Method: "POST", Path: "/v1/chat/completions", Body: []byte(`{"model":"epp-bad","stream":true,"messages":[{"role":"user","content":"x"}]}`)})
	require.NoError(t, err)
	require.Nil(t, d.Immediate)
	assert.Equal(t, 1.0, gauge(t, reg, "berth_router_inflight_requests"), "in flight from the decision on")
	firstChunk := make(chan struct{})
	sendErr := make(chan error, 1)
	go func() {
		_, err := x.SendResponse(epptest.Response{Status: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Served: d.Endpoints()[0],
			Body:    &stalledStream{ctx: sctx, first: []byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")},
			OnChunk: func([]byte) { close(firstChunk) }})
		sendErr <- err
	}()
	<-firstChunk
	cancelStream()
	assert.Error(t, <-sendErr)
	w.eventually("the cancelled stream's slot is freed", 5*time.Second, func() bool { return gauge(t, reg, "berth_router_inflight_requests") == 0 })
	assert.Equal(t, 1.0, counter(t, reg, "berth_router_requests_total", map[string]string{"route": w.ns + "/epp-bad", "status": "200"}))

	x = p.exchange(t, ctx)
	d, err = x.SendRequest(epptest.Request{Method: "POST", Path: "/v1/chat/completions", Body: []byte(`{"model":"epp-bad","max_tokens":2,"messages":[{"role":"user","content":"x"}]}`)})
	require.NoError(t, err)
	require.Nil(t, d.Immediate, "the picker serves on")
	_, resp, _ := envoyForward(t, ctx, x, d, "/v1/chat/completions", nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 3.0, counter(t, reg, "berth_router_epp_requests_total", map[string]string{"result": "refused"})+
		counter(t, reg, "berth_router_epp_requests_total", map[string]string{"result": "too_large"}))
}

// gauge is an unlabelled gauge's value.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}

// stalledStream is an engine's stream that sends one chunk and then nothing until ctx ends.
type stalledStream struct {
	ctx   context.Context
	first []byte
}

func (s *stalledStream) Read(p []byte) (int, error) {
	if len(s.first) > 0 {
		n := copy(p, s.first)
		s.first = s.first[n:]
		return n, nil
	}
	<-s.ctx.Done()
	return 0, s.ctx.Err()
}

// A picker deployed for one InferencePool, as the Inference Extension runs one per pool:
// it names only that pool's Ready pods (on its target port), whatever model the body asks
// for, passes the body on unchanged, and the pod it names is the one that serves. A picker
// whose pool does not exist refuses with a 503 naming it and keeps serving.
func TestEPPInferencePool(t *testing.T) {
	w := newWorld(t, 1)
	for i := range 2 {
		w.pod(fmt.Sprintf("pool-%d", i), poolPod("epp-pool"))
	}
	w.servedPods("epp-other", 1, "", nil) // a ModelServer's pod: never named by the pool's picker
	w.applyAny(pool("epp-pool", "epp-pool"))
	p := startPickerFor(t, false, w.ns+"/epp-pool")
	w.eventually("the picker sees the pool's 2 endpoints", 60*time.Second, func() bool {
		s := p.r.View().Snapshot().Backend(gateway.Backend{Kind: gateway.PoolBackend, NamespacedName: types.NamespacedName{Namespace: w.ns, Name: "epp-pool"}})
		return s != nil && len(s.Endpoints) == 2
	})
	poolAddrs := map[string]string{}
	for _, e := range p.r.View().Snapshot().Backend(gateway.Backend{Kind: gateway.PoolBackend, NamespacedName: types.NamespacedName{Namespace: w.ns, Name: "epp-pool"}}).Endpoints {
		poolAddrs[e.Address] = e.Pod
	}

	ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	body := []byte(`{"model":"base-model","max_tokens":4,"messages":[{"role":"user","content":"which pool?"}]}`)
	for range 3 {
		x := p.exchange(t, ctx)
		d, err := x.SendRequest(epptest.Request{Method: "POST", Path: "/v1/chat/completions", Header: map[string]string{"content-type": "application/json"},
			Body: body, ChunkSize: 32})
		require.NoError(t, err)
		require.Nil(t, d.Immediate, "picked, not refused")
		eps := d.Endpoints()
		require.Len(t, eps, 2, "the primary and the pool's one other endpoint as fallback")
		for _, e := range eps {
			assert.Contains(t, poolAddrs, e, "only the pool's pods are named")
		}
		assert.JSONEq(t, string(body), string(d.Body), "the body goes on unchanged")
		served, resp, out := envoyForward(t, ctx, x, d, "/v1/chat/completions", nil)
		assert.Equal(t, http.StatusOK, resp.StatusCode, string(out))
		assert.Equal(t, w.ns+"/"+poolAddrs[served], resp.Header.Get("X-Sim-Engine"), "the endpoint named is the one that served")
	}
	assert.Zero(t, w.engine("epp-other-0").Stats().Requests, "a pod outside the pool is never named")

	missing := startPickerFor(t, false, w.ns+"/no-such-pool")
	x := missing.exchange(t, ctx)
	d, err := x.SendRequest(epptest.Request{Method: "POST", Path: "/v1/chat/completions", Header: map[string]string{"content-type": "application/json"}, Body: body})
	require.NoError(t, err)
	require.NotNil(t, d.Immediate)
	assert.EqualValues(t, http.StatusServiceUnavailable, d.Immediate.GetStatus().GetCode())
	assert.Contains(t, string(d.Immediate.GetBody()), "InferencePool "+w.ns+"/no-such-pool")
	r, err := missing.health.Check(w.ctx, &healthpb.HealthCheckRequest{Service: "readiness"})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, r.GetStatus(), "the picker keeps serving")
}

package epp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/berth-sh/berth/pkg/router/epp"
	"github.com/berth-sh/berth/pkg/router/epp/epptest"
)

// chooser picks what the test says and records what it saw and how the lease went.
type chooser struct {
	mu      sync.Mutex
	queries []epp.Query
	choice  func(q *epp.Query) (*epp.Choice, *epp.Refusal)
	leases  []*lease
}

func (c *chooser) Choose(_ context.Context, q *epp.Query) (*epp.Choice, *epp.Refusal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queries = append(c.queries, *q)
	ch, ref := c.choice(q)
	if ch != nil {
		l := &lease{ended: make(chan epp.Outcome, 1)}
		ch.Lease = l
		c.leases = append(c.leases, l)
	}
	return ch, ref
}

func (c *chooser) lastLease(t *testing.T) *lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	require.NotEmpty(t, c.leases)
	return c.leases[len(c.leases)-1]
}

type lease struct {
	mu     sync.Mutex
	served []string
	ended  chan epp.Outcome
}

func (l *lease) Served(e string) { l.mu.Lock(); l.served = append(l.served, e); l.mu.Unlock() }
func (l *lease) End(o epp.Outcome) {
	select {
	case l.ended <- o:
	default:
		panic("lease ended twice")
	}
}

func (l *lease) outcome(t *testing.T) epp.Outcome {
	select {
	case o := <-l.ended:
		return o
	case <-time.After(5 * time.Second):
		t.Fatal("the lease never ended")
		return epp.Outcome{}
	}
}

type harness struct {
	client extprocv3.ExternalProcessorClient
	health healthpb.HealthClient
	h      *epp.Health
	reg    *prometheus.Registry
}

func start(t *testing.T, c epp.Chooser, maxBody int64) *harness {
	ln := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(8 << 20))
	reg := prometheus.NewRegistry()
	extprocv3.RegisterExternalProcessorServer(srv, epp.New(c, epp.Options{MaxBodyBytes: maxBody}, testr.New(t), reg))
	h := epp.NewHealth()
	healthpb.RegisterHealthServer(srv, h)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &harness{client: extprocv3.NewExternalProcessorClient(conn), health: healthpb.NewHealthClient(conn), h: h, reg: reg}
}

func (h *harness) exchange(t *testing.T, req, resp filterv3.ProcessingMode_BodySendMode) *epptest.Exchange {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	x, err := epptest.Start(ctx, h.client, req, resp)
	require.NoError(t, err)
	return x
}

// eventuallyCount waits for the stream result counter (counted when the server's side of
// the stream ends).
func (h *harness) eventuallyCount(t *testing.T, result string, want float64) {
	t.Helper()
	assert.Eventually(t, func() bool { return h.results(result) == want }, 5*time.Second, 10*time.Millisecond, "%s streams counted: %v", result, h.results(result))
}

func (h *harness) results(result string) float64 {
	mfs, _ := h.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "berth_router_epp_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

const fullDuplex, buffered = filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, filterv3.ProcessingMode_BUFFERED

var chatBody = []byte(`{"model":"alias","stream":true,"messages":[{"role":"user","content":"hello there"}]}`)

// rewriting picks 10.0.0.1:8000 with two fallbacks and renames the model "alias" to "base".
func rewriting(q *epp.Query) (*epp.Choice, *epp.Refusal) {
	return &epp.Choice{Endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"},
		Body: bytes.Replace(q.Body, []byte(`"alias"`), []byte(`"base"`), 1), Route: "ns/r", Model: "alias"}, nil
}

// A full-duplex stream as Envoy drives it for an InferencePool: the body arrives in
// chunks, the decision comes on the headers' answer once the body is whole (header,
// envoy.lb metadata, route cache cleared, content-length of the rewritten body), the body
// goes back rewritten, and the streamed response passes through chunk by chunk, its
// usage and served endpoint reaching the lease.
func TestFullDuplexStream(t *testing.T) {
	c := &chooser{choice: rewriting}
	h := start(t, c, 1<<20)
	x := h.exchange(t, fullDuplex, fullDuplex)
	d, err := x.SendRequest(epptest.Request{Method: "POST", Path: "/v1/chat/completions?x=1", Header: map[string]string{"content-type": "application/json", "x-request-id": "abc"},
		Body: chatBody, ChunkSize: 7})
	require.NoError(t, err)
	require.Nil(t, d.Immediate)
	assert.Equal(t, []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}, d.Endpoints(), "primary first, then fallbacks")
	assert.Equal(t, d.Header["x-gateway-destination-endpoint"], d.Metadata, "header and envoy.lb metadata carry the same value")
	assert.True(t, d.ClearRouteCache)
	want := bytes.Replace(chatBody, []byte(`"alias"`), []byte(`"base"`), 1)
	assert.Equal(t, string(want), string(d.Body), "the body Envoy forwards is the rewritten one")
	assert.Equal(t, strconv.Itoa(len(want)), d.Header["content-length"], "content-length matches the forwarded body")
	require.Len(t, c.queries, 1)
	q := c.queries[0]
	assert.Equal(t, "POST", q.Method)
	assert.Equal(t, "/v1/chat/completions", q.Path, "the query string is not part of the path")
	assert.Equal(t, string(chatBody), string(q.Body), "the chooser saw the whole body, reassembled from its chunks")
	assert.Equal(t, "abc", q.Header.Get("X-Request-Id"))
	assert.Nil(t, q.Subset, "no subset hint was sent")

	sse := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n"
	var chunks int
	out, err := x.SendResponse(epptest.Response{Status: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Served: "10.0.0.2:8000",
		Body: &slowReader{data: []byte(sse), n: 20}, OnChunk: func([]byte) { chunks++ }})
	require.NoError(t, err)
	assert.Equal(t, sse, string(out), "the streamed answer passes through unchanged")
	assert.Greater(t, chunks, 3, "chunk by chunk, not buffered")
	l := c.lastLease(t)
	o := l.outcome(t)
	assert.Equal(t, epp.Outcome{Status: 200, TTFT: o.TTFT, InputTokens: 5, OutputTokens: 2, Complete: true}, o)
	assert.False(t, o.TTFT != o.TTFT, "time to first token is known")
	assert.Equal(t, []string{"10.0.0.2:8000"}, l.served, "the served endpoint (a fallback) reaches the accounting")
	h.eventuallyCount(t, "picked", 1.0)
}

// slowReader returns n bytes per Read, as a network stream does.
type slowReader struct {
	data []byte
	n    int
}

func (r *slowReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	k := min(r.n, len(p), len(r.data))
	copy(p, r.data[:k])
	r.data = r.data[k:]
	return k, nil
}

// BUFFERED mode: Envoy waits for the headers' answer (empty: nothing decided yet), sends
// the whole body, and takes the decision, the replaced body and the header on the body's
// answer. A non-streaming JSON answer's usage is read too.
func TestBufferedStream(t *testing.T) {
	c := &chooser{choice: rewriting}
	h := start(t, c, 1<<20)
	x := h.exchange(t, buffered, buffered)
	d, err := x.SendRequest(epptest.Request{Method: "POST", Path: "/v1/chat/completions", Body: chatBody})
	require.NoError(t, err)
	require.Nil(t, d.Immediate)
	assert.Equal(t, "10.0.0.1:8000,10.0.0.2:8000,10.0.0.3:8000", d.Metadata)
	assert.Equal(t, d.Metadata, d.Header["x-gateway-destination-endpoint"])
	assert.True(t, d.ClearRouteCache)
	assert.Contains(t, string(d.Body), `"model":"base"`)
	out, err := x.SendResponse(epptest.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: strings.NewReader(`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7}}`)})
	require.NoError(t, err)
	assert.Contains(t, string(out), `"completion_tokens":7`)
	o := c.lastLease(t).outcome(t)
	assert.Equal(t, int64(7), o.OutputTokens)
	assert.Equal(t, 200, o.Status)
}

// A bodiless request (headers end the stream) is decided on its headers, and a body left
// unchanged goes back as it came.
func TestBodilessAndUnchanged(t *testing.T) {
	c := &chooser{choice: func(q *epp.Query) (*epp.Choice, *epp.Refusal) {
		return &epp.Choice{Endpoints: []string{"10.0.0.9:8000"}}, nil
	}}
	h := start(t, c, 1<<20)
	d, err := h.exchange(t, fullDuplex, fullDuplex).SendRequest(epptest.Request{Method: "GET", Path: "/v1/models"})
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.9:8000"}, d.Endpoints())
	assert.Nil(t, c.queries[0].Body, "no body")
	_, hasLength := d.Header["content-length"]
	assert.False(t, hasLength, "no body, no content-length")

	d, err = h.exchange(t, fullDuplex, fullDuplex).SendRequest(epptest.Request{Method: "POST", Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":"p"}`)})
	require.NoError(t, err)
	assert.Equal(t, `{"model":"m","prompt":"p"}`, string(d.Body))
}

// Trailers end the body: the decision comes on them, the body goes back without an end of
// stream, and the trailers get their answer.
func TestRequestTrailers(t *testing.T) {
	c := &chooser{choice: rewriting}
	h := start(t, c, 1<<20)
	d, err := h.exchange(t, fullDuplex, fullDuplex).SendRequest(epptest.Request{Method: "POST", Path: "/v1/chat/completions",
		Body: chatBody, ChunkSize: 30, Trailers: map[string]string{"x-checksum": "1"}})
	require.NoError(t, err)
	assert.True(t, d.Trailers)
	assert.Contains(t, string(d.Body), `"model":"base"`)
	assert.Equal(t, string(chatBody), string(c.queries[0].Body))
}

// The data plane's subset hint reaches the chooser, as a list or a comma-separated string.
func TestSubsetHint(t *testing.T) {
	c := &chooser{choice: rewriting}
	h := start(t, c, 1<<20)
	_, err := h.exchange(t, fullDuplex, fullDuplex).SendRequest(epptest.Request{Method: "POST", Path: "/v1/chat/completions", Body: chatBody,
		Subset: []any{"10.0.0.2:8000", "10.0.0.3:8000, 10.0.0.4"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4"}, c.queries[0].Subset)
	_, err = h.exchange(t, fullDuplex, fullDuplex).SendRequest(epptest.Request{Method: "POST", Path: "/v1/chat/completions", Body: chatBody, Subset: []any{}})
	require.NoError(t, err)
	assert.NotNil(t, c.queries[1].Subset, "an empty hint is a hint: nothing may be chosen")
	assert.Empty(t, c.queries[1].Subset)
}

// A refusal is Envoy's immediate response: the status, the OpenAI error body and the
// refusal's headers.
func TestRefusal(t *testing.T) {
	c := &chooser{choice: func(q *epp.Query) (*epp.Choice, *epp.Refusal) {
		return nil, &epp.Refusal{Status: 429, Code: "rate_limit_exceeded", Message: "ModelRoute ns/r rate limit: 10 input tokens per minute", Header: map[string]string{"retry-after": "7"}}
	}}
	h := start(t, c, 1<<20)
	d, err := h.exchange(t, fullDuplex, fullDuplex).SendRequest(epptest.Request{Method: "POST", Path: "/v1/chat/completions", Body: chatBody})
	require.NoError(t, err)
	require.NotNil(t, d.Immediate)
	assert.EqualValues(t, 429, d.Immediate.GetStatus().GetCode())
	var body struct {
		Error struct{ Message, Type, Code string }
	}
	require.NoError(t, json.Unmarshal(d.Immediate.GetBody(), &body))
	assert.Equal(t, "rate_limit_exceeded", body.Error.Code)
	assert.Equal(t, "rate_limit_exceeded", body.Error.Type)
	assert.Contains(t, body.Error.Message, "rate limit")
	hdr := map[string]string{}
	for _, o := range d.Immediate.GetHeaders().GetSetHeaders() {
		hdr[o.GetHeader().GetKey()] = string(o.GetHeader().GetRawValue())
	}
	assert.Equal(t, map[string]string{"content-type": "application/json", "retry-after": "7"}, hdr)
	h.eventuallyCount(t, "refused", 1.0)
}

// A body over the limit is refused with 413 as soon as it crosses it, and the server goes
// on serving the next stream.
func TestBodyTooLarge(t *testing.T) {
	c := &chooser{choice: rewriting}
	h := start(t, c, 64)
	big := []byte(`{"model":"alias","messages":[{"role":"user","content":"` + strings.Repeat("x", 200) + `"}]}`)
	for _, mode := range []filterv3.ProcessingMode_BodySendMode{fullDuplex, buffered} {
		d, err := h.exchange(t, mode, mode).SendRequest(epptest.Request{Method: "POST", Path: "/v1/chat/completions", Body: big, ChunkSize: 50})
		require.NoError(t, err, mode)
		require.NotNil(t, d.Immediate, mode)
		assert.EqualValues(t, 413, d.Immediate.GetStatus().GetCode())
		assert.Contains(t, string(d.Immediate.GetBody()), "request body exceeds 64 bytes")
	}
	assert.Empty(t, c.queries, "an oversized request is never chosen for")
	h.eventuallyCount(t, "too_large", 2.0)
	d, err := h.exchange(t, fullDuplex, fullDuplex).SendRequest(epptest.Request{Method: "POST", Path: "/v1/completions", Body: []byte(`{"model":"m"}`)})
	require.NoError(t, err)
	assert.Nil(t, d.Immediate, "the next request is served")
}

// A stream that ends before its body did is no decision (counted cancelled); one cancelled
// after the decision, while the answer streams, ends its lease incomplete so the endpoint's
// in-flight slot is freed.
func TestEarlyEnd(t *testing.T) {
	c := &chooser{choice: rewriting}
	h := start(t, c, 1<<20)
	x := h.exchange(t, fullDuplex, fullDuplex)
	require.NoError(t, x.SendHeadersOnly("POST", "/v1/chat/completions"))
	require.NoError(t, x.SendPartialBody([]byte(`{"model":`)))
	require.NoError(t, x.Stream.CloseSend())
	_, err := x.Stream.Recv()
	require.Error(t, err, "the picker answers nothing for a request that never ended")
	require.Eventually(t, func() bool { return h.results("cancelled") == 1 }, 5*time.Second, 10*time.Millisecond)
	assert.Empty(t, c.queries)

	ctx, cancel := context.WithCancel(context.Background())
	x, err = epptest.Start(ctx, h.client, fullDuplex, fullDuplex)
	require.NoError(t, err)
	_, err = x.SendRequest(epptest.Request{Method: "POST", Path: "/v1/chat/completions", Body: chatBody})
	require.NoError(t, err)
	cancel() // the client went away before the response
	o := c.lastLease(t).outcome(t)
	assert.False(t, o.Complete)
	assert.Equal(t, 0, o.Status)
}

// Messages out of order fail the stream with a status that says what came when; request
// body modes that cannot carry a decision are refused with a message naming the fix.
func TestProtocolErrors(t *testing.T) {
	c := &chooser{choice: rewriting}
	h := start(t, c, 1<<20)
	x := h.exchange(t, fullDuplex, fullDuplex)
	require.NoError(t, x.Stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{}}}))
	_, err := x.Stream.Recv()
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), "got response headers while before request headers")

	d, err := h.exchange(t, filterv3.ProcessingMode_STREAMED, filterv3.ProcessingMode_STREAMED).SendRequest(
		epptest.Request{Method: "POST", Path: "/v1/chat/completions", Body: chatBody})
	require.NoError(t, err)
	require.NotNil(t, d.Immediate)
	assert.EqualValues(t, 500, d.Immediate.GetStatus().GetCode())
	assert.Contains(t, string(d.Immediate.GetBody()), "FULL_DUPLEX_STREAMED")
	h.eventuallyCount(t, "invalid", 2.0)
}

// Liveness serves from the start; readiness, the ext_proc service and the server as a
// whole only once ready, and not after.
func TestHealth(t *testing.T) {
	h := start(t, &chooser{choice: rewriting}, 1<<20)
	check := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		r, err := h.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		require.NoError(t, err)
		return r.GetStatus()
	}
	serving, not := healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	assert.Equal(t, serving, check("liveness"))
	assert.Equal(t, not, check("readiness"))
	assert.Equal(t, not, check("envoy.service.ext_proc.v3.ExternalProcessor"))
	h.h.SetReady(true)
	assert.Equal(t, serving, check("readiness"))
	assert.Equal(t, serving, check("envoy.service.ext_proc.v3.ExternalProcessor"))
	assert.Equal(t, serving, check(""))
	h.h.SetReady(false)
	assert.Equal(t, not, check("readiness"))
	assert.Equal(t, serving, check("liveness"))
}

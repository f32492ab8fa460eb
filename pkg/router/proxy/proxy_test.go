package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-sh/berth/pkg/sim/engine"
)

// serveEngine serves a new engine over httptest, optionally through wrap.
func serveEngine(t *testing.T, cfg engine.Config, wrap func(http.Handler) http.Handler) (*engine.Server, *httptest.Server) {
	t.Helper()
	eng := engine.New(cfg)
	h := eng.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = eng.Close() }) // runs first: ends in-flight requests
	return eng, srv
}

// router serves a minimal router: Send to upstream, then Relay. Each Relay's result is
// delivered on the returned channel.
func router(t *testing.T, p *Proxy, upstream, path string) (*httptest.Server, <-chan Relayed) {
	t.Helper()
	results := make(chan Relayed, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		resp, err := p.Send(r.Context(), upstream, path, r.Header, nil, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		results <- Relay(w, resp, true)
	}))
	t.Cleanup(srv.Close)
	return srv, results
}

func result(t *testing.T, ch <-chan Relayed) Relayed {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("Relay did not return")
		return Relayed{}
	}
}

func chatBody(prompt string, maxTokens int, stream, usage bool) string {
	m := map[string]any{"model": "m", "messages": []map[string]any{{"role": "user", "content": prompt}}, "max_tokens": maxTokens}
	if stream {
		m["stream"] = true
	}
	if usage {
		m["stream_options"] = map[string]any{"include_usage": true}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// fakeResponse is an upstream response as the transport returns it.
func fakeResponse(status int, header http.Header, body string, length int64) *http.Response {
	return &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(strings.NewReader(body)), ContentLength: length}
}

func TestRelayStreamsChunkByChunk(t *testing.T) {
	release := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"content":"first"}}]}`+"\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"content":"second"}}]}`+"\n\n")
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(upstream.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	front, results := router(t, New(nil), upstream.URL, "/v1/chat/completions")

	resp, err := http.Post(front.URL, "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	rd := bufio.NewReader(resp.Body)

	first := make(chan string, 1)
	go func() {
		line, _ := rd.ReadString('\n')
		first <- line
	}()
	select {
	case line := <-first:
		assert.Contains(t, line, "first", "the first chunk arrives while the engine still holds the second")
	case <-time.After(5 * time.Second):
		t.Fatal("the first chunk was buffered")
	}
	close(release)
	rest, err := io.ReadAll(rd)
	require.NoError(t, err)
	assert.Contains(t, string(rest), "second")
	assert.True(t, strings.HasSuffix(string(rest), "data: [DONE]\n\n"))

	r := result(t, results)
	assert.NoError(t, r.Err)
	assert.Equal(t, http.StatusOK, r.Status)
	assert.EqualValues(t, 2, r.OutputTokens, "two chunks with choices and no usage")
	assert.False(t, r.FirstByte.IsZero())
	assert.Positive(t, r.Bytes)
}

func TestRelayHeadersAndStatus(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		length     int64
		body       string
		wantLength string
	}{
		{"ok with length", http.StatusOK, 11, `{"usage":1}`, "11"},
		{"unknown length", http.StatusOK, -1, `{"a":1}`, ""},
		{"rate limited", http.StatusTooManyRequests, 2, `{}`, "2"},
		{"engine error", http.StatusServiceUnavailable, -1, `{"error":{}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			h.Set("Content-Type", "application/json")
			h.Set("X-Request-Id", "abc")
			h.Add("Set-Cookie", "a=1")
			h.Add("Set-Cookie", "b=2")
			h.Set("Connection", "keep-alive, X-Engine-Private")
			h.Set("X-Engine-Private", "secret")
			h.Set("Keep-Alive", "timeout=5")
			h.Set("Transfer-Encoding", "chunked")
			h.Set("Upgrade", "h2c")
			h.Set("Proxy-Authenticate", "Basic")
			h.Set("Trailer", "X-Checksum")
			h.Set("Content-Length", "999") // a stale value must not reach the client
			w := httptest.NewRecorder()
			r := Relay(w, fakeResponse(tt.status, h, tt.body, tt.length), true)
			assert.NoError(t, r.Err)
			assert.Equal(t, tt.status, w.Code)
			assert.Equal(t, tt.status, r.Status)
			assert.Equal(t, tt.body, w.Body.String())
			assert.EqualValues(t, len(tt.body), r.Bytes)
			got := w.Result().Header
			assert.Equal(t, "application/json", got.Get("Content-Type"))
			assert.Equal(t, "abc", got.Get("X-Request-Id"))
			assert.Equal(t, []string{"a=1", "b=2"}, got.Values("Set-Cookie"))
			for _, hop := range []string{"Connection", "X-Engine-Private", "Keep-Alive", "Transfer-Encoding", "Upgrade", "Proxy-Authenticate", "Trailer"} {
				assert.Empty(t, got.Values(hop), hop)
			}
			assert.Equal(t, tt.wantLength, got.Get("Content-Length"))
		})
	}
}

func TestRelayCountsOutputTokens(t *testing.T) {
	sse := "text/event-stream; charset=utf-8"
	tests := []struct {
		name        string
		contentType string
		body        string
		want        int64
	}{
		{"usage chunk wins over chunk count", sse,
			"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":9}}\n\n" +
				"data: [DONE]\n\n", 9},
		{"chunks with choices when there is no usage", sse,
			"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n" +
				"data: {\"choices\":[]}\n\n" +
				": keep-alive comment\n\n" +
				"event: ping\ndata: not json\n\n" +
				"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
				"data: [DONE]\n\n", 3},
		{"null usage in every chunk", sse,
			"data: {\"choices\":[{\"text\":\"a\"}],\"usage\":null}\n\n" +
				"data: {\"choices\":[{\"text\":\"b\"}],\"usage\":null}\n\n", 2},
		{"continuous usage: the last one counts", sse,
			"data: {\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":1}}\n\n" +
				"data: {\"choices\":[{\"text\":\"b\"}],\"usage\":{\"completion_tokens\":2}}\n\n", 2},
		{"CRLF lines, no space after data:", sse,
			"data:{\"choices\":[{\"text\":\"a\"}]}\r\n\r\ndata:{\"choices\":[{\"text\":\"b\"}]}\r\n\r\n", 2},
		{"non-streaming body's usage", "application/json",
			`{"id":"x","choices":[{"message":{"content":"tok0 tok1"}}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`, 2},
		{"non-streaming body without usage", "application/json", `{"choices":[{"text":"a"}]}`, 0},
		{"non-streaming error body", "application/json", `{"error":{"message":"no"}}`, 0},
		{"non-streaming body that is not JSON", "text/plain", "data: {\"choices\":[1]}\n", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{"Content-Type": {tt.contentType}}
			w := httptest.NewRecorder()
			r := Relay(w, fakeResponse(http.StatusOK, h, tt.body, -1), true)
			require.NoError(t, r.Err)
			assert.Equal(t, tt.want, r.OutputTokens)
			assert.Equal(t, tt.body, w.Body.String())
		})
	}
}

func TestRelayCountsRealEngineTokens(t *testing.T) {
	_, up := serveEngine(t, engine.Config{Model: "m", TimeScale: 0.001}, nil)
	front, results := router(t, New(nil), up.URL, "/v1/chat/completions")
	for _, tt := range []struct {
		name          string
		stream, usage bool
	}{{"stream with usage", true, true}, {"stream without usage", true, false}, {"not streamed", false, false}} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post(front.URL, "application/json", strings.NewReader(chatBody("count me", 7, tt.stream, tt.usage)))
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
			r := result(t, results)
			require.NoError(t, r.Err)
			assert.EqualValues(t, 7, r.OutputTokens)
			assert.EqualValues(t, len(body), r.Bytes)
			assert.NotEmpty(t, resp.Header.Get("X-Sim-Engine"))
			if tt.stream {
				assert.Contains(t, string(body), "data: [DONE]")
			}
		})
	}
}

func TestRelayReportsABrokenClient(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"%d\"}]}\n\n", i); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
	}))
	t.Cleanup(upstream.Close)
	front, results := router(t, New(nil), upstream.URL, "/v1/completions")

	resp, err := http.Post(front.URL, "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "data:")
	require.NoError(t, resp.Body.Close()) // the client hangs up mid-stream

	r := result(t, results)
	require.Error(t, r.Err)
	assert.Equal(t, http.StatusOK, r.Status)
	assert.False(t, r.FirstByte.IsZero())
	assert.Positive(t, r.OutputTokens)
}

func TestRelayReportsABrokenEngine(t *testing.T) {
	h := http.Header{"Content-Type": {"text/event-stream"}}
	resp := &http.Response{StatusCode: 200, Header: h, ContentLength: -1, Body: io.NopCloser(io.MultiReader(
		strings.NewReader("data: {\"choices\":[{\"text\":\"a\"}]}\n\n"),
		iotestErrReader{errors.New("connection reset by peer")},
	))}
	w := httptest.NewRecorder()
	r := Relay(w, resp, true)
	require.Error(t, r.Err)
	assert.Contains(t, r.Err.Error(), "reading from the engine")
	assert.EqualValues(t, 1, r.OutputTokens)
	assert.Contains(t, w.Body.String(), `"a"`)
}

type iotestErrReader struct{ err error }

func (r iotestErrReader) Read([]byte) (int, error) { return 0, r.err }

func TestSendForwardsEndToEndHeaders(t *testing.T) {
	type seen struct {
		header http.Header
		length int64
		body   string
		path   string
		method string
	}
	got := make(chan seen, 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Header.Clone(), r.ContentLength, string(b), r.URL.Path, r.Method}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(upstream.Close)

	client := http.Header{}
	client.Set("Authorization", "Bearer token")
	client.Set("X-Custom", "kept")
	client.Set("Connection", "X-Hop-Private, keep-alive")
	client.Set("X-Hop-Private", "dropped")
	client.Set("Keep-Alive", "timeout=5")
	client.Set("Proxy-Authorization", "Basic cHJveHk=")
	client.Set("Te", "trailers")
	client.Set("Upgrade", "websocket")
	client.Set("Content-Length", "99999")
	client.Set("Content-Type", "text/plain")
	client.Set("Accept-Encoding", "gzip")
	client.Set("X-Request-Id", "from-client")
	body := []byte(`{"model":"m","prompt":"hello"}`)

	resp, err := New(nil).Send(context.Background(), upstream.URL, "/v1/completions", client,
		map[string]string{"X-Request-Id": "from-router", "X-Extra": "1"}, body)
	require.NoError(t, err)
	Discard(resp)
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)

	s := <-got
	assert.Equal(t, http.MethodPost, s.method)
	assert.Equal(t, "/v1/completions", s.path)
	assert.Equal(t, string(body), s.body)
	assert.EqualValues(t, len(body), s.length)
	assert.Equal(t, fmt.Sprint(len(body)), s.header.Get("Content-Length"))
	assert.Equal(t, "Bearer token", s.header.Get("Authorization"))
	assert.Equal(t, "kept", s.header.Get("X-Custom"))
	assert.Equal(t, "application/json", s.header.Get("Content-Type"))
	assert.Equal(t, "from-router", s.header.Get("X-Request-Id"), "extra headers are set on top")
	assert.Equal(t, "1", s.header.Get("X-Extra"))
	for _, h := range []string{"X-Hop-Private", "Keep-Alive", "Proxy-Authorization", "Te", "Upgrade", "Accept-Encoding"} {
		assert.Empty(t, s.header.Values(h), h)
	}
	assert.NotContains(t, strings.ToLower(strings.Join(s.header.Values("Connection"), ",")), "x-hop-private")

	// The caller's header is not changed.
	assert.Equal(t, "dropped", client.Get("X-Hop-Private"))
	assert.Equal(t, "from-client", client.Get("X-Request-Id"))
}

func TestSendDoesNotFollowRedirects(t *testing.T) {
	elsewhere := make(chan struct{}, 1)
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere <- struct{}{} }))
	t.Cleanup(other.Close)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/steal", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(upstream.Close)
	resp, err := New(nil).Send(context.Background(), upstream.URL, "/v1/completions", nil, nil, []byte(`{}`))
	require.NoError(t, err)
	Discard(resp)
	assert.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode)
	assert.Empty(t, elsewhere)
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestRetryable(t *testing.T) {
	live := context.Background()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	resp := func(code int) *http.Response { return &http.Response{StatusCode: code} }
	tests := []struct {
		name string
		ctx  context.Context
		resp *http.Response
		err  error
		want bool
	}{
		{"200", live, resp(200), nil, false},
		{"400 bad request", live, resp(400), nil, false},
		{"404 unknown model", live, resp(404), nil, false},
		{"408", live, resp(408), nil, false},
		{"429 busy", live, resp(429), nil, true},
		{"500", live, resp(500), nil, true},
		{"502", live, resp(502), nil, true},
		{"503", live, resp(503), nil, true},
		{"504", live, resp(504), nil, true},
		{"transport error", live, nil, errors.New("connection reset"), true},
		{"client canceled, transport error", canceled, nil, context.Canceled, false},
		{"client canceled, 503", canceled, resp(503), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, Retryable(tt.ctx, tt.resp, tt.err))
		})
	}
}

func TestDialFailed(t *testing.T) {
	p := New(nil)
	_, refused := p.Send(context.Background(), "http://"+closedAddr(t), "/v1/completions", nil, nil, []byte(`{}`))
	require.Error(t, refused)

	// A server that accepts and then hangs up: the request may have reached it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 1024)
			_, _ = c.Read(buf)
			c.Close()
		}
	}()
	_, hungUp := p.Send(context.Background(), "http://"+ln.Addr().String(), "/v1/completions", nil, nil, []byte(`{}`))
	require.Error(t, hungUp)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, canceled := p.Send(ctx, "http://"+closedAddr(t), "/v1/completions", nil, nil, []byte(`{}`))
	require.Error(t, canceled)

	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", refused, true},
		{"wrapped in a PrefillError", &PrefillError{Err: refused}, true},
		{"wrapped with %w", fmt.Errorf("attempt 1: %w", refused), true},
		{"connection closed after the request was sent", hungUp, false},
		{"canceled before dialing", canceled, false},
		{"plain error", errors.New("dial tcp: refused"), false},
		{"read error", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("reset")}, false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, DialFailed(tt.err), "%v", tt.err)
		})
	}
	assert.True(t, Retryable(context.Background(), nil, refused))
	assert.True(t, ClosedBeforeAnswer(hungUp), "%v", hungUp)
	assert.False(t, ClosedBeforeAnswer(refused), "%v", refused)
}

func TestRelayWithoutCounting(t *testing.T) {
	h := http.Header{"Content-Type": {"text/event-stream"}}
	body := "data: {\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":1}}\n\n"
	w := httptest.NewRecorder()
	r := Relay(w, fakeResponse(http.StatusOK, h, body, -1), false)
	require.NoError(t, r.Err)
	assert.Zero(t, r.OutputTokens)
	assert.Equal(t, body, w.Body.String())
}

func TestDiscard(t *testing.T) {
	Discard(nil) // no panic
	closed := false
	resp := &http.Response{Body: closeFunc{strings.NewReader("abc"), func() { closed = true }}}
	Discard(resp)
	assert.True(t, closed)
}

type closeFunc struct {
	io.Reader
	f func()
}

func (c closeFunc) Close() error { c.f(); return nil }

// Anthropic's usage counts as OpenAI's does: input_tokens plus the cached input, and
// output_tokens, from a message or from a stream's message_start and message_delta.
func TestRelayCountsAnthropicUsage(t *testing.T) {
	for _, tt := range []struct {
		name, contentType, body string
		in, out                 int64
	}{
		{"message", "application/json",
			`{"id":"msg_1","type":"message","content":[{"type":"text","text":"a b"}],"usage":{"input_tokens":10,"cache_creation_input_tokens":3,"cache_read_input_tokens":4,"output_tokens":2}}`,
			17, 2},
		{"stream", "text/event-stream",
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n" +
				"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n" +
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" b\"}}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n" +
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
			9, 2},
		{"stream without usage counts deltas", "text/event-stream",
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n" +
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
			0, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			r := Relay(w, fakeResponse(http.StatusOK, http.Header{"Content-Type": {tt.contentType}}, tt.body, -1), true)
			require.NoError(t, r.Err)
			assert.Equal(t, tt.in, r.InputTokens, "input")
			assert.Equal(t, tt.out, r.OutputTokens, "output")
			assert.Equal(t, tt.body, w.Body.String())
		})
	}
}

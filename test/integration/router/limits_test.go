package router

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// logBuffer collects what a logger writes, safe for the router's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

// startLimitedRouter runs a berth-router of its own in proxy mode (the shared ones keep
// the defaults) with short header and idle timeouts, logging as berth-router's main sets
// up its logger when no --zap-* flag is given, into logs.
func startLimitedRouter(t *testing.T, readHeader, idle time.Duration, logs io.Writer) *router.Router {
	t.Helper()
	startSystem(t)
	zopts := zap.Options{DestWriter: logs}
	r, err := router.New(cp.RESTConfig(), router.Options{Addr: "127.0.0.1:0", ReadHeaderTimeout: readHeader, IdleTimeout: idle,
		ScrapeInterval: 100 * time.Millisecond, ShutdownTimeout: time.Second, DisableGateway: true},
		zap.New(zap.UseFlagOptions(&zopts)).WithName("berth-router"))
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
			t.Error("the router did not stop")
		}
	})
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("the router stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the router did not become ready")
	}
	return r
}

// rawGet sends GET path on conn with an extra header of size bytes (none when 0) and reads
// the answer. The request is written from another goroutine: a server refusing it may
// answer and close before it has read it all.
func rawGet(t *testing.T, conn net.Conn, br *bufio.Reader, path string, size int) *http.Response {
	t.Helper()
	go func() {
		var b strings.Builder
		fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: router\r\n", path)
		if size > 0 {
			fmt.Fprintf(&b, "X-Big: %s\r\n", strings.Repeat("a", size))
		}
		b.WriteString("\r\n")
		_, _ = io.WriteString(conn, b.String())
	}()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
}

// closedWithin waits (at most bound) for the server to close conn, and says how long that took.
func closedWithin(t *testing.T, conn net.Conn, br *bufio.Reader, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	require.NoError(t, conn.SetReadDeadline(start.Add(bound)))
	_, err := br.ReadByte()
	var nerr net.Error
	if errors.As(err, &nerr) && nerr.Timeout() {
		t.Fatalf("the router kept the connection open for %s", bound)
	}
	require.ErrorIs(t, err, io.EOF, "the router closed the connection, sending nothing")
	return time.Since(start)
}

// The listener's limits, as docs/router.md ("Safe by default") states them: request
// headers over 1 MiB get 431 while 1 MiB less a little passes; a client that has not sent
// its headers within the header read timeout is disconnected; an idle keep-alive
// connection is closed after the idle timeout, not before. Short timeouts here (the
// defaults are 10 s and 120 s), the same listener code.
func TestListenerLimits(t *testing.T) {
	const readHeader, idle = time.Second, 1500 * time.Millisecond
	r := startLimitedRouter(t, readHeader, idle, io.Discard)
	dial := func() (net.Conn, *bufio.Reader) {
		conn, err := net.Dial("tcp", r.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		return conn, bufio.NewReader(conn)
	}

	t.Run("headers over 1 MiB get 431", func(t *testing.T) {
		conn, br := dial()
		resp := rawGet(t, conn, br, "/v1/models", 1<<20+8<<10)
		assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
		conn, br = dial()
		resp = rawGet(t, conn, br, "/v1/models", 1<<20-8<<10)
		assert.Equal(t, http.StatusOK, resp.StatusCode, "headers just under 1 MiB are served")
	})

	t.Run("headers not sent in time", func(t *testing.T) {
		conn, br := dial()
		_, err := io.WriteString(conn, "GET /v1/models HTTP/1.1\r\nHost: router\r\n") // and nothing more
		require.NoError(t, err)
		took := closedWithin(t, conn, br, readHeader+10*time.Second)
		t.Logf("disconnected after %s (read header timeout %s)", took.Round(time.Millisecond), readHeader)
		assert.GreaterOrEqual(t, took, readHeader-200*time.Millisecond, "not before the timeout")
	})

	t.Run("idle keep-alive connection", func(t *testing.T) {
		conn, br := dial()
		resp := rawGet(t, conn, br, "/v1/models", 0)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.False(t, resp.Close, "the connection is kept alive")
		took := closedWithin(t, conn, br, idle+10*time.Second)
		t.Logf("closed after %s idle (idle timeout %s)", took.Round(time.Millisecond), idle)
		assert.GreaterOrEqual(t, took, idle-200*time.Millisecond, "not before the idle timeout")
	})
}

// The router's logs are JSON lines (zap's production encoder, berth-router's default), and
// a failed request is logged at info level with what docs/router.md lists: route, server,
// endpoint, attempts and reason (and its status and the model it asked for).
func TestFailedRequestLogLine(t *testing.T) {
	w := newWorld(t, 1)
	logs := &logBuffer{}
	r := startLimitedRouter(t, 10*time.Second, time.Minute, logs)
	w.servedPods("logged", 1, "", nil)
	w.eventually("the router sees the endpoint, scraped", 60*time.Second, func() bool { return scrapedServer(r, w.ns, "logged", 1) })
	w.engine("logged-0").SetFault(engine.Fault{Status: http.StatusInternalServerError})

	resp, err := http.Post("http://"+r.Addr()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"logged","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode, "the engine's error reaches the client")

	var line map[string]any
	w.eventually("the failed request is logged", 5*time.Second, func() bool {
		for _, l := range logs.lines() {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" && m["route"] == w.ns+"/logged" {
				line = m
				return true
			}
		}
		return false
	})
	for _, l := range logs.lines() {
		assert.True(t, json.Valid([]byte(l)), "every log line is JSON: %s", l)
	}
	assert.Equal(t, "info", line["level"])
	assert.Equal(t, "berth-router", line["logger"])
	assert.Contains(t, line, "ts")
	assert.EqualValues(t, 500, line["status"])
	assert.Equal(t, "logged", line["model"])
	assert.Equal(t, w.ns+"/logged", line["server"])
	assert.Equal(t, w.ns+"/logged-0", line["endpoint"])
	assert.EqualValues(t, 1, line["attempts"])
	assert.NotEmpty(t, line["reason"], "%v", line)
}

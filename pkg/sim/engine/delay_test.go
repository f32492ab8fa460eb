package engine

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"
)

// A delayed answer ends when its client goes away, as a real engine's work does: behind a
// plain HTTP/1.1 server (as tests put an engine behind a fake provider), the handler is
// over soon after the client gave up, not when the delay runs out. (It once slept before
// reading the body, when the server cannot see the client leave: a test with an hour's
// delay hung in its server's Close.)
func TestDelayEndsWhenTheClientGoesAway(t *testing.T) {
	s := New(Config{Model: "m", TimeScale: 0.001})
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	s.SetFault(Fault{Delay: time.Hour})
	for _, path := range []string{"/v1/completions", "/v1/messages"} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := do(ctx, srv.URL+path, map[string]any{"model": "m", "prompt": "x", "max_tokens": 1,
			"messages": []map[string]any{{"role": "user", "content": "x"}}}, nil)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: err = %v, want the client's deadline", path, err)
		}
	}
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }() // Close waits for every handler
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the delayed handlers still run 5s after their clients went away")
	}
}

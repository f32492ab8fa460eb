package ratelimit

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/berth-sh/berth/internal/redistest"
)

// redisAddr is the one redis-server shared by this package's tests.
var redisAddr string

func TestMain(m *testing.M) {
	srv, err := redistest.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr = srv.Addr()
	code := m.Run()
	srv.Close()
	os.Exit(code)
}

// replicas returns two limiters on the shared server, each with its own
// client, as two router replicas would have, and a unique route key.
func replicas(t *testing.T) (a, b *Redis, key string) {
	t.Helper()
	ca, cb := NewClients(), NewClients()
	t.Cleanup(func() { ca.Close(); cb.Close() })
	a, err := ca.Limiter(redisAddr)
	if err != nil {
		t.Fatal(err)
	}
	b, err = cb.Limiter(redisAddr)
	if err != nil {
		t.Fatal(err)
	}
	// Unique per call, so that -count=N reruns on the same server start afresh.
	return a, b, fmt.Sprintf("test/%s/%d", t.Name(), keySeq.Add(1))
}

var keySeq atomic.Int64

func mustAdmit(t *testing.T, l Limiter, key string, lim Limits, n int64) Decision {
	t.Helper()
	d, err := l.Admit(context.Background(), key, lim, n)
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	return d
}

func TestRedisReplicasShareOneBudget(t *testing.T) {
	a, b, key := replicas(t)
	lim := Limits{InputPerUnit: 100, Unit: time.Minute}
	for i := range 10 {
		r := a
		if i%2 == 1 {
			r = b
		}
		if d := mustAdmit(t, r, key, lim, 10); !d.Allowed {
			t.Fatalf("request %d refused: %+v", i+1, d)
		}
	}
	for name, r := range map[string]*Redis{"a": a, "b": b} {
		d := mustAdmit(t, r, key, lim, 10)
		if d.Allowed {
			t.Fatalf("11th request on replica %s admitted", name)
		}
		// About 10 tokens missing at 100/min: just under 6s.
		if d.RetryAfter <= 5*time.Second || d.RetryAfter > 6*time.Second {
			t.Errorf("replica %s: RetryAfter = %v, want about 6s", name, d.RetryAfter)
		}
		if d.RetryAfterSeconds() != 6 {
			t.Errorf("replica %s: RetryAfterSeconds = %d, want 6", name, d.RetryAfterSeconds())
		}
		if want := "input tokens: 10 requested, 0 of 100 per minute left"; d.Reason != want {
			t.Errorf("replica %s: Reason = %q, want %q", name, d.Reason, want)
		}
	}
}

func TestRedisOutputDebtBlocksOtherReplica(t *testing.T) {
	a, b, key := replicas(t)
	lim := Limits{InputPerUnit: 1000, OutputPerUnit: 100, Unit: time.Minute}
	ctx := context.Background()
	if d := mustAdmit(t, a, key, lim, 10); !d.Allowed {
		t.Fatalf("first request refused: %+v", d)
	}
	if err := a.ChargeOutput(ctx, key, lim, 150); err != nil {
		t.Fatal(err)
	}
	d := mustAdmit(t, b, key, lim, 10)
	if d.Allowed {
		t.Fatal("request admitted on replica b despite output debt charged on a")
	}
	// Output at about -50: 51 tokens at 0.6s each.
	if d.RetryAfter < 30*time.Second || d.RetryAfter > 30600*time.Millisecond {
		t.Errorf("RetryAfter = %v, want about 30.6s", d.RetryAfter)
	}
	if !strings.Contains(d.Reason, "output tokens: -50 of 100 per minute left") {
		t.Errorf("Reason = %q", d.Reason)
	}
	// The refusal charged no input: 990 of 1000 remain.
	if d := mustAdmit(t, a, key, Limits{InputPerUnit: 1000, Unit: time.Minute}, 990); !d.Allowed {
		t.Errorf("input charged by a refused request: %+v", d)
	}
}

func TestRedisConcurrentNeverExceedsCapacity(t *testing.T) {
	a, b, key := replicas(t)
	// Per day, so refill during the test (~1ms worth of 100/day) stays far below one token.
	lim := Limits{InputPerUnit: 100, OutputPerUnit: 1000, Unit: 24 * time.Hour}
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range 16 {
		r := a
		if g%2 == 1 {
			r = b
		}
		wg.Go(func() {
			for range 20 {
				d, err := r.Admit(context.Background(), key, lim, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				} else {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 100 || refused.Load() != 220 {
		t.Fatalf("admitted %d, refused %d; want exactly 100 and 220", admitted.Load(), refused.Load())
	}
}

func TestRedisUnitsAndOversized(t *testing.T) {
	a, b, key := replicas(t)
	lim := Limits{InputPerUnit: 30, Unit: Month}
	if d := mustAdmit(t, a, key, lim, 31); d.Allowed || !d.Oversized || d.RetryAfter != Month ||
		!strings.Contains(d.Reason, "never") {
		t.Fatalf("oversized request: %+v", d)
	}
	if d := mustAdmit(t, a, key, lim, 30); !d.Allowed {
		t.Fatalf("full month budget refused: %+v", d)
	}
	d := mustAdmit(t, b, key, lim, 1)
	// One token per day; a few microseconds have refilled a little.
	if d.Allowed || d.RetryAfter <= 23*time.Hour || d.RetryAfter > 24*time.Hour || !strings.Contains(d.Reason, "per month") {
		t.Fatalf("after spending a month's budget: %+v", d)
	}
}

func TestRedisKeysExpireWhenFull(t *testing.T) {
	r, _, key := replicas(t)
	cl := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer cl.Close()
	ctx := context.Background()
	lim := Limits{InputPerUnit: 10, OutputPerUnit: 10, Unit: time.Second}
	if d := mustAdmit(t, r, key, lim, 5); !d.Allowed {
		t.Fatal(d)
	}
	if err := r.ChargeOutput(ctx, key, lim, 20); err != nil {
		t.Fatal(err)
	}
	in, out := "berth:ratelimit:{"+key+"}:in", "berth:ratelimit:{"+key+"}:out"
	// Half of the input bucket refills in 0.5s, the output debt of 10 plus
	// capacity 10 in 2s: the keys expire then.
	for k, maxTTL := range map[string]time.Duration{in: 501 * time.Millisecond, out: 2001 * time.Millisecond} {
		ttl, err := cl.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > maxTTL {
			t.Errorf("PTTL %s = %v, want in (0, %v]", k, ttl, maxTTL)
		}
	}
	// Admitting nothing while everything is full leaves no key behind.
	_, _, key2 := replicas(t)
	if d := mustAdmit(t, r, key2, lim, 0); !d.Allowed {
		t.Fatal(d)
	}
	if n, err := cl.Exists(ctx, "berth:ratelimit:{"+key2+"}:in", "berth:ratelimit:{"+key2+"}:out").Result(); err != nil || n != 0 {
		t.Errorf("keys of a full bucket: %d, %v", n, err)
	}
}

func TestRedisScriptReloadedAfterFlush(t *testing.T) {
	r, _, key := replicas(t)
	cl := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer cl.Close()
	if err := cl.ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if d := mustAdmit(t, r, key, Limits{InputPerUnit: 1, Unit: time.Second}, 1); !d.Allowed {
		t.Fatal(d)
	}
}

func TestRedisDownFailsOpen(t *testing.T) {
	// A loopback port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	cs := NewClients()
	defer cs.Close()
	r, err := cs.Limiter(addr)
	if err != nil {
		t.Fatal(err)
	}
	lim := Limits{InputPerUnit: 10, OutputPerUnit: 10, Unit: time.Second}
	start := time.Now()
	d, err := r.Admit(context.Background(), "ns/down", lim, 5)
	if err == nil {
		t.Fatal("Admit with Redis down returned no error")
	}
	if !d.Allowed || !strings.Contains(d.Reason, "failed open") {
		t.Errorf("Admit with Redis down = %+v, want a fail-open decision", d)
	}
	if err := r.ChargeOutput(context.Background(), "ns/down", lim, 5); err == nil {
		t.Error("ChargeOutput with Redis down returned no error")
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("failing open took %v", el)
	}
	// Decisions that need no Redis still work.
	if d, err := r.Admit(context.Background(), "ns/down", lim, 11); err != nil || d.Allowed || !d.Oversized {
		t.Errorf("oversized with Redis down = %+v, %v", d, err)
	}
}

func TestClients(t *testing.T) {
	cs := NewClients()
	a1, err := cs.Get("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := cs.Get("127.0.0.1:1")
	b, _ := cs.Get("127.0.0.1:2")
	if a1 != a2 || a1 == b {
		t.Fatal("want one client per address")
	}
	if _, err := cs.Get(""); err == nil {
		t.Error("empty address accepted")
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a1.Ping(context.Background()).Err(); err == nil {
		t.Error("client usable after Close")
	}
	if _, err := cs.Get("127.0.0.1:1"); err == nil {
		t.Error("Get after Close succeeded")
	}
}

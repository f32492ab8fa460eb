package router

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-sh/berth/pkg/router"
)

// replica is a berth-router of a test's own, which the test may stop mid-run.
type replica struct {
	*router.Router
	stop func()
}

// startReplica runs a router of its own against the test system; redis "" runs it without
// Redis (no sharing), disable keeps it from sharing even with one.
func startReplica(t *testing.T, redis string, disable bool) *replica {
	t.Helper()
	startSystem(t)
	r, err := router.New(cp.RESTConfig(), router.Options{Addr: "127.0.0.1:0", ScrapeInterval: 100 * time.Millisecond,
		ShutdownTimeout: time.Second, DisableGateway: true, RedisAddr: redis, DisableSharedState: disable}, logr.Discard())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	rep := &replica{Router: r, stop: func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				assert.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Error("the router did not stop")
			}
		})
	}}
	t.Cleanup(rep.stop)
	select {
	case <-r.Ready():
	case err := <-done:
		t.Fatalf("the router stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the router did not become ready")
	}
	return rep
}

// familyPrompt is prompt family f's system prompt: long enough for many prefix blocks,
// different from the first block on.
func familyPrompt(ns string, f int) string {
	return fmt.Sprintf("Family %d of %s. ", f, ns) + strings.Repeat(fmt.Sprintf("You are careful assistant %d and answer briefly. ", f), 20)
}

// sendFamily sends one request of family f through the router at addr and returns the
// engine that answered it.
func sendFamily(t *testing.T, addr, ns, model string, f, i int) string {
	return sendFamilyN(t, addr, ns, model, f, i, 2)
}

func sendFamilyN(t *testing.T, addr, ns, model string, f, i, maxTokens int) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": maxTokens, "messages": []map[string]string{
		{"role": "system", "content": familyPrompt(ns, f)},
		{"role": "user", "content": fmt.Sprintf("question %d", i)},
	}})
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	e := resp.Header.Get("X-Sim-Engine")
	require.NotEmpty(t, e)
	return e
}

// affinity sends rounds of every family alternately through the routers and returns the
// share of requests that landed on the engine that served the family's first request.
// The first round goes at once (and decodes a while), so the routers' in-flight counts
// spread the families over the engines; the rest go one at a time.
func affinity(t *testing.T, w *world, model string, families, rounds int, addrs []string, first map[int]string, settle ...func()) float64 {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for f := range families {
		wg.Go(func() {
			e := sendFamilyN(t, addrs[f%len(addrs)], w.ns, model, f, 0, 200)
			mu.Lock()
			first[f] = e
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, f := range settle {
		f()
	}
	same, n := 0, 0
	for i := 1; i < rounds; i++ {
		for f := range families {
			e := sendFamily(t, addrs[(i+f)%len(addrs)], w.ns, model, f, i) // each family alternates between the routers
			n++
			if e == first[f] {
				same++
			}
		}
	}
	t.Logf("first engine of each family: %v", first)
	return float64(same) / float64(n)
}

// applied waits until each sharing replica has applied every pick the others published:
// what the test then measures is the shared picture, not how fast Redis carried it there on
// a loaded machine.
func applied(w *world, rs ...*replica) func() {
	return func() {
		w.t.Helper()
		w.eventually("every replica applied the others' picks", 30*time.Second, func() bool {
			published := 0.0
			for _, r := range rs {
				published += counter(w.t, r.MetricsRegistry(), "berth_router_shared_state_events_total", map[string]string{"direction": "published", "kind": "prefix"})
			}
			for _, r := range rs {
				own := counter(w.t, r.MetricsRegistry(), "berth_router_shared_state_events_total", map[string]string{"direction": "published", "kind": "prefix"})
				got := counter(w.t, r.MetricsRegistry(), "berth_router_shared_state_events_total", map[string]string{"direction": "applied", "kind": "prefix"})
				if got < published-own {
					return false
				}
			}
			return true
		})
	}
}

func waitSynced(w *world, model string, n int, rs ...*replica) {
	w.t.Helper()
	w.eventually(fmt.Sprintf("the test's routers see %d endpoints of %s, scraped", n, model), 60*time.Second, func() bool {
		for _, r := range rs {
			if !scrapedServer(r.Router, w.ns, model, n) {
				return false
			}
		}
		return true
	})
}

// Two routers sharing through Redis send a prompt family sent alternately to both to one
// engine (≥ 95% of requests); two routers that do not share split the families between
// engines, each router building its own picture.
func TestSharedPrefixAffinityAcrossReplicas(t *testing.T) {
	w := newWorld(t, 1)
	w.servedPods("family", 4, "", nil)
	a, b := startReplica(t, redisAddr, false), startReplica(t, redisAddr, false)
	offA, offB := startReplica(t, "", false), startReplica(t, redisAddr, true)
	waitSynced(w, "family", 4, a, b, offA, offB)
	w.eventually("the sharing routers are connected", 10*time.Second, func() bool {
		return strings.Contains(a.SharedState(), "connected") && strings.Contains(b.SharedState(), "connected")
	})
	assert.Contains(t, offA.SharedState(), "off (no Redis address)")
	assert.Contains(t, offB.SharedState(), "off (disabled)")

	const families, rounds = 8, 6
	shared := affinity(t, w, "family", families, rounds, []string{a.Addr(), b.Addr()}, map[int]string{}, applied(w, a, b))
	t.Logf("sharing: %.0f%% of requests on their family's engine", 100*shared)
	// The same traffic through replicas that do not share (new families: the engines'
	// caches and the routers' latency views start alike). Each replica pins a family to
	// the engine it chose first; with 4 engines the two choices differ for about 3 of 4
	// families, so about half the requests leave the family's engine.
	w2 := &world{t: t, ctx: w.ctx, ns: w.ns + "-off"}
	split := affinity(t, w2, "family", families, rounds, []string{offA.Addr(), offB.Addr()}, map[int]string{})
	t.Logf("not sharing: %.0f%% of requests on their family's engine", 100*split)
	assert.Less(t, split, 0.95, "without sharing the two replicas' pictures split the families")
}

// A router stopped mid-run takes nothing away: a third started after it learns, from
// Redis alone, where every family went, and sends each there.
func TestSharedStateSurvivesAStoppedReplica(t *testing.T) {
	w := newWorld(t, 1)
	w.servedPods("survive", 4, "", nil)
	a, b := startReplica(t, redisAddr, false), startReplica(t, redisAddr, false)
	waitSynced(w, "survive", 4, a, b)
	const families = 8
	first := map[int]string{}
	got := affinity(t, w, "survive", families, 3, []string{a.Addr(), b.Addr()}, first, applied(w, a, b))
	require.GreaterOrEqual(t, got, 0.95)

	// a goes (mid-run: b still serves), and then b; c has only Redis to learn from.
	a.stop()
	for f := range families {
		assert.Equal(t, first[f], sendFamily(t, b.Addr(), w.ns, "survive", f, 100), "family %d through the remaining replica", f)
	}
	b.stop()
	c := startReplica(t, redisAddr, false)
	waitSynced(w, "survive", 4, c)
	w.eventually("the new router has read the shared state", 10*time.Second, func() bool { return strings.Contains(c.SharedState(), "connected") })
	for f := range families {
		assert.Equal(t, first[f], sendFamily(t, c.Addr(), w.ns, "survive", f, 200), "family %d through a router started after the others stopped", f)
	}
}

// With Redis unreachable a router serves on, and its readiness detail and metric say that
// it shares nothing.
func TestSharedStateDegradedWithoutRedis(t *testing.T) {
	w := newWorld(t, 1)
	w.servedPods("alone", 2, "", nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	r := startReplica(t, dead, false)
	waitSynced(w, "alone", 2, r)

	var detail string
	w.eventually("readiness says degraded", 10*time.Second, func() bool {
		resp, err := http.Get("http://" + r.Addr() + "/readyz?verbose")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		detail = string(b)
		return resp.StatusCode == http.StatusOK && strings.Contains(detail, "shared-state: degraded")
	})
	assert.Contains(t, detail, dead)
	assert.Contains(t, detail, "picking on this replica's own knowledge")
	n, err := testutil.GatherAndCount(r.MetricsRegistry(), "berth_router_shared_state_connected")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.NoError(t, testutil.GatherAndCompare(r.MetricsRegistry(), strings.NewReader(`
# HELP berth_router_shared_state_connected 1 while this router replica shares its prefix index and in-flight counts with the others through Redis; 0 while it picks on its own knowledge (Redis unreachable).
# TYPE berth_router_shared_state_connected gauge
berth_router_shared_state_connected 0
`), "berth_router_shared_state_connected"))
	for i := range 4 {
		sendFamily(t, r.Addr(), w.ns, "alone", 0, i)
	}
}

package shared

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-sh/berth/internal/redistest"
	"github.com/berth-sh/berth/pkg/router/pick"
)

var keySeq atomic.Int64

// replica is one router's picker with sharing running, as berth-router wires them.
type replica struct {
	picker *pick.Picker
	shared *Shared
	reg    *prometheus.Registry
	stop   func()
}

func startReplica(t *testing.T, addr, key string) *replica {
	t.Helper()
	p, err := pick.New(pick.Scored, pick.DefaultScorers, 0)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	s := New(Options{Addr: addr, Key: key, LoadInterval: 20 * time.Millisecond}, p, reg, logr.Discard())
	p.SharePeers(s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	var once sync.Once
	r := &replica{picker: p, shared: s, reg: reg, stop: func() { once.Do(func() { cancel(); <-done }) }}
	t.Cleanup(r.stop)
	return r
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func matchOf(p *pick.Picker, prefix []uint64, addr string) int { return p.PrefixMatch(prefix)[addr] }

// A pick on one replica reaches the other's prefix index; a replica started after the
// first stopped learns it from the stream's retained tail; in-flight counts are summed
// from the live peers only and expire when a peer stops publishing.
func TestReplicasShareTheirPicture(t *testing.T) {
	addr := redistest.Start(t)
	key := fmt.Sprintf("test:%d", keySeq.Add(1))
	a, b := startReplica(t, addr, key), startReplica(t, addr, key)
	waitFor(t, "both replicas connected", func() bool {
		ca, _ := a.shared.Status()
		cb, _ := b.shared.Status()
		return ca && cb
	})

	family := pick.HashPrompt(strings.Repeat("You are the bench assistant. ", 20))
	require.NotEmpty(t, family)
	done := a.picker.Begin(&pick.Request{Prefix: family}, "10.0.0.1:8000")
	waitFor(t, "b learns a's pick", func() bool { return matchOf(b.picker, family, "10.0.0.1:8000") == len(family) })

	// a's open request counts on b, from a's published counts.
	waitFor(t, "b counts a's request in flight", func() bool { return b.picker.Load("10.0.0.1:8000") == 1 })
	assert.Equal(t, int64(0), b.picker.InFlight("10.0.0.1:8000"), "b's own count stays its own")
	done(0.01)
	waitFor(t, "a's ended request leaves b's count", func() bool { return b.picker.Load("10.0.0.1:8000") == 0 })

	// A peer that dies with requests open stops counting after LoadTTL.
	_ = a.picker.Begin(&pick.Request{}, "10.0.0.2:8000")
	waitFor(t, "b counts a's second request", func() bool { return b.picker.Load("10.0.0.2:8000") == 1 })
	a.stop()
	waitFor(t, "a's counts expire after it stops publishing", func() bool { return b.picker.Load("10.0.0.2:8000") == 0 })

	// b too goes; a third replica learns a's pick from Redis alone.
	b.stop()
	c := startReplica(t, addr, key)
	waitFor(t, "c bootstraps a's pick from the stream", func() bool { return matchOf(c.picker, family, "10.0.0.1:8000") == len(family) })
	assert.Equal(t, float64(1), testutil.ToFloat64(c.shared.m.connected))
	assert.Positive(t, testutil.ToFloat64(c.shared.m.events.WithLabelValues("applied", "prefix")))
}

// With Redis unreachable a replica says it is degraded (status and metric), still picks
// on its own index, and connects once Redis is there.
func TestDegradedWithoutRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	r := startReplica(t, addr, "test:down")
	waitFor(t, "the replica reports the failure", func() bool {
		_, detail := r.shared.Status()
		return strings.Contains(detail, "connection refused")
	})
	ok, detail := r.shared.Status()
	assert.False(t, ok)
	assert.Contains(t, detail, "shared-state: degraded")
	assert.Equal(t, float64(0), testutil.ToFloat64(r.shared.m.connected))

	family := pick.HashPrompt(strings.Repeat("x", 4*pick.BlockBytes))
	r.picker.Begin(&pick.Request{Prefix: family}, "10.0.0.9:8000")(0.01)
	assert.Equal(t, len(family), matchOf(r.picker, family, "10.0.0.9:8000"), "its own picks still count")
	assert.Equal(t, int64(0), r.shared.InFlight("10.0.0.9:8000"))
}

func TestEncodeRoundTrip(t *testing.T) {
	in := []uint64{0, 1, 1 << 63, 0xdeadbeefcafebabe}
	assert.Equal(t, in, decode(encode(in)))
	assert.Empty(t, decode("short"))
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/berth-sh/berth/internal/chatstream"
	"github.com/berth-sh/berth/pkg/autoscale/podmetrics"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// clock maps simulated time to real time: real = simulated × scale, from start.
type clock struct {
	start time.Time
	scale float64
}

// now is the simulated time elapsed since start.
func (c clock) now() time.Duration { return time.Duration(float64(time.Since(c.start)) / c.scale) }

// real is the real duration of simulated d.
func (c clock) real(d time.Duration) time.Duration { return time.Duration(float64(d) * c.scale) }

// at is the real instant of simulated offset d.
func (c clock) at(d time.Duration) time.Time { return c.start.Add(c.real(d)) }

// sleepUntil sleeps until simulated offset d or ctx's end; false on the latter.
func (c clock) sleepUntil(ctx context.Context, d time.Duration) bool {
	wait := time.Until(c.at(d))
	if wait <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

type replicaState int

const (
	starting replicaState = iota // requested, loading the model: no engine yet
	ready                        // serving
	draining                     // scaled away: no new requests, in-flight ones finish
	removed
)

// replica is one engine "pod". Times are simulated offsets; -1 when not (yet) reached.
type replica struct {
	n         int
	uid       types.UID
	ip        string
	state     replicaState
	srv       *engine.Server
	inflight  int
	requested time.Duration
	readyAt   time.Duration
	goneAt    time.Duration // scaled away (drain starts, or a starting replica is cancelled)
	removedAt time.Duration // engine stopped: the end of its replica-seconds
}

// fleet is the replicas of one run and the load balancer in front of them.
type fleet struct {
	clk       clock
	ecfg      engine.Config
	coldStart time.Duration
	port      int
	subnet    int // second octet of the replicas' 127.x.y.z addresses

	mu       sync.Mutex
	replicas []*replica // every replica of the run, in order of request
	rr       int        // rotates the load balancer's tie-break
	nextIP   int
	wg       sync.WaitGroup // cold starts and drains in progress
	startErr error
	closed   bool
	// mirror, when set, is told of every replica's pod: requested, serving, gone.
	mirror podMirror
}

// podMirror keeps the replicas' pods in a cluster (target does).
type podMirror interface {
	podAdded(name string)
	podReady(name, ip string)
	podGone(name string)
}

func (r *replica) podName() string { return fmt.Sprintf("replica-%d", r.n) }

func newFleet(clk clock, ecfg engine.Config, coldStart time.Duration, port, subnet int) *fleet {
	return &fleet{clk: clk, ecfg: ecfg, coldStart: coldStart, port: port, subnet: subnet}
}

// active is the replica count the autoscaler sees (starting and ready: a scale
// subresource's replicas); callers hold mu.
func (f *fleet) activeLocked() []*replica {
	var out []*replica
	for _, r := range f.replicas {
		if r.state == starting || r.state == ready {
			out = append(out, r)
		}
	}
	return out
}

// pods lists the active replicas as the metric reader sees pods: starting ones not ready
// (no metrics yet, so Missing), ready ones at their address.
func (f *fleet) pods() []podmetrics.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []podmetrics.Pod
	for _, r := range f.activeLocked() {
		p := podmetrics.Pod{UID: r.uid, Name: r.podName()}
		if r.state == ready {
			p.Ready, p.IP = true, r.ip
		}
		out = append(out, p)
	}
	return out
}

// scaleTo adds or removes replicas until n are active. New replicas become ready after the
// cold start (warm: at once, for the first replica of a run). Removal takes starting
// replicas first (newest first), then ready ones, most recently ready first, as a
// ReplicaSet prefers; a ready replica drains before its engine stops.
func (f *fleet) scaleTo(n int, warm bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	now := f.clk.now()
	active := f.activeLocked()
	for i := len(active); i < n; i++ {
		r := &replica{n: len(f.replicas), uid: types.UID(fmt.Sprintf("r%d", len(f.replicas))), requested: now, readyAt: -1, goneAt: -1, removedAt: -1}
		f.replicas = append(f.replicas, r)
		if f.mirror != nil {
			f.mirror.podAdded(r.podName())
		}
		if warm {
			f.startLocked(r)
			continue
		}
		f.wg.Add(1)
		time.AfterFunc(f.clk.real(f.coldStart), func() {
			defer f.wg.Done()
			f.mu.Lock()
			defer f.mu.Unlock()
			if r.state == starting && !f.closed {
				f.startLocked(r)
			}
		})
	}
	for excess := len(active) - n; excess > 0; excess-- {
		var victim *replica
		for _, r := range active { // newest starting one
			if r.state == starting && (victim == nil || r.requested >= victim.requested) {
				victim = r
			}
		}
		if victim == nil {
			for _, r := range active { // most recently ready one
				if r.state == ready && (victim == nil || r.readyAt >= victim.readyAt) {
					victim = r
				}
			}
		}
		if victim == nil {
			break
		}
		active = removeReplica(active, victim)
		victim.goneAt = now
		if f.mirror != nil {
			f.mirror.podGone(victim.podName())
		}
		if victim.state == starting {
			victim.state, victim.removedAt = removed, now
			continue
		}
		victim.state = draining
		if victim.inflight == 0 {
			f.stopLocked(victim)
		}
	}
}

func removeReplica(rs []*replica, r *replica) []*replica {
	for i := range rs {
		if rs[i] == r {
			return append(rs[:i], rs[i+1:]...)
		}
	}
	return rs
}

// startLocked starts r's engine on a fresh loopback address (the next one if the address
// is taken by someone else).
func (f *fleet) startLocked(r *replica) {
	for range 50 {
		f.nextIP++
		ip := fmt.Sprintf("127.%d.%d.%d", f.subnet, f.nextIP/250, f.nextIP%250+1)
		cfg := f.ecfg
		cfg.ID = "replica-" + strconv.Itoa(r.n)
		srv := engine.New(cfg)
		if err := srv.Start(net.JoinHostPort(ip, strconv.Itoa(f.port))); err != nil {
			_ = srv.Close()
			continue
		}
		r.srv, r.ip, r.state, r.readyAt = srv, ip, ready, f.clk.now()
		if f.mirror != nil {
			f.mirror.podReady(r.podName(), ip)
		}
		return
	}
	if f.startErr == nil {
		f.startErr = fmt.Errorf("replica %d: no free loopback address on 127.%d.x.x:%d", r.n, f.subnet, f.port)
	}
	r.state, r.removedAt = removed, f.clk.now()
}

// stopLocked removes a drained replica and stops its engine in the background.
func (f *fleet) stopLocked(r *replica) {
	r.state, r.removedAt = removed, f.clk.now()
	srv := r.srv
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		_ = srv.Close()
	}()
}

// pick is the load balancer: the ready replica with the fewest requests in flight (from
// this balancer's own count), ties broken round robin. nil when none is ready.
func (f *fleet) pick() *replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	var best *replica
	n := len(f.replicas)
	f.rr++
	for i := range n {
		r := f.replicas[(f.rr+i)%n]
		if r.state == ready && (best == nil || r.inflight < best.inflight) {
			best = r
		}
	}
	if best != nil {
		best.inflight++
	}
	return best
}

// done ends a request on r; the last one on a draining replica stops it.
func (f *fleet) done(r *replica) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r.inflight--
	if r.state == draining && r.inflight == 0 {
		f.stopLocked(r)
	}
}

// close stops every engine and waits for cold starts and drains to end.
func (f *fleet) close() {
	f.mu.Lock()
	f.closed = true
	now := f.clk.now()
	for _, r := range f.replicas {
		switch r.state {
		case starting:
			r.state, r.removedAt = removed, now
		case ready, draining:
			if r.goneAt < 0 {
				r.goneAt = now
			}
			f.stopLocked(r)
		}
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// load is the ready engines' state now.
func (f *fleet) load() engineLoad {
	f.mu.Lock()
	var srvs []*engine.Server
	for _, r := range f.replicas {
		if r.state == ready {
			srvs = append(srvs, r.srv)
		}
	}
	f.mu.Unlock()
	l := engineLoad{ready: len(srvs)}
	for _, s := range srvs {
		st := s.Stats()
		l.running += st.Running
		l.waiting += st.Waiting
	}
	return l
}

// snapshot copies the replicas' records.
func (f *fleet) snapshot() []replica {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]replica, len(f.replicas))
	for i, r := range f.replicas {
		out[i] = *r
	}
	return out
}

// newClient is the load generator's HTTP client: keep-alive with every connection kept
// idle, no compression.
func newClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}

// filler is the text prompts are cut from, after a unique request header so that no two
// prompts share a prefix-cache block.
var filler = func() string {
	var b strings.Builder
	x := uint32(2463534242)
	for b.Len() < 4*40000 {
		for range 3 + x%6 {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			b.WriteByte(byte('a' + x%26))
		}
		b.WriteByte(' ')
	}
	return b.String()
}()

const modelName = "sim-model"

// body is request i's chat completion request: a user message of about prompt tokens
// (4 bytes each), streamed.
func body(i int, r request) []byte {
	head := fmt.Sprintf("Request %d. ", i)
	n := max(r.prompt*4-len("user: \n")-len(head), 0)
	n = min(n, len(filler))
	b, _ := json.Marshal(map[string]any{
		"model":      modelName,
		"messages":   []map[string]string{{"role": "user", "content": head + filler[:n]}},
		"max_tokens": r.maxTokens,
		"stream":     true,
	})
	return b
}

var errNoReplica = errors.New("no ready replica")

// send posts a streaming chat completion to addr and returns the real time from due to the
// first chunk with content; it reads the stream to [DONE], so a cut stream is an error.
func send(ctx context.Context, cl *http.Client, addr string, b []byte, due time.Time) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return chatstream.FirstToken(resp.Body, due)
}

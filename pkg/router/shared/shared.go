// Package shared lets berth-router replicas share what each learns while picking: which
// endpoint got which prompt prefix (the prefix-cache index of package pick) and how many
// requests each replica has open to each endpoint. Behind a plain Service every replica
// sees only part of a prompt family; without sharing each would build its own half-right
// picture and send the family to different engines, losing the cache hits that prefix
// affinity is for.
//
// The pick path stays local: no Redis round trip per request. Each replica publishes what
// it learns to two Redis Streams in the Redis the global rate limits use, and follows them
// with XREAD BLOCK, applying the other replicas' entries to its own index:
//
//   - <key>:prefix, one entry per pick: the replica, the endpoint and the prompt's chained
//     block hashes (pick.HashPrompt, the same in every process). XADD MAXLEN ~ keeps the
//     newest Retain entries; a replica that starts, or reconnects, first reads the retained
//     tail (from where it left off, or from the start), so a replica that dies loses
//     nothing the others or its successor need.
//   - <key>:load, at each pick (at most every 10ms) and every LoadInterval while a replica
//     has requests open (and once when it drops to none): its per-endpoint in-flight
//     counts, replacing what it told before.
//     A peer's counts count only while it keeps publishing (LoadTTL), so a replica that
//     dies does not leave its requests counted forever.
//
// Without Redis, or while it is unreachable, each replica picks on its own knowledge, as
// a single replica does, and says so: Status (the router's /readyz detail) and the
// berth_router_shared_state_* metrics.
package shared

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Options configure sharing. Zero values take the defaults.
type Options struct {
	// Addr is the Redis (host:port).
	Addr string
	// Key prefixes the two streams (default "berth:router:{shared}"; the braces are a Redis
	// Cluster hash tag, so one XREAD can follow both).
	Key string
	// Retain is about how many prefix entries the stream keeps (default 20000): what a
	// starting replica reads to learn the others' recent picks.
	Retain int64
	// LoadInterval is how often in-flight counts are published (default 50ms; a pick also
	// publishes them at once, at most every 10ms); LoadTTL is how long a peer's counts count
	// after its last publication (default 1s).
	LoadInterval, LoadTTL time.Duration
	// ID names this replica in the streams (default random), so it skips its own entries.
	ID string
}

func (o *Options) defaults() {
	if o.Key == "" {
		o.Key = "berth:router:{shared}"
	}
	if o.Retain <= 0 {
		o.Retain = 20000
	}
	if o.LoadInterval <= 0 {
		o.LoadInterval = 50 * time.Millisecond
	}
	if o.LoadTTL <= 0 {
		o.LoadTTL = max(time.Second, 5*o.LoadInterval)
	}
	if o.ID == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		o.ID = hex.EncodeToString(b[:])
	}
}

var errNotYet = errors.New("not connected yet")

// Target is what sharing reads and writes on this replica: package pick's Picker.
type Target interface {
	RecordPrefix(prefix []uint64, addr string)
	OwnInFlight() map[string]int64
}

// MaxBlocks bounds the blocks published per pick (64 KiB of prompt): the index matches
// from the first block on, so the head of a prompt is what affinity needs.
const MaxBlocks = 1024

type pickEvent struct {
	prefix []uint64
	addr   string
}

type peerLoad struct {
	counts map[string]int64
	seen   time.Time
}

// Shared shares a picker's knowledge through Redis. Create with New, run with Run.
type Shared struct {
	o      Options
	client *redis.Client
	target Target
	log    logr.Logger
	now    func() time.Time

	picks chan pickEvent
	// kick asks for the in-flight counts to be published now (a pick raised one).
	kick chan struct{}

	mu    sync.Mutex
	peers map[string]peerLoad
	err   error // the last Redis error, nil while connected
	since time.Time

	connected atomic.Bool
	m         *metrics
}

// New returns sharing over the Redis at o.Addr for target, its metrics registered on reg.
func New(o Options, target Target, reg prometheus.Registerer, log logr.Logger) *Shared {
	o.defaults()
	s := &Shared{
		o: o, target: target, log: log, now: time.Now,
		client: redis.NewClient(&redis.Options{Addr: o.Addr, DialTimeout: time.Second, DialerRetries: 1,
			ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1}),
		picks: make(chan pickEvent, 4096),
		kick:  make(chan struct{}, 1),
		peers: map[string]peerLoad{},
		err:   errNotYet,
		since: time.Now(),
		m:     newMetrics(reg),
	}
	return s
}

// ID is this replica's name in the streams.
func (s *Shared) ID() string { return s.o.ID }

// Picked implements pick.Peers: the pick is queued for publishing (dropped, and counted,
// when the queue is full: the pick path never waits for Redis).
func (s *Shared) Picked(prefix []uint64, addr string) {
	select {
	case s.kick <- struct{}{}:
	default:
	}
	if len(prefix) == 0 {
		return
	}
	select {
	case s.picks <- pickEvent{prefix: prefix[:min(len(prefix), MaxBlocks)], addr: addr}:
	default:
		s.m.events.WithLabelValues("dropped", "prefix").Inc()
	}
}

// InFlight implements pick.Peers: the peers' open requests to addr as they last told,
// counting only peers heard from within LoadTTL.
func (s *Shared) InFlight(addr string) int64 {
	if !s.connected.Load() {
		return 0
	}
	cutoff := s.now().Add(-s.o.LoadTTL)
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, p := range s.peers {
		if p.seen.After(cutoff) {
			n += p.counts[addr]
		}
	}
	return n
}

// Status says whether sharing works, in a line for the readiness detail.
func (s *Shared) Status() (connected bool, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false, fmt.Sprintf("shared-state: degraded since %s: redis %s: %v; picking on this replica's own knowledge",
			s.since.UTC().Format(time.RFC3339), s.o.Addr, s.err)
	}
	cutoff := s.now().Add(-s.o.LoadTTL)
	busy := 0
	for _, p := range s.peers {
		if p.seen.After(cutoff) {
			busy++
		}
	}
	return true, fmt.Sprintf("shared-state: connected to redis %s as replica %s (%d peers with requests in flight)", s.o.Addr, s.o.ID, busy)
}

func (s *Shared) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		if s.err != nil {
			s.log.Info("sharing picks with the other router replicas", "redis", s.o.Addr, "replica", s.o.ID)
			s.since = s.now()
		}
		s.err = nil
		s.connected.Store(true)
		s.m.connected.Set(1)
		return
	}
	if s.err == nil || s.err == errNotYet || s.connected.Load() {
		s.log.Error(err, "shared state degraded: picking on this replica's own knowledge until redis answers", "redis", s.o.Addr)
		s.since = s.now()
	}
	s.err = err
	s.connected.Store(false)
	s.m.connected.Set(0)
}

func (s *Shared) prefixKey() string { return s.o.Key + ":prefix" }
func (s *Shared) loadKey() string   { return s.o.Key + ":load" }

// Run publishes and follows until ctx ends, then closes the Redis client.
func (s *Shared) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { s.publish(ctx) })
	wg.Go(func() { s.follow(ctx) })
	wg.Wait()
	_ = s.client.Close()
}

// publish sends picks as they come (in one pipeline when several are queued) and the
// in-flight counts every LoadInterval.
func (s *Shared) publish(ctx context.Context) {
	tick := time.NewTicker(s.o.LoadInterval)
	defer tick.Stop()
	lastLoad := map[string]int64{}
	var lastAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-s.picks:
			pipe := s.client.Pipeline()
			n := 0
			for {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: s.prefixKey(), MaxLen: s.o.Retain, Approx: true,
					Values: []any{"r", s.o.ID, "a", ev.addr, "h", encode(ev.prefix)}})
				n++
				if n == 256 {
					break
				}
				select {
				case ev = <-s.picks:
					continue
				default:
				}
				break
			}
			if _, err := pipe.Exec(ctx); err != nil {
				if ctx.Err() == nil {
					s.setErr(err)
				}
				continue
			}
			s.m.events.WithLabelValues("published", "prefix").Add(float64(n))
		case <-s.kick:
			if time.Since(lastAt) < 10*time.Millisecond {
				continue // the ticker publishes it soon enough
			}
			s.publishLoad(ctx, lastLoad, func(l map[string]int64) { lastLoad, lastAt = l, time.Now() })
		case <-tick.C:
			s.publishLoad(ctx, lastLoad, func(l map[string]int64) { lastLoad, lastAt = l, time.Now() })
		}
	}
}

// publishLoad publishes this replica's in-flight counts unless they and the last published
// are both empty; sent is told what was published.
func (s *Shared) publishLoad(ctx context.Context, lastLoad map[string]int64, sent func(map[string]int64)) {
	own := s.target.OwnInFlight()
	if len(own) == 0 && len(lastLoad) == 0 {
		return // nothing open, and the peers know it (or forget us within LoadTTL)
	}
	vals := []any{"r", s.o.ID}
	for addr, c := range own {
		vals = append(vals, addr, c)
	}
	err := s.client.XAdd(ctx, &redis.XAddArgs{Stream: s.loadKey(), MaxLen: 1000, Approx: true, Values: vals}).Err()
	if err != nil {
		if ctx.Err() == nil {
			s.setErr(err)
		}
		return
	}
	sent(own)
	s.m.events.WithLabelValues("published", "load").Inc()
}

// follow reads the retained prefix entries, then follows both streams; after an error it
// waits (up to 5s, doubling) and goes on from the last entry it applied.
func (s *Shared) follow(ctx context.Context) {
	prefixFrom := "0-0"
	loadFrom := ""
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		err := s.followOnce(ctx, &prefixFrom, &loadFrom)
		if ctx.Err() != nil {
			return
		}
		s.setErr(err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (s *Shared) followOnce(ctx context.Context, prefixFrom, loadFrom *string) error {
	// Catch up on the retained prefix entries in pages: the oldest first, so the LRU of the
	// index ends with the newest most recent.
	for {
		msgs, err := s.client.XRangeN(ctx, s.prefixKey(), "("+*prefixFrom, "+", 1000).Result()
		if err != nil {
			return err
		}
		for _, m := range msgs {
			s.apply(m, true)
			*prefixFrom = m.ID
		}
		if len(msgs) < 1000 {
			break
		}
	}
	if *loadFrom == "" {
		// Counts older than the newest entry are stale; a busy peer publishes again within
		// LoadInterval.
		last, err := s.client.XRevRangeN(ctx, s.loadKey(), "+", "-", 1).Result()
		if err != nil {
			return err
		}
		*loadFrom = "0-0"
		if len(last) > 0 {
			*loadFrom = last[0].ID
		}
	}
	s.setErr(nil)
	for ctx.Err() == nil {
		res, err := s.client.XRead(ctx, &redis.XReadArgs{Streams: []string{s.prefixKey(), s.loadKey(), *prefixFrom, *loadFrom},
			Count: 1000, Block: time.Second}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return err
		}
		for _, st := range res {
			isPrefix := st.Stream == s.prefixKey()
			for _, m := range st.Messages {
				s.apply(m, isPrefix)
				if isPrefix {
					*prefixFrom = m.ID
				} else {
					*loadFrom = m.ID
				}
			}
		}
	}
	return ctx.Err()
}

// apply puts another replica's entry into this one's picture.
func (s *Shared) apply(m redis.XMessage, isPrefix bool) {
	from, _ := m.Values["r"].(string)
	if from == s.o.ID || from == "" {
		return
	}
	if ms, _, ok := strings.Cut(m.ID, "-"); ok {
		if t, err := strconv.ParseInt(ms, 10, 64); err == nil {
			s.m.lag.Set(max(0, float64(s.now().UnixMilli()-t)/1000))
		}
	}
	if isPrefix {
		addr, _ := m.Values["a"].(string)
		h, _ := m.Values["h"].(string)
		prefix := decode(h)
		if addr == "" || len(prefix) == 0 {
			return
		}
		s.target.RecordPrefix(prefix, addr)
		s.m.events.WithLabelValues("applied", "prefix").Inc()
		return
	}
	counts := map[string]int64{}
	for k, v := range m.Values {
		if k == "r" {
			continue
		}
		if str, ok := v.(string); ok {
			if n, err := strconv.ParseInt(str, 10, 64); err == nil && n > 0 {
				counts[k] = n
			}
		}
	}
	s.mu.Lock()
	s.peers[from] = peerLoad{counts: counts, seen: s.now()}
	for id, p := range s.peers { // forget peers long gone
		if s.now().Sub(p.seen) > 10*s.o.LoadTTL {
			delete(s.peers, id)
		}
	}
	s.mu.Unlock()
	s.m.events.WithLabelValues("applied", "load").Inc()
}

func encode(prefix []uint64) string {
	b := make([]byte, 8*len(prefix))
	for i, h := range prefix {
		binary.LittleEndian.PutUint64(b[8*i:], h)
	}
	return string(b)
}

func decode(s string) []uint64 {
	out := make([]uint64, len(s)/8)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64([]byte(s[8*i : 8*i+8]))
	}
	return out
}

type metrics struct {
	connected prometheus.Gauge
	events    *prometheus.CounterVec
	lag       prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "berth_router_shared_state_connected",
			Help: "1 while this router replica shares its prefix index and in-flight counts with the others through Redis; 0 while it picks on its own knowledge (Redis unreachable)."}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "berth_router_shared_state_events_total",
			Help: "Shared-state entries by direction (published by this replica, applied from another, dropped when the publish queue was full) and kind (prefix: a pick's prompt blocks; load: in-flight counts)."},
			[]string{"direction", "kind"}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{Name: "berth_router_shared_state_lag_seconds",
			Help: "Age of the last entry applied from another replica when it was applied (Redis's clock at publishing against this replica's at applying)."}),
	}
	if reg != nil {
		reg.MustRegister(m.connected, m.events, m.lag)
	}
	return m
}

// Off registers the metrics of a replica that shares nothing (no Redis configured), so
// berth_router_shared_state_connected says 0 there too, and returns its readiness detail.
func Off(reg prometheus.Registerer, why string) string {
	newMetrics(reg).connected.Set(0)
	return "shared-state: off (" + why + "); this replica picks on its own knowledge"
}

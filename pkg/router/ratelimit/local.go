package ratelimit

import (
	"context"
	"sync"
	"time"
)

// sweepEvery is how often (by the limiter's clock) Local drops full buckets.
const sweepEvery = time.Minute

// Local is an in-memory Limiter for one router process.
//
// Buckets are created on first use and dropped by a periodic sweep once they
// have refilled completely: a full bucket behaves exactly like a missing one,
// so dropping it changes no decision, and memory stays proportional to the
// routes active within the last unit.
type Local struct {
	now func() time.Time

	mu        sync.Mutex
	buckets   map[bucketKey]*bucket
	lastSweep time.Time
}

var _ Limiter = (*Local)(nil)

type direction uint8

const (
	input direction = iota
	output
)

type bucketKey struct {
	key string
	dir direction
}

type bucket struct {
	tokens float64   // level at last, may be negative (output debt)
	last   time.Time // when tokens was computed
	cap    int64     // capacity and unit at last use, for the sweep
	unit   time.Duration
}

// NewLocal returns an in-memory limiter reading time from now (time.Now when
// nil; tests inject a fake clock).
func NewLocal(now func() time.Time) *Local {
	if now == nil {
		now = time.Now
	}
	return &Local{now: now, buckets: make(map[bucketKey]*bucket)}
}

// Admit implements [Limiter].
func (s *Local) Admit(_ context.Context, key string, l Limits, inputTokens int64) (Decision, error) {
	inputTokens = max(inputTokens, 0)
	if d, done, err := precheck(l, inputTokens); done {
		return d, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.maybeSweep(now)
	var inLeft, outLeft float64
	if l.InputPerUnit > 0 {
		inLeft = s.level(bucketKey{key, input}, l.InputPerUnit, l.Unit, now)
	}
	if l.OutputPerUnit > 0 {
		outLeft = s.level(bucketKey{key, output}, l.OutputPerUnit, l.Unit, now)
	}
	d := decide(l, inputTokens, inLeft, outLeft)
	if d.Allowed && l.InputPerUnit > 0 && inputTokens > 0 {
		s.set(bucketKey{key, input}, inLeft-float64(inputTokens), l.InputPerUnit, l.Unit, now)
	}
	return d, nil
}

// ChargeOutput implements [Limiter].
func (s *Local) ChargeOutput(_ context.Context, key string, l Limits, outputTokens int64) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if l.OutputPerUnit <= 0 || outputTokens <= 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	k := bucketKey{key, output}
	s.set(k, s.level(k, l.OutputPerUnit, l.Unit, now)-float64(outputTokens), l.OutputPerUnit, l.Unit, now)
	return nil
}

// Len returns the number of buckets held (for tests and debugging).
func (s *Local) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buckets)
}

// level returns the bucket's level at now, refilled and capped at c.
func (s *Local) level(k bucketKey, c int64, unit time.Duration, now time.Time) float64 {
	b := s.buckets[k]
	if b == nil {
		return float64(c)
	}
	return refill(b.tokens, now.Sub(b.last), c, unit)
}

func (s *Local) set(k bucketKey, tokens float64, c int64, unit time.Duration, now time.Time) {
	if tokens >= float64(c) {
		delete(s.buckets, k)
		return
	}
	b := s.buckets[k]
	if b == nil {
		b = new(bucket)
		s.buckets[k] = b
	}
	*b = bucket{tokens: tokens, last: now, cap: c, unit: unit}
}

// maybeSweep drops the buckets that are full at now, at most once per sweepEvery.
func (s *Local) maybeSweep(now time.Time) {
	if now.Sub(s.lastSweep) < sweepEvery {
		return
	}
	s.lastSweep = now
	for k, b := range s.buckets {
		if refill(b.tokens, now.Sub(b.last), b.cap, b.unit) >= float64(b.cap) {
			delete(s.buckets, k)
		}
	}
}

// refill returns tokens after elapsed at c per unit, capped at c. A clock
// stepping backwards refills nothing.
func refill(tokens float64, elapsed time.Duration, c int64, unit time.Duration) float64 {
	if elapsed > 0 {
		tokens += float64(elapsed) * float64(c) / float64(unit)
	}
	return min(tokens, float64(c))
}

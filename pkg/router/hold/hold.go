// Package hold keeps requests for a model that is scaled to zero until it has a Ready
// endpoint again (scale from zero): one bounded FIFO per ModelServer, each request waiting
// at most a timeout.
//
// Held requests go in arrival order. Release wakes the oldest only; each woken request calls
// its Next once it has been sent on (or gave up), which wakes the one after it. So the
// engines see the requests in the order the router took them, without the router waiting
// for any answer.
package hold

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"
)

// ErrFull is returned when Size requests already wait for the key.
var ErrFull = errors.New("the hold queue is full")

// ErrTimeout is returned when a request waited Timeout without being released.
var ErrTimeout = errors.New("timed out waiting for the model to come up")

// ErrDisabled is returned by a Queues of size 0: holding is off.
var ErrDisabled = errors.New("holding requests is disabled")

// Queues are the hold queues, one per key (a ModelServer's namespace/name). Safe for
// concurrent use.
type Queues struct {
	size    int
	timeout time.Duration

	mu     sync.Mutex
	queues map[string]*queue
}

type queue struct {
	waiters []*waiter // oldest first; the released ones are gone from it
	// releasing: a released request has not yet called Next; later releases wait for it.
	releasing bool
	// open: Release was called and the queue has not been emptied since, so each Next
	// wakes the following request.
	open bool
}

type waiter struct {
	wake chan struct{}
}

// New makes hold queues of at most size requests per key, each waiting at most timeout.
// Size 0 disables holding: Wait returns ErrDisabled.
func New(size int, timeout time.Duration) *Queues {
	return &Queues{size: size, timeout: timeout, queues: map[string]*queue{}}
}

// Enabled reports whether requests are held at all.
func (q *Queues) Enabled() bool { return q.size > 0 }

// Timeout is how long a request may be held.
func (q *Queues) Timeout() time.Duration { return q.timeout }

// Size is how many requests may wait per key.
func (q *Queues) Size() int { return q.size }

// Wait holds the caller until Release(key) reaches it, the timeout passes (ErrTimeout), ctx
// ends (ctx.Err()), or at once when the queue is full (ErrFull) or holding is disabled
// (ErrDisabled). On nil the caller must call next exactly once when its request has been
// sent on (or abandoned), which lets the next held request go; next is safe to call again.
func (q *Queues) Wait(ctx context.Context, key string) (next func(), err error) {
	if q.size <= 0 {
		return nil, ErrDisabled
	}
	w := &waiter{wake: make(chan struct{})}
	q.mu.Lock()
	qu := q.queues[key]
	if qu == nil {
		qu = &queue{}
		q.queues[key] = qu
	}
	if len(qu.waiters) >= q.size {
		q.mu.Unlock()
		return nil, ErrFull
	}
	qu.waiters = append(qu.waiters, w)
	if qu.open && !qu.releasing {
		// Released already and nothing in front of it: go at once, after nobody.
		q.wakeHeadLocked(qu)
	}
	q.mu.Unlock()

	timer := time.NewTimer(q.timeout)
	defer timer.Stop()
	select {
	case <-w.wake:
		return q.nextFunc(key), nil
	case <-timer.C:
		err = ErrTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-w.wake:
		// Released as it gave up: it must still pass the turn on.
		q.passLocked(key)
		return nil, err
	default:
	}
	q.removeLocked(key, w)
	return nil, err
}

// Release lets the requests held for key go, oldest first (each after the one before
// it called next). Requests that arrive while they go queue behind them.
func (q *Queues) Release(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	qu := q.queues[key]
	if qu == nil {
		return
	}
	qu.open = true
	if !qu.releasing {
		q.wakeHeadLocked(qu)
	}
	q.dropIfIdleLocked(key, qu)
}

// Close stops releasing key: requests that arrive later wait for the next Release (the
// model went back to zero).
func (q *Queues) Close(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if qu := q.queues[key]; qu != nil {
		qu.open = false
		q.dropIfIdleLocked(key, qu)
	}
}

// Len is how many requests wait for key.
func (q *Queues) Len(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if qu := q.queues[key]; qu != nil {
		return len(qu.waiters)
	}
	return 0
}

// Waiting is how many requests wait in all the queues.
func (q *Queues) Waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, qu := range q.queues {
		n += len(qu.waiters)
	}
	return n
}

// Keys are the keys with requests waiting or being released, or released and not closed
// since: those whose model the caller should look at again.
func (q *Queues) Keys() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Collect(maps.Keys(q.queues))
}

func (q *Queues) nextFunc(key string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.passLocked(key)
		})
	}
}

// passLocked ends the released request's turn: the next one goes while the queue is open.
func (q *Queues) passLocked(key string) {
	qu := q.queues[key]
	if qu == nil {
		return
	}
	qu.releasing = false
	if qu.open {
		q.wakeHeadLocked(qu)
	}
	q.dropIfIdleLocked(key, qu)
}

func (q *Queues) wakeHeadLocked(qu *queue) {
	if len(qu.waiters) == 0 {
		return
	}
	w := qu.waiters[0]
	qu.waiters = qu.waiters[1:]
	qu.releasing = true
	close(w.wake)
}

func (q *Queues) removeLocked(key string, w *waiter) {
	qu := q.queues[key]
	if qu == nil {
		return
	}
	for i, x := range qu.waiters {
		if x == w {
			qu.waiters = append(qu.waiters[:i:i], qu.waiters[i+1:]...)
			break
		}
	}
	q.dropIfIdleLocked(key, qu)
}

// dropIfIdleLocked forgets a queue nobody waits in and nothing is being released from, so
// keys of deleted ModelServers do not accumulate. An open queue stays until Close: its
// state says the model is up.
func (q *Queues) dropIfIdleLocked(key string, qu *queue) {
	if len(qu.waiters) == 0 && !qu.releasing && !qu.open {
		delete(q.queues, key)
	}
}

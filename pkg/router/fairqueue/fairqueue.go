// Package fairqueue holds requests while their engines are saturated and lets them go, as
// capacity frees, in an order fair between tenants, weighted by tokens.
//
// The order is start-time fair queueing (Goyal, Vin and Cheng, 1996) with a request's
// estimated tokens (prompt plus max_tokens) as its cost: a request of tenant t gets the
// start tag S = max(V, F_t), where F_t is the finish tag of t's previous request and V the
// start tag of the request dispatched last, and the finish tag S + cost. Requests go in
// order of start tag. A tenant that sends a burst stacks its tags far ahead of V; a tenant
// sending steadily arrives with S = V and goes next, so its wait is bounded by one
// request's time whatever the burst's size, and each backlogged tenant is served the same
// tokens per unit of time. FIFO (Policy FIFO) orders by arrival alone: what the fairness is
// measured against.
//
// Fair order alone cannot keep a quiet tenant's wait near zero: the queue does not preempt,
// so with every slot held by a noisy tenant the quiet request waits for the next one to
// end. With reserve set, a tenant may hold at most Limit minus one slot for each other
// tenant active in the last ActiveWindow that holds none: a slot stays free for the quiet
// tenant's next request, which goes at once, at the cost of that slot idling in between.
//
// The Queue does not know engines: Limit says how many requests may be in flight now, and
// the Queue counts those it let go until they are released.
package fairqueue

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"
)

// Policy orders waiting requests.
type Policy string

const (
	// Fair is start-time fair queueing by tokens between tenants.
	Fair Policy = "fair"
	// FIFO is arrival order.
	FIFO Policy = "fifo"
)

// ErrFull is returned when MaxWaiting requests already wait.
var ErrFull = errors.New("the queue is full")

// ErrTimeout is returned when a request waited Timeout without being let go.
var ErrTimeout = errors.New("timed out waiting for capacity")

// ActiveWindow is how long after its last request a tenant counts as active (reserve).
const ActiveWindow = 2 * time.Second

// pollEvery is how often waiters look at Limit again: it changes with scraped load and
// endpoints coming and going, not only when a request of this queue ends.
const pollEvery = 20 * time.Millisecond

// Queue lets requests go while fewer than Limit() are in flight, and holds the rest.
type Queue struct {
	policy     Policy
	limit      func() int
	maxWaiting int
	timeout    time.Duration
	reserve    bool

	mu       sync.Mutex
	inflight int
	waiting  waiters
	vtime    float64
	finish   map[string]float64 // a tenant's last finish tag
	seq      uint64
	held     map[string]int       // requests let go and not released, by tenant
	seen     map[string]time.Time // a tenant's last request (reserve)
}

// New is a queue of the given policy letting requests go while fewer than limit() are in
// flight; at most maxWaiting wait (0: none), each at most timeout. reserve keeps a slot
// free for each active tenant that holds none (see the package comment).
func New(policy Policy, limit func() int, maxWaiting int, timeout time.Duration, reserve bool) *Queue {
	if policy != FIFO {
		policy = Fair
	}
	return &Queue{policy: policy, limit: limit, maxWaiting: maxWaiting, timeout: timeout, reserve: reserve,
		finish: map[string]float64{}, held: map[string]int{}, seen: map[string]time.Time{}}
}

// eligible says whether a request of tenant t may take one of limit slots now (q.mu held).
func (q *Queue) eligible(t string, limit int, now time.Time) bool {
	if !q.reserve {
		return true
	}
	others := 0
	for u, last := range q.seen {
		if u != t && q.held[u] == 0 && now.Sub(last) < ActiveWindow {
			others++
		}
	}
	return q.held[t] < max(1, limit-others)
}

// grant counts a request of tenant as let go (q.mu held).
func (q *Queue) grant(tenant string) {
	q.inflight++
	q.held[tenant]++
}

type waiter struct {
	tenant        string
	start, finish float64
	seq           uint64
	index         int
	granted       chan struct{}
}

// Acquire waits until the request of tenant, costing cost tokens, may go. It returns the
// release to call when the request ends and how long it waited. The error is ErrFull,
// ErrTimeout or ctx's.
func (q *Queue) Acquire(ctx context.Context, tenant string, cost int64) (release func(), waited time.Duration, err error) {
	begin := time.Now()
	q.mu.Lock()
	q.seen[tenant] = begin
	if len(q.waiting) == 0 && q.inflight < q.limit() && q.eligible(tenant, q.limit(), begin) {
		q.grant(tenant)
		q.mu.Unlock()
		return q.releaser(tenant), 0, nil
	}
	if len(q.waiting) >= q.maxWaiting {
		q.mu.Unlock()
		return nil, 0, ErrFull
	}
	w := &waiter{tenant: tenant, seq: q.seq, granted: make(chan struct{})}
	q.seq++
	w.start = max(q.vtime, q.finish[tenant])
	w.finish = w.start + float64(max(cost, 1))
	q.finish[tenant] = w.finish
	heap.Push(&q.waiting, q.keyed(w))
	q.mu.Unlock()
	// Those waiting may all be tenants at their share while w's tenant is not.
	q.dispatch()

	deadline := time.NewTimer(q.timeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		select {
		case <-w.granted:
			return q.releaser(tenant), time.Since(begin), nil
		case <-tick.C:
			q.dispatch()
		case <-deadline.C:
			if q.abandon(w) {
				return nil, time.Since(begin), ErrTimeout
			}
		case <-ctx.Done():
			if q.abandon(w) {
				return nil, time.Since(begin), ctx.Err()
			}
		}
	}
}

// keyed sets the order of w: its start tag when fair, its arrival when FIFO.
func (q *Queue) keyed(w *waiter) *waiter {
	if q.policy == FIFO {
		w.start = float64(w.seq)
	}
	return w
}

// abandon takes w out of the queue; false when it was granted meanwhile (its grant stands:
// the caller takes it, so the in-flight count stays right).
func (q *Queue) abandon(w *waiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-w.granted:
		return false
	default:
	}
	heap.Remove(&q.waiting, w.index)
	return true
}

func (q *Queue) releaser(tenant string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			q.inflight--
			if q.held[tenant]--; q.held[tenant] <= 0 {
				delete(q.held, tenant)
			}
			q.mu.Unlock()
			q.dispatch()
		})
	}
}

// dispatch lets waiters go, lowest tag first, while there is room; with reserve, a waiter
// whose tenant is at its share is passed over for the next.
func (q *Queue) dispatch() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		return
	}
	limit, now := q.limit(), time.Now()
	var passed []*waiter
	for len(q.waiting) > 0 && q.inflight < limit {
		w := heap.Pop(&q.waiting).(*waiter)
		if !q.eligible(w.tenant, limit, now) {
			passed = append(passed, w)
			continue
		}
		if q.policy == Fair {
			q.vtime = max(q.vtime, w.start)
		}
		q.grant(w.tenant)
		close(w.granted)
	}
	for _, w := range passed {
		heap.Push(&q.waiting, w)
	}
	if len(q.waiting) == 0 {
		// No tenant is backlogged: every finish tag at or below V is as good as none.
		for t, f := range q.finish {
			if f <= q.vtime {
				delete(q.finish, t)
			}
		}
	}
	for t, last := range q.seen {
		if now.Sub(last) >= ActiveWindow {
			delete(q.seen, t)
		}
	}
}

// Waiting is how many requests wait now.
func (q *Queue) Waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

// InFlight is how many requests the queue let go and are not released yet.
func (q *Queue) InFlight() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.inflight
}

// waiters is a heap by start tag, then arrival.
type waiters []*waiter

func (h waiters) Len() int { return len(h) }
func (h waiters) Less(i, j int) bool {
	if h[i].start != h[j].start {
		return h[i].start < h[j].start
	}
	return h[i].seq < h[j].seq
}
func (h waiters) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waiters) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waiters) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}

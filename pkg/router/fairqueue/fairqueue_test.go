package fairqueue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// order runs one slot: a noisy tenant queues burst requests, then a quiet one queues one;
// it returns the position (0-based) at which the quiet request went.
func order(t *testing.T, p Policy, burst int) int {
	t.Helper()
	q := New(p, func() int { return 1 }, 1000, 10*time.Second, false)
	hold, _, err := q.Acquire(context.Background(), "noisy", 100)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	enqueue := func(tenant string) {
		wg.Add(1)
		before := q.Waiting()
		go func() {
			defer wg.Done()
			release, _, err := q.Acquire(context.Background(), tenant, 100)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got = append(got, tenant)
			mu.Unlock()
			release()
		}()
		for q.Waiting() == before { // in arrival order
			time.Sleep(time.Millisecond)
		}
	}
	for range burst {
		enqueue("noisy")
	}
	enqueue("quiet")
	hold()
	wg.Wait()
	for i, tenant := range got {
		if tenant == "quiet" {
			return i
		}
	}
	t.Fatal("the quiet request never went")
	return -1
}

func TestFairLetsAQuietTenantPastABurst(t *testing.T) {
	if i := order(t, Fair, 20); i > 1 {
		t.Errorf("fair: the quiet tenant's request went %dth after a burst of 20, want at most 2nd", i+1)
	}
	if i := order(t, FIFO, 20); i != 20 {
		t.Errorf("FIFO: the quiet tenant's request went %dth, want last (21st)", i+1)
	}
}

func TestTokensWeigh(t *testing.T) {
	// Two backlogged tenants, one sending requests ten times as large: each gets about the
	// same tokens, so the small one gets about ten requests per large one.
	q := New(Fair, func() int { return 1 }, 1000, 10*time.Second, false)
	hold, _, _ := q.Acquire(context.Background(), "x", 1)
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	add := func(tenant string, cost int64) {
		wg.Add(1)
		before := q.Waiting()
		go func() {
			defer wg.Done()
			release, _, err := q.Acquire(context.Background(), tenant, cost)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got = append(got, tenant)
			mu.Unlock()
			release()
		}()
		for q.Waiting() == before {
			time.Sleep(time.Millisecond)
		}
	}
	for range 5 {
		add("large", 1000)
	}
	for range 30 {
		add("small", 100)
	}
	hold()
	wg.Wait()
	small := 0
	for _, tenant := range got[:12] {
		if tenant == "small" {
			small++
		}
	}
	if small < 9 {
		t.Errorf("of the first 12 requests let go, %d were the small tenant's (%v); want about 10", small, got[:12])
	}
}

func TestFullAndTimeout(t *testing.T) {
	q := New(Fair, func() int { return 1 }, 1, 50*time.Millisecond, false)
	hold, _, _ := q.Acquire(context.Background(), "a", 1)
	defer hold()
	errc := make(chan error, 1)
	go func() { _, _, err := q.Acquire(context.Background(), "a", 1); errc <- err }()
	for q.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, _, err := q.Acquire(context.Background(), "b", 1); !errors.Is(err, ErrFull) {
		t.Errorf("a second waiter in a queue of one: %v, want ErrFull", err)
	}
	if err := <-errc; !errors.Is(err, ErrTimeout) {
		t.Errorf("waiting past the timeout: %v, want ErrTimeout", err)
	}
	if q.Waiting() != 0 || q.InFlight() != 1 {
		t.Errorf("after the timeout: %d waiting, %d in flight; want 0 and 1", q.Waiting(), q.InFlight())
	}
}

func TestLimitRisingLetsWaitersGo(t *testing.T) {
	var mu sync.Mutex
	limit := 0
	q := New(Fair, func() int { mu.Lock(); defer mu.Unlock(); return limit }, 10, 5*time.Second, false)
	done := make(chan time.Duration, 1)
	go func() {
		release, waited, err := q.Acquire(context.Background(), "a", 1)
		if err != nil {
			t.Error(err)
		} else {
			release()
		}
		done <- waited
	}()
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	limit = 1
	mu.Unlock()
	select {
	case w := <-done:
		if w < 100*time.Millisecond {
			t.Errorf("waited %s, want at least the 100ms the limit was 0", w)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a waiter was not let go when the limit rose (no release happened)")
	}
}

// With reserve, a tenant that holds nothing finds a slot free while another keeps the rest
// busy and a backlog waiting; without it, it waits for one to end.
func TestReserveKeepsASlotForAnActiveTenant(t *testing.T) {
	for _, reserve := range []bool{true, false} {
		q := New(Fair, func() int { return 2 }, 100, 200*time.Millisecond, reserve)
		// The quiet tenant was active a moment ago.
		r, _, err := q.Acquire(context.Background(), "quiet", 1)
		if err != nil {
			t.Fatal(err)
		}
		r()
		for range 2 {
			go func() { _, _, _ = q.Acquire(context.Background(), "noisy", 1) }() // held, never released
		}
		time.Sleep(50 * time.Millisecond)
		_, waited, err := q.Acquire(context.Background(), "quiet", 1)
		switch {
		case reserve && (err != nil || waited > 10*time.Millisecond):
			t.Errorf("reserve: the quiet tenant waited %s (%v) with a slot kept for it", waited, err)
		case !reserve && err == nil:
			t.Errorf("no reserve: the quiet tenant got a slot while the noisy one held both")
		}
		if reserve && q.InFlight() != 2 {
			t.Errorf("reserve: %d in flight, want 2 (one noisy held back)", q.InFlight())
		}
	}
}

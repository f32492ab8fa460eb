package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// KVHub stands in for the KV-cache transfer fabric of prefill/decode disaggregation
// (NIXL, an HTTP side channel, LMCache, Mooncake). Engines sharing a hub can hand a
// prompt's KV from a prefill engine to a decode engine. Two stores live in it:
//
//   - keyed slots, one per transfer: "req/<X-Request-Id>" (http connector),
//     "nixl/<engine id>/<request id>" (NixlConnector) and "room/<bootstrap_room>"
//     (Mooncake). A pull consumes the slot; a decode engine can wait for a slot that
//     is not published yet (Mooncake sends both halves of a request concurrently).
//   - a content-addressed block store (LMCache): chained block hashes of every prompt a
//     prefill engine computed; a decode engine loads the longest prefix it finds.
//
// Nothing is copied, only the facts needed to charge transfer time. Entries expire after
// a minute so abandoned transfers do not leak. A KVHub is safe for concurrent use.
type KVHub struct {
	ttl time.Duration

	// sameVersion and crossVersion count keyed transfers between engines that both have a
	// Version, by whether the versions match.
	sameVersion, crossVersion atomic.Int64

	mu        sync.Mutex
	slots     map[string]*hubSlot
	blocks    map[uint64]time.Time // block hash → expiry
	lastSweep time.Time
}

// maxHubBlocks bounds the content store so a long benchmark cannot grow it without end.
const maxHubBlocks = 1 << 20

// kvEntry describes the KV of one prefilled prompt.
type kvEntry struct {
	engineID string
	version  string   // Config.Version of the prefill engine
	tokens   int      // prompt tokens whose KV is held
	blocks   []uint64 // chained hashes of the full blocks
	whole    uint64   // hash of the exact prompt
	location []string // the prefill engine's Config.Location
}

// covers returns how many of a prompt's tokens this KV can supply: all of them for the
// same prompt, else the tokens of the common leading full blocks (a router that sends
// the decode side a different prompt than the prefill side gets a partial transfer).
func (e *kvEntry) covers(tokens int, blocks []uint64, whole uint64, blockSize int) int {
	if e.whole == whole && e.tokens == tokens {
		return tokens
	}
	n := 0
	for n < len(blocks) && n < len(e.blocks) && blocks[n] == e.blocks[n] {
		n++
	}
	return n * blockSize
}

type hubSlot struct {
	entry   *kvEntry
	ready   chan struct{} // closed when entry is published
	expires time.Time
}

// NewKVHub returns an empty hub, to be shared through Config.Hub by the engines of a PD
// setup.
func NewKVHub() *KVHub {
	return &KVHub{ttl: time.Minute, slots: map[string]*hubSlot{}, blocks: map[uint64]time.Time{}}
}

// Len reports how many keyed transfers are published and not yet pulled (for tests).
func (h *KVHub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweepLocked(time.Now())
	n := 0
	for _, s := range h.slots {
		if s.entry != nil {
			n++
		}
	}
	return n
}

// Transfers reports how many keyed KV transfers went between engines of the same Version
// and how many between engines of different ones, since the hub was made (engines without
// a Version are not counted). Engines come and go; the hub outlives them.
func (h *KVHub) Transfers() (same, cross int64) {
	return h.sameVersion.Load(), h.crossVersion.Load()
}

// slotLocked returns the slot of key, creating an empty one.
func (h *KVHub) slotLocked(key string, now time.Time) *hubSlot {
	s := h.slots[key]
	if s == nil {
		s = &hubSlot{ready: make(chan struct{}), expires: now.Add(h.ttl)}
		h.slots[key] = s
	}
	return s
}

// sweepLocked drops expired slots and blocks, at most a few times per TTL so that the
// cost stays amortised.
func (h *KVHub) sweepLocked(now time.Time) {
	if now.Sub(h.lastSweep) < h.ttl/4 {
		return
	}
	h.lastSweep = now
	for k, s := range h.slots {
		if now.After(s.expires) {
			delete(h.slots, k)
		}
	}
	for b, exp := range h.blocks {
		if now.After(exp) {
			delete(h.blocks, b)
		}
	}
}

// publish makes e available under key and wakes anyone waiting for it.
func (h *KVHub) publish(key string, e *kvEntry) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweepLocked(now)
	s := h.slotLocked(key, now)
	s.expires = now.Add(h.ttl)
	if s.entry == nil {
		close(s.ready)
	}
	s.entry = e
}

// take pulls and consumes the entry under key, if published.
func (h *KVHub) take(key string) (*kvEntry, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweepLocked(time.Now())
	s := h.slots[key]
	if s == nil || s.entry == nil {
		return nil, false
	}
	delete(h.slots, key)
	return s.entry, true
}

// wait pulls the entry under key, waiting up to timeout (real time) for it to be
// published. It gives up early when ctx ends.
func (h *KVHub) wait(ctx context.Context, key string, timeout time.Duration) (*kvEntry, bool) {
	now := time.Now()
	h.mu.Lock()
	h.sweepLocked(now)
	s := h.slotLocked(key, now)
	if s.entry != nil {
		delete(h.slots, key)
		h.mu.Unlock()
		return s.entry, true
	}
	h.mu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.ready:
	case <-t.C:
	case <-ctx.Done():
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	if s.entry == nil || h.slots[key] != s {
		return nil, false // timed out, or another puller consumed it
	}
	delete(h.slots, key)
	return s.entry, true
}

// putBlocks adds block hashes to the content-addressed store.
func (h *KVHub) putBlocks(hashes []uint64) {
	now := time.Now()
	exp := now.Add(h.ttl)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweepLocked(now)
	for _, b := range hashes {
		if _, ok := h.blocks[b]; !ok && len(h.blocks) >= maxHubBlocks {
			return
		}
		h.blocks[b] = exp
	}
}

// matchBlocks returns how many leading blocks of hashes the content store holds,
// refreshing their expiry since they are in use.
func (h *KVHub) matchBlocks(hashes []uint64) int {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, b := range hashes {
		exp, ok := h.blocks[b]
		if !ok || now.After(exp) {
			break
		}
		h.blocks[b] = now.Add(h.ttl)
		n++
	}
	return n
}

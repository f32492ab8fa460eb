package pick

import (
	"container/list"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// BlockBytes is the prefix block size: 64 bytes, about 16 tokens at four bytes a token,
// vLLM's default KV block. Engines cache whole blocks, so a shared prefix is worth
// something only in whole blocks.
const BlockBytes = 64

// HashPrompt returns the chained hashes of the prompt's whole blocks: block i's hash covers
// blocks 0..i, so equal hashes mean an equal prefix up to there. The hash (XXH64, seed 0)
// is the same in every process, so router replicas sharing their prefix index (package
// shared) name a block alike.
func HashPrompt(prompt string) []uint64 {
	n := len(prompt) / BlockBytes
	out := make([]uint64, n)
	h := xxhash.New()
	for i := range n {
		h.WriteString(prompt[i*BlockBytes : (i+1)*BlockBytes])
		out[i] = h.Sum64()
	}
	return out
}

// PrefixIndex remembers which endpoints recently got each prefix block, bounded by an LRU
// over blocks. Each block keeps its most recent few endpoints, so a hot prefix spread over
// several endpoints (when load pushes it off one) stays affine to all of them.
type PrefixIndex struct {
	mu     sync.Mutex
	limit  int
	lru    *list.List // of uint64, front = most recent
	blocks map[uint64]*blockEntry
	// held is, per endpoint, how many shared blocks name it (blocks sent more than once: a
	// prefix reused, not one request's own tail): how much of the prompts' prefixes the
	// router expects to find in its cache, what losing it would cost (Held).
	held map[string]int
}

type blockEntry struct {
	elem  *list.Element
	addrs []string // most recent first
	uses  int      // times recorded (counted up to 2: shared or not)
}

const endpointsPerBlock = 4

// NewPrefixIndex returns an index holding up to limit blocks (at least 1024).
func NewPrefixIndex(limit int) *PrefixIndex {
	return &PrefixIndex{limit: max(limit, 1024), lru: list.New(), blocks: map[uint64]*blockEntry{}, held: map[string]int{}}
}

// Record notes that a request with these block hashes went to addr.
func (x *PrefixIndex) Record(hashes []uint64, addr string) {
	if len(hashes) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	// Last block first, so the first block ends most recent: an old prompt then wears away
	// from its end (its prefix still matches) instead of losing block 0 and with it all.
	for i := len(hashes) - 1; i >= 0; i-- {
		h := hashes[i]
		e, ok := x.blocks[h]
		if !ok {
			e = &blockEntry{elem: x.lru.PushFront(h)}
			x.blocks[h] = e
		} else {
			x.lru.MoveToFront(e.elem)
		}
		shared := e.uses >= 2
		e.uses = min(e.uses+1, 2)
		var added bool
		var dropped string
		e.addrs, added, dropped = promote(e.addrs, addr)
		switch {
		case shared: // counted already: follow the change
			if added {
				x.held[addr]++
			}
			x.unhold(dropped)
		case e.uses == 2: // sent a second time: now it counts for every endpoint it names
			for _, a := range e.addrs {
				x.held[a]++
			}
		}
	}
	for x.lru.Len() > x.limit {
		oldest := x.lru.Back()
		x.lru.Remove(oldest)
		h := oldest.Value.(uint64)
		if e := x.blocks[h]; e.uses >= 2 {
			for _, a := range e.addrs {
				x.unhold(a)
			}
		}
		delete(x.blocks, h)
	}
}

func (x *PrefixIndex) unhold(addr string) {
	if addr == "" {
		return
	}
	if x.held[addr]--; x.held[addr] <= 0 {
		delete(x.held, addr)
	}
}

// promote puts addr first in addrs; added says it was not there before, dropped is the
// endpoint pushed off the end to make room ("" if none).
func promote(addrs []string, addr string) (_ []string, added bool, dropped string) {
	for i, a := range addrs {
		if a == addr {
			copy(addrs[1:i+1], addrs[:i])
			addrs[0] = addr
			return addrs, false, ""
		}
	}
	if len(addrs) < endpointsPerBlock {
		addrs = append(addrs, "")
	} else {
		dropped = addrs[len(addrs)-1]
	}
	copy(addrs[1:], addrs)
	addrs[0] = addr
	return addrs, true, dropped
}

// Held is how many shared blocks of the index (sent more than once) name addr among their
// recent endpoints.
func (x *PrefixIndex) Held(addr string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.held[addr]
}

// Match returns, per endpoint, how many leading blocks of hashes it recently got.
func (x *PrefixIndex) Match(hashes []uint64) map[string]int {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := map[string]int{}
	alive := map[string]bool{}
	for i, h := range hashes {
		e, ok := x.blocks[h]
		if !ok {
			break
		}
		next := map[string]bool{}
		for _, a := range e.addrs {
			if i == 0 || alive[a] {
				next[a] = true
				out[a] = i + 1
			}
		}
		if len(next) == 0 {
			break
		}
		alive = next
	}
	return out
}

// Len is the number of blocks held.
func (x *PrefixIndex) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.blocks)
}

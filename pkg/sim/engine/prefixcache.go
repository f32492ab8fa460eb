package engine

import "container/list"

// prefixCache is the engine's automatic prefix cache: an LRU set of chained block
// hashes (see PrefixHashes). Because each hash covers the whole prefix up to its block,
// the number of leading hashes present is the number of prompt blocks whose KV can be
// reused. It is not safe for concurrent use; the Server's mutex guards it.
type prefixCache struct {
	capacity int
	order    *list.List // front = most recently used; values are uint64 hashes
	index    map[uint64]*list.Element
}

func newPrefixCache(capacity int) *prefixCache {
	return &prefixCache{capacity: capacity, order: list.New(), index: map[uint64]*list.Element{}}
}

// match returns how many leading blocks of hashes are cached and refreshes their
// recency, as a cache hit makes those blocks hot.
func (c *prefixCache) match(hashes []uint64) int {
	n := 0
	for n < len(hashes) && c.index[hashes[n]] != nil {
		n++
	}
	// Refresh tail first so the chain's first block ends up most recent: eviction then
	// takes a chain's tail before its head, never stranding unreachable tail blocks.
	for i := n - 1; i >= 0; i-- {
		c.order.MoveToFront(c.index[hashes[i]])
	}
	return n
}

// insert records the blocks of a prefilled prompt, evicting the least recently used
// blocks beyond capacity.
func (c *prefixCache) insert(hashes []uint64) {
	for i := len(hashes) - 1; i >= 0; i-- { // tail first, see match
		h := hashes[i]
		if e, ok := c.index[h]; ok {
			c.order.MoveToFront(e)
			continue
		}
		c.index[h] = c.order.PushFront(h)
	}
	for c.order.Len() > c.capacity {
		e := c.order.Back()
		c.order.Remove(e)
		delete(c.index, e.Value.(uint64))
	}
}

func (c *prefixCache) len() int { return c.order.Len() }

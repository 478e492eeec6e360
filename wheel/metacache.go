package wheel

import (
	"github.com/delaywheel/delaywheel/wheel/model"
	lru "github.com/hashicorp/golang-lru/v2/simplelru"
)

// metaCacheEntries bounds the metas the store keeps decoded in memory. A
// keyed message's meta is written when it is enqueued and read when it is
// leased, and every lease writes one that its ack reads: at 10,000
// messages a second enqueued two seconds ahead (a schedule's occurrences),
// 20,000 metas are between those two points. An entry is a meta and its
// key, about 150 bytes with the list's links, so the cache holds at most a
// few MiB, whatever the backlog.
const metaCacheEntries = 32 << 10

// metaCache holds the metas recent batches wrote, as the index holds them,
// so that the lease or ack that follows reads no index. Invariant: an
// entry for id is the meta that the committed index stores under
// metaKey(id), decoded from its encoding; a batch that writes or deletes
// a meta updates or drops the entry once its index batch has committed
// (tx.commit), and a failed batch leaves the store broken. The cache
// changes what a batch reads from, never what it reads: Apply stays a
// function of the commands and the stored state. Guarded by Store.mu.
type metaCache struct {
	lru *lru.LRU[model.ID, meta]
}

func newMetaCache() *metaCache {
	l, err := lru.NewLRU[model.ID, meta](metaCacheEntries, nil)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return &metaCache{lru: l}
}

// get returns the cached meta of id.
func (c *metaCache) get(id model.ID) (meta, bool) { return c.lru.Get(id) }

// commit records what a committed batch wrote: a meta, or nil where it
// deleted one or marked it gone. A meta that puts its message in the
// overflow is dropped rather than kept: its message comes due beyond the
// horizon, long after the cache has turned over, and promoting it writes
// it a new meta, so keeping it would cost every enqueue beyond the horizon
// an insertion and an eviction, and evict the metas that a lease or an
// ack is about to read.
func (c *metaCache) commit(written map[model.ID]*meta) {
	for id, m := range written {
		if m == nil || m.Loc == locOverflow {
			c.lru.Remove(id)
		} else {
			c.lru.Add(id, *m)
		}
	}
}

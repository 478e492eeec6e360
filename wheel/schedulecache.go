package wheel

import (
	lru "github.com/hashicorp/golang-lru/v2/simplelru"
)

// Bounds of the schedules the store keeps in memory: every occurrence an
// advance enqueues reads its schedule and writes it back, so 10,000
// schedules firing every second read 10,000 schedules a second. The cache
// holds up to scheduleCacheEntries stored values of at most
// scheduleCacheMaxBytes each (a larger one, a schedule with a large body,
// is read from the index): a few MiB at the most, however many schedules
// are stored.
const (
	scheduleCacheEntries  = 16 << 10
	scheduleCacheMaxBytes = 1 << 10
)

// scheduleCache holds the stored values of the schedules recent batches
// wrote, so that the advance that follows reads no index. Invariant: an
// entry for name is, byte for byte, the value the committed index stores
// under scheduleKey(name); a batch that writes or deletes a schedule
// updates or drops the entry once its index batch has committed
// (tx.commit), and a failed batch leaves the store broken. Like the meta
// cache (metacache.go), it changes what a batch reads from, never what it
// reads. Guarded by Store.mu.
type scheduleCache struct {
	lru *lru.LRU[string, []byte]
}

func newScheduleCache() *scheduleCache {
	l, err := lru.NewLRU[string, []byte](scheduleCacheEntries, nil)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return &scheduleCache{lru: l}
}

// get returns the cached value of schedule name. The caller must not
// change it.
func (c *scheduleCache) get(name string) ([]byte, bool) { return c.lru.Get(name) }

// commit records what a committed batch wrote: a schedule's value, or nil
// where it deleted one. A value the batch hands over is not changed after.
func (c *scheduleCache) commit(written map[string][]byte) {
	for name, v := range written {
		if v == nil || len(v) > scheduleCacheMaxBytes {
			c.lru.Remove(name)
		} else {
			c.lru.Add(name, v)
		}
	}
}

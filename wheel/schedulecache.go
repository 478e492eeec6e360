package wheel

import (
	lru "github.com/hashicorp/golang-lru/v2/simplelru"
)

// Bounds of the schedules the store keeps in memory: every occurrence an
// advance enqueues reads its schedule and writes its calendar back, so
// 10,000 schedules firing every second read 10,000 schedules a second. The
// cache holds up to scheduleCacheEntries schedules of at most
// scheduleCacheMaxBytes each (scheduleSize; a larger one, a schedule with
// a large body, is read from the index): a few MiB at the most, however
// many schedules are stored.
const (
	scheduleCacheEntries  = 16 << 10
	scheduleCacheMaxBytes = 1 << 10
)

// scheduleCache holds the schedules recent batches wrote, decoded, so that
// the advance that follows reads and decodes nothing. Invariant: an entry
// for name is what decoding the committed index's schedule and calendar of
// name gives; a batch that writes or deletes a schedule updates or drops
// the entry once its index batch has committed (tx.commit), and a failed
// batch leaves the store broken. Like the meta cache (metacache.go), it
// changes what a batch reads from, never what it reads. Entries share
// their body and headers with whoever reads them, and nobody changes
// those. Guarded by Store.mu.
type scheduleCache struct {
	lru *lru.LRU[string, ScheduleInfo]
}

func newScheduleCache() *scheduleCache {
	l, err := lru.NewLRU[string, ScheduleInfo](scheduleCacheEntries, nil)
	if err != nil {
		panic(err) // only for a size below 1
	}
	return &scheduleCache{lru: l}
}

// get returns the cached schedule name.
func (c *scheduleCache) get(name string) (ScheduleInfo, bool) { return c.lru.Get(name) }

// commit records what a committed batch wrote: a schedule, or nil where it
// deleted one. A schedule the batch hands over is not changed after.
func (c *scheduleCache) commit(written map[string]*ScheduleInfo) {
	for name, p := range written {
		if p == nil || scheduleSize(p) > scheduleCacheMaxBytes {
			c.lru.Remove(name)
		} else {
			c.lru.Add(name, *p)
		}
	}
}

// scheduleSize is about the memory a decoded schedule holds beyond its
// fixed fields: its strings, body and headers.
func scheduleSize(info *ScheduleInfo) int {
	n := len(info.Name) + len(info.Cron) + len(info.Timezone) + len(info.Topic) + len(info.Body)
	for k, v := range info.Headers {
		n += len(k) + len(v)
	}
	return n
}

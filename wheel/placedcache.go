package wheel

import (
	"cmp"
	"slices"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// placedCacheBytes bounds the memory of the placements the store keeps
// decoded (placedCache): a fixed budget, whatever the backlog.
const placedCacheBytes = 8 << 20

// placedCache keeps, for the entries whose placements recent batches
// wrote, those placements decoded and which of the entry's messages have
// a meta key of their own, so that handing out a placed message and
// acking it read no index: neither its meta key, which for a placed
// message is usually not there (the dearest read of the index: every
// level is asked), nor its entry's placements.
//
// Invariant: an entry for index holds the placements the committed index
// stores under placedKey(index), and every seq of that entry whose meta
// key the committed index holds is marked. It is added by the batch that
// writes the placements, which applies their entry: no meta key of that
// entry can exist before (ids are made from the entry's index). Every
// write or delete of a meta key goes through setMeta or delMeta, which
// record the message in tx.metas, and commit marks each of them (a mark
// for a deleted key only costs a lookup); a batch that deletes the
// placements (dropPlacements) removes the entry, or does not add it when
// it wrote them too. A marked or unknown
// message is looked up in the index as before. So the cache changes what
// a batch reads from, never what it reads: Apply stays a function of the
// commands and the stored state, the same on every replica, and a store
// opened afresh starts with it empty. Guarded by Store.mu.
type placedCache struct {
	entries map[uint64]*placedEntry
	order   []uint64 // indexes in the order added, oldest first
	bytes   int
}

// placedEntry is one entry's placements and its messages with a meta key.
type placedEntry struct {
	ps     []placed
	marked []uint64 // bit seq set: the message has (or may have) a meta key
}

func newPlacedCache() *placedCache {
	return &placedCache{entries: map[uint64]*placedEntry{}}
}

func (e *placedEntry) size() int { return 64 + 24*len(e.ps) + 8*len(e.marked) }

// get returns the cached placements of entry index.
func (c *placedCache) get(index uint64) *placedEntry { return c.entries[index] }

// find returns where the entry placed message seq.
func (e *placedEntry) find(seq uint32) (second, off int64, ok bool) {
	i, found := slices.BinarySearchFunc(e.ps, seq, func(p placed, seq uint32) int { return cmp.Compare(p.seq, seq) })
	if !found {
		return 0, 0, false
	}
	return e.ps[i].second, e.ps[i].off, true
}

// hasMeta reports whether message seq may have a meta key of its own.
func (e *placedEntry) hasMeta(seq uint32) bool {
	w := int(seq / 64)
	return w < len(e.marked) && e.marked[w]&(1<<(seq%64)) != 0
}

func (e *placedEntry) mark(seq uint32) {
	w := int(seq / 64)
	if w >= len(e.marked) {
		e.marked = append(e.marked, make([]uint64, w+1-len(e.marked))...)
	}
	e.marked[w] |= 1 << (seq % 64)
}

// commit records what a committed batch did: the placements it wrote
// (entries it applied), the ones it deleted, and the meta keys it wrote or
// deleted.
func (c *placedCache) commit(added map[uint64][]placed, dropped map[uint64]bool, metas map[model.ID]*meta) {
	for index := range dropped {
		c.remove(index)
	}
	for index, ps := range added {
		// A batch may write an entry's placements and, expiring their last
		// second, delete them.
		if len(ps) == 0 || dropped[index] {
			continue
		}
		c.remove(index)
		e := &placedEntry{ps: ps}
		c.entries[index] = e
		c.order = append(c.order, index)
		c.bytes += e.size()
	}
	for id := range metas {
		if e := c.entries[id.Index]; e != nil {
			c.bytes -= e.size()
			e.mark(id.Seq)
			c.bytes += e.size()
		}
	}
	for c.bytes > placedCacheBytes && len(c.order) > 0 {
		c.remove(c.order[0])
	}
	// Indexes removed out of order stay in order until they reach its
	// head; compact it when they are most of it.
	if len(c.order) > 2*len(c.entries)+64 {
		c.order = slices.DeleteFunc(c.order, func(i uint64) bool { return c.entries[i] == nil })
	}
}

// remove drops the entry of index, if cached.
func (c *placedCache) remove(index uint64) {
	e := c.entries[index]
	if e != nil {
		delete(c.entries, index)
		c.bytes -= e.size()
	}
	for len(c.order) > 0 && c.entries[c.order[0]] == nil {
		c.order = c.order[1:]
	}
}

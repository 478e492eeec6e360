package wheel

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble"
)

// Committing a batch (tx.commit): its slot-file records, then its index
// batch, then what it changed in memory; and the reads of the committed
// index (Store.get, scan). It calls down into batch.go's primitives and
// the caches; nothing in it is called by them.

// commit writes the slot files, then the index batch, then deletes expired
// files, and finally publishes the new state in memory.
func (t *tx) commit() error {
	if t.err != nil {
		return t.err
	}
	s := t.s
	for _, sec := range slices.Sorted(maps.Keys(t.pend)) {
		p := t.pend[sec]
		if len(p.buf) == 0 {
			continue
		}
		off, end, err := s.segs.AppendEncoded(sec, p.buf)
		if err != nil {
			return err
		}
		if off != p.base || end != p.stats.Length {
			return fmt.Errorf("segment %s: %w: appended at %d..%d, index expected %d..%d",
				s.segs.Path(sec), ErrInconsistent, off, end, p.base, p.stats.Length)
		}
		t.set(segLenKey(sec), p.stats.encode())
		// The bytes are in the file now, and nothing refers to the buffer:
		// records read from it during the batch were decoded into copies.
		s.segBufs.give(p.buf)
		p.buf = nil
	}
	newCounts := map[uint32]counts{}
	for tid, d := range t.counts {
		c := s.counts[tid]
		c.Delayed += d.Delayed
		c.Ready += d.Ready
		c.Reserved += d.Reserved
		c.Dead += d.Dead
		newCounts[tid] = c
		t.set(countsKey(tid), c.encode())
	}
	// A scalar other than the applied index is written only when the
	// batch changes it: an absent key reads as 0, where each starts, so the
	// index holds every scalar's current value with a write per change, not
	// per batch.
	t.set(keyApplied, putU64(t.applied))
	if t.cursor != s.cursor {
		t.set(keyCursor, putU64(uint64(t.cursor)))
	}
	if t.nextTop != s.nextTopic {
		t.set(keyNextTopic, putU64(uint64(t.nextTop)))
	}
	if t.overDel != 0 {
		t.set(keyOverflow, putU64(uint64(s.overflow+t.overDel)))
	}
	if t.schedules != s.schedules {
		t.set(keySchedules, putU64(uint64(t.schedules)))
	}
	t.commitOverflowHours()
	if t.err != nil {
		return t.err
	}
	wo := pebble.NoSync
	if t.sync {
		if err := s.segs.Sync(); err != nil {
			return err
		}
		wo = pebble.Sync
	}
	if err := t.b.Commit(wo); err != nil {
		return fmt.Errorf("commit index: %w", err)
	}
	s.metas.commit(t.metas)
	if len(t.newPlaced) > 0 || len(t.dropPlaced) > 0 || len(s.placed.entries) > 0 {
		added := make(map[uint64][]placed, len(t.newPlaced))
		for index, v := range t.newPlaced {
			// Encoded by flushPlacing, so this does not fail; an entry
			// that did would merely not be cached.
			if ps, err := decodePlacements(v); err == nil {
				added[index] = ps
			}
		}
		s.placed.commit(added, t.dropPlaced, t.metas)
	}
	s.scheds.commit(t.scheds)
	s.readyFloors.lower(t.readyLow)
	s.dueFloor = min(s.dueFloor, t.dueLow)
	if p := s.flushErr.Load(); p != nil {
		return *p
	}
	s.applied, s.cursor, s.nextTopic, s.promoted = t.applied, t.cursor, t.nextTop, t.promoted
	s.schedules = t.schedules
	// An expired file may go only once its Expire is durable: at once when
	// this batch was synced, else after the next flush (forced now and then
	// so that files do not linger).
	s.expiredFiles = append(s.expiredFiles, t.expired...)
	if t.sync {
		if err := s.removeExpiredLocked(); err != nil {
			return err
		}
	} else if len(s.expiredFiles) > 0 && s.expiresSinceFlush >= flushEveryExpires {
		if err := s.syncLocked(); err != nil {
			return err
		}
	}
	s.overflow += t.overDel
	for name, id := range t.newTopic {
		s.topics[name] = id
		s.topicNames[id] = name
	}
	for tid, c := range newCounts {
		s.counts[tid] = c
	}
	for tid, d := range t.stats {
		s.stats[tid] = s.stats[tid].add(*d)
	}
	for id, n := range t.newNodes {
		if n == nil {
			delete(s.nodes, id)
		} else {
			s.nodes[id] = *n
		}
	}
	s.commitWebhooks(t.newWebhooks)
	// Published before the observer hears of the batch: the dispatcher it
	// wakes reads the ready queues without mu, by the published topics, at
	// once, and a topic the batch created must not look unknown (its
	// queue empty) then, or that wake-up is spent on nothing.
	s.publishLocked(len(t.newTopic) > 0)
	if s.observer != nil && len(t.events) > 0 {
		s.observer.applied(t.events)
	}
	return nil
}

func (t *tx) get(key []byte) []byte {
	if t.err != nil {
		return nil
	}
	v, closer, err := t.b.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.fail(fmt.Errorf("index get: %w", err))
		return nil
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out
}

// scan iterates the committed keys with prefix p.
func (s *Store) scan(p []byte, fn func(k, v []byte) error) error {
	return s.scanRange(p, prefixEnd(p), fn)
}

// scanRange iterates the committed keys in [lo, hi): iterRange to the end.
func (s *Store) scanRange(lo, hi []byte, fn func(k, v []byte) error) error {
	return s.iterRange(lo, hi, func(k, v []byte) (bool, error) { return true, fn(k, v) })
}

// segLens returns the recorded length and live count of every slot file.
func (s *Store) segLens() (map[int64]segLen, error) {
	out := map[int64]segLen{}
	err := s.scan([]byte{pSegLen}, func(k, v []byte) error {
		out[int64(u64(k[1:]))] = decodeSegLen(v)
		return nil
	})
	return out, err
}

// bufPool keeps a few emptied buffers of slot-file records for the next
// batches, which would otherwise grow a fresh buffer, doubling it, for
// every slot second they append to. It keeps small buffers only, and few,
// so that a burst of large batches leaves no memory behind. s.mu guards it.
type bufPool struct {
	bufs [][]byte
}

const (
	bufPoolMax    = 8
	bufPoolMaxCap = 256 << 10
)

// take returns an empty buffer, nil when none is kept.
func (p *bufPool) take() []byte {
	n := len(p.bufs)
	if n == 0 {
		return nil
	}
	b := p.bufs[n-1]
	p.bufs = p.bufs[:n-1]
	return b
}

// give keeps b for reuse if it is small and the pool has room.
func (p *bufPool) give(b []byte) {
	if cap(b) == 0 || cap(b) > bufPoolMaxCap || len(p.bufs) >= bufPoolMax {
		return
	}
	p.bufs = append(p.bufs, b[:0])
}

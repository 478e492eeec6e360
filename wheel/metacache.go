package wheel

import (
	"fmt"
	"maps"

	"github.com/delaywheel/delaywheel/segment"
)

// The meta cache. Handing out a message applies a Lease, and acking it an
// Ack; each first reads the message's meta. Those metas were written when
// the message was enqueued, often long before, so the read is a point
// lookup through Pebble's levels: on one node delivering 10,000 messages a
// second it was a seventh of the server's CPU. While a loader is attached
// (on the leader), the store keeps in memory the metas of the messages
// whose current record lives in a loaded slot, [cursor, loadedThrough]:
// exactly the messages about to be handed out. A message handed out from
// there stays cached while it is reserved, wherever its lease record
// lies, so that the ack which usually follows finds it too.
//
// Loading a slot fills in the metas of its live records. They are derived
// from the records: put writes a record and the meta naming it together,
// from the same message, and a record is live until the meta moves away
// (unplace appends a tombstone). A committed batch then updates every
// cached meta it rewrote or deleted, and adds the ones it placed into a
// loaded slot. A meta leaves the cache when its message leaves both the
// loaded slots and the reserved state (acked, cancelled, nacked to a later
// slot, moved to the ready queue when its slot expired),
// and the whole cache is dropped when the loader is detached. It holds at
// most maxCachedMetas entries; past that, lookups go to the index. Its map
// is rebuilt smaller once it has emptied to an eighth of its peak.
//
// With Options.CheckMetaCache every cached lookup is compared with the
// index, and a difference fails the batch with ErrInconsistent; the
// model-based tests run that way.

// maxCachedMetas bounds the meta cache: about 100 bytes an entry.
const maxCachedMetas = 1 << 18

// shrinkMetasFrom is the size from which the cache's map is rebuilt once it
// holds under an eighth of its peak: a Go map keeps the buckets of its
// largest size, which after a burst to the bound would be tens of MiB held
// for a trickle.
const shrinkMetasFrom = 1 << 13

// metaWrite is a meta a batch wrote (or deleted) that the cache must hear of.
type metaWrite struct {
	m   meta
	del bool
}

// watchesMeta reports whether the cache must hear of a change to id's meta
// that would place it at m (nil: deleted): it holds id, or m lies in a
// loaded slot. s.mu is held.
func (s *Store) watchesMeta(id ID, m *meta) bool {
	if s.loader == nil {
		return false
	}
	if _, ok := s.metas[id]; ok {
		return true
	}
	return m != nil && m.Loc == locSegment && m.Second <= s.loadedThrough
}

// cacheMeta records that the index now holds m as id's meta. s.mu is held.
func (s *Store) cacheMeta(id ID, m meta) {
	_, held := s.metas[id]
	loaded := m.Second <= s.loadedThrough
	if s.loader == nil || m.Loc != locSegment || m.Second < s.cursor || !(loaded || held && m.State == StateReserved) {
		delete(s.metas, id)
		return
	}
	if !held && len(s.metas) >= maxCachedMetas {
		return
	}
	if s.metas == nil {
		s.metas = make(map[ID]meta)
	}
	s.metas[id] = m
	s.metasPeak = max(s.metasPeak, len(s.metas))
}

// cacheLoaded records the metas of a loaded slot's live records. s.mu is
// held and sec is loaded. A slot about to fire may hold tens of thousands
// of messages, so this does one map write per message.
func (s *Store) cacheLoaded(sec int64, msgs []liveMessage) {
	if s.loader == nil || len(msgs) == 0 {
		return
	}
	if s.metas == nil {
		s.metas = make(map[ID]meta, len(msgs))
	}
	var topic string
	var tid uint32
	known := false
	for i := range msgs {
		if len(s.metas) >= maxCachedMetas {
			return
		}
		lm := &msgs[i]
		if !known || lm.Topic != topic {
			tid, known = s.topics[lm.Topic]
			topic = lm.Topic
			if !known {
				continue
			}
		}
		typ := segment.TypeMessage
		if lm.Lease {
			typ = segment.TypeLease
		}
		s.metas[lm.ID] = slotMeta(&lm.Message, tid, typ, sec, lm.Offset)
	}
	s.metasPeak = max(s.metasPeak, len(s.metas))
}

// shrinkMetas rebuilds the cache's map at its current size once that is
// under an eighth of its peak (past shrinkMetasFrom). s.mu is held.
func (s *Store) shrinkMetas() {
	if s.metasPeak < shrinkMetasFrom || len(s.metas)*8 >= s.metasPeak {
		return
	}
	m := make(map[ID]meta, len(s.metas))
	maps.Copy(m, s.metas)
	s.metas, s.metasPeak = m, len(m)
}

// cachedMeta returns id's meta from the cache, if it holds it. With
// Options.CheckMetaCache it also reads the index and fails the batch when
// the two differ.
func (t *tx) cachedMeta(id ID) (meta, bool) {
	m, ok := t.s.metas[id]
	if ok {
		t.s.metaHits++
	}
	if !ok || !t.s.opts.CheckMetaCache {
		return m, ok
	}
	im, found := t.indexMeta(id)
	if !found || im != m {
		t.fail(fmt.Errorf("message %s: %w: cached meta %+v, index %+v (found %v)", id, ErrInconsistent, m, im, found))
		return meta{}, false
	}
	return m, true
}

// commitMetas brings the cache up to date with the metas a committed batch
// wrote. s.mu is held, and the batch's cursor is the store's.
func (t *tx) commitMetas() {
	for id, w := range t.metaW {
		if w.del {
			delete(t.s.metas, id)
		} else {
			t.s.cacheMeta(id, w.m)
		}
	}
	t.s.shrinkMetas()
}

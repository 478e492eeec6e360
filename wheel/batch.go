package wheel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/cockroachdb/pebble"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// A batch (tx) is one Apply: an indexed Pebble batch, whose reads see its
// own writes, and the records it appends to slot files, which are written
// before the index when it commits.

// pendSeg collects the records a batch appends to one slot file; they are
// written with one write when the batch commits, before the index.
type pendSeg struct {
	base  int64 // file length before the batch
	buf   []byte
	stats segLen // the slot's recorded state, updated as records are added
}

// tx is one atomic batch of applied entries.
type tx struct {
	s       *Store
	b       *pebble.Batch // indexed: reads see the batch's own writes
	err     error
	index   uint64 // entry being applied
	seq     uint32 // next message position in the entry (below MaxEntryMessages)
	applied uint64
	cursor  int64
	nextTop uint32
	overDel int64
	// schedules is how many recurring schedules are stored.
	schedules int64
	sync      bool
	// promoted is the due instant (ms) before which the overflow holds
	// nothing: what lies before it was promoted, put never sends a message
	// due within the horizon to the overflow, and the cursor, and with it
	// the horizon, never moves back. 0: not known (the first promote after
	// an open scans from the start).
	promoted int64

	pend    map[int64]*pendSeg
	expired []int64
	counts  map[uint32]counts // deltas
	// newTopic, newNodes, newWebhooks and scheds are nil until the batch
	// writes one (setIn): most batches write none.
	newTopic map[string]uint32
	newNodes map[string]*model.Member // nil value: removed
	// newWebhooks are the webhooks the batch set (nil: deleted).
	newWebhooks map[string]*command.Webhook
	// events are what the batch did that the observer hears of; follows is
	// the last slot second whose placements it follows (-1: none). Neither
	// changes what the batch writes.
	events  []Event
	follows int64
	// placed and lastMsg keep what the batch read from the index and the
	// slot files, for its own later reads (placement.go, readMessage).
	placed  map[uint64][]placed
	lastMsg lastMsg
	stats   map[uint32]*TopicStats // transition counts of this batch
	scratch []byte                 // reused encoding buffer; whatever takes it copies it
	keyBuf  []byte                 // reused by setMeta
	metaBuf []byte                 // reused by setMeta
	// metas are the metas the batch wrote, as a read would decode them,
	// and nil where it deleted one or marked it gone (metacache.go).
	metas map[model.ID]*meta
	// scheds are the schedules the batch wrote, as a read would decode
	// them, and nil where it deleted one (schedulecache.go).
	scheds map[string]*ScheduleInfo
	// newPlaced are the placements the batch wrote, by entry, and
	// dropPlaced the entries whose placements it deleted (placedcache.go).
	newPlaced  map[uint64][]byte
	dropPlaced map[uint64]bool
	// implicit is set while a Schedule puts a new message without a key:
	// its placement (placement.go) stands for its meta.
	implicit bool
	placing  placing
	// readyLow is the lowest ready key the batch wrote, per topic
	// (readyfloor.go).
	readyLow map[uint32][]byte
	// dueLow is the earliest schedule due key (next_ms) the batch wrote,
	// math.MaxInt64 when none (dueFloor).
	dueLow int64
	// overHours are the changes to the overflow's counts by hour
	// (overflowhours.go); nil until the batch touches the overflow.
	overHours map[int64]int64
}

func (s *Store) newTx() *tx {
	t := &tx{
		s: s, b: s.db.NewIndexedBatch(), applied: s.applied, cursor: s.cursor, nextTop: s.nextTopic, promoted: s.promoted,
		schedules: s.schedules, dueLow: math.MaxInt64,
		pend: map[int64]*pendSeg{}, counts: map[uint32]counts{}, metas: map[model.ID]*meta{},
		sync: s.opts.SyncEveryBatch, stats: map[uint32]*TopicStats{}, follows: -1,
	}
	if s.observer != nil {
		t.follows = s.observer.followsThrough()
	}
	return t
}

// setIn sets m[k] to v, making the map first if it is nil.
func setIn[K comparable, V any](m *map[K]V, k K, v V) {
	if *m == nil {
		*m = map[K]V{}
	}
	(*m)[k] = v
}

func (t *tx) fail(err error) {
	if t.err == nil {
		t.err = err
	}
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

// keysHeld reports, for each of keys (all distinct), whether the index
// holds it, as get would, with one iterator sought through the keys in
// order. Invariant: a batch of n absent-key checks costs one iterator's
// setup, where n gets would set up n (a get builds its own iterator over
// every level, which for an absent key is most of its cost).
func (t *tx) keysHeld(keys [][]byte) []bool {
	held := make([]bool, len(keys))
	if t.err != nil || len(keys) == 0 {
		return held
	}
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(keys[a], keys[b]) })
	it, err := t.b.NewIter(nil)
	if err != nil {
		t.fail(fmt.Errorf("index iterator: %w", err))
		return held
	}
	for _, i := range order {
		held[i] = it.SeekPrefixGE(keys[i]) && bytes.Equal(it.Key(), keys[i])
	}
	if err := it.Close(); err != nil {
		t.fail(fmt.Errorf("index iterator: %w", err))
	}
	return held
}

func (t *tx) set(k, v []byte) {
	if err := t.b.Set(k, v, nil); err != nil {
		t.fail(fmt.Errorf("index set: %w", err))
	}
}

func (t *tx) del(k []byte) {
	if err := t.b.Delete(k, nil); err != nil {
		t.fail(fmt.Errorf("index delete: %w", err))
	}
}

// scanKeys returns the keys and values in [lo, hi) as the batch sees them.
func (t *tx) scanKeys(lo, hi []byte, limit int) (keys, vals [][]byte) {
	if t.err != nil {
		return nil, nil
	}
	it, err := t.b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		t.fail(fmt.Errorf("index scan: %w", err))
		return nil, nil
	}
	for it.First(); it.Valid() && (limit <= 0 || len(keys) < limit); it.Next() {
		keys = append(keys, append([]byte(nil), it.Key()...))
		vals = append(vals, append([]byte(nil), it.Value()...))
	}
	if err := it.Close(); err != nil {
		t.fail(fmt.Errorf("index scan: %w", err))
	}
	return keys, vals
}

// setMeta writes a message's meta. The batch copies key and value, so both
// are encoded into buffers the transaction reuses.
func (t *tx) setMeta(id model.ID, m *meta) {
	t.keyBuf = appendMetaKey(t.keyBuf[:0], id)
	t.metaBuf = m.appendTo(t.metaBuf[:0])
	t.set(t.keyBuf, t.metaBuf)
	// What the index now holds, decoded as a read would decode it.
	stored, err := decodeMeta(t.metaBuf)
	if err != nil {
		t.fail(fmt.Errorf("index meta of message %s: %w", id, err))
		return
	}
	t.metas[id] = &stored
}

// delMeta deletes the meta mt of a message, or marks it gone if its entry's
// placements would otherwise imply one. A message with a key never has a
// placement (it gets a meta at enqueue), so its entry's are not read.
func (t *tx) delMeta(id model.ID, mt meta) {
	t.metas[id] = nil
	if mt.Keyed {
		t.del(metaKey(id))
		return
	}
	_, _, placed, err := t.placement(id)
	if err != nil {
		t.fail(err)
	}
	if placed {
		t.set(metaKey(id), []byte{goneMark})
		return
	}
	t.del(metaKey(id))
}

// meta reads a message's meta from the batch's view of the index: its
// own, or the one its entry's placement implies.
func (t *tx) meta(id model.ID) (meta, bool) {
	// A meta the batch wrote, or else one a committed batch wrote and the
	// cache kept. A meta deleted here, or never written, is looked up: it
	// may be implied by its entry's placements or marked gone.
	if m, wrote := t.metas[id]; wrote {
		if m != nil {
			return *m, true
		}
	} else if m, ok := t.s.metas.get(id); ok {
		return m, true
	} else if e := t.cachedPlaced(id.Index); e != nil && !e.hasMeta(id.Seq) {
		// The entry's placements are cached and the message has no meta key
		// (the invariant at placedCache): its placement implies its meta.
		m, ok, err := implicitMeta(txSource{t}, id)
		if err != nil {
			t.fail(err)
			return meta{}, false
		}
		return m, ok
	}
	m, ok, err := lookupMeta(txSource{t}, id)
	if err != nil {
		t.fail(err)
		return meta{}, false
	}
	return m, ok
}

// stat returns the batch's transition counters of a topic.
func (t *tx) stat(tid uint32) *TopicStats {
	st := t.stats[tid]
	if st == nil {
		st = &TopicStats{}
		t.stats[tid] = st
	}
	return st
}

func (t *tx) count(tid uint32, s State, d int64) {
	c := t.counts[tid]
	c.add(s, d)
	t.counts[tid] = c
}

// topicID returns the id of a topic, allocating one when create is set.
func (t *tx) topicID(name string, create bool) (uint32, bool) {
	if id, ok := t.s.topics[name]; ok {
		return id, true
	}
	if id, ok := t.newTopic[name]; ok {
		return id, true
	}
	if !create {
		return 0, false
	}
	t.nextTop++
	id := t.nextTop
	setIn(&t.newTopic, name, id)
	t.set(topicKey(name), binary.BigEndian.AppendUint32(nil, id))
	return id, true
}

// seg returns the pending appends of a slot file, starting them from the
// recorded state.
func (t *tx) seg(second int64) *pendSeg {
	if p := t.pend[second]; p != nil {
		return p
	}
	p := &pendSeg{base: segment.HeaderSize, buf: t.s.segBufs.take()}
	if v := t.get(segLenKey(second)); v != nil {
		p.stats = decodeSegLen(v)
		p.base = p.stats.Length
	} else {
		p.stats.Length = segment.HeaderSize
	}
	t.pend[second] = p
	return p
}

// appendSeg adds a record to a slot file and returns its offset.
func (t *tx) appendSeg(second int64, typ segment.RecordType, payload []byte) int64 {
	p := t.seg(second)
	off := p.base + int64(len(p.buf))
	p.buf = segment.AppendRecord(p.buf, segment.Record{Type: typ, Index: t.index, Payload: payload})
	p.stats.Length = p.base + int64(len(p.buf))
	if typ == segment.TypeTombstone {
		p.stats.Live--
	} else {
		p.stats.Live++
		p.stats.Bytes += int64(len(payload))
	}
	return off
}

// readRecord reads the record at off of a slot file, including records
// appended earlier in this batch.
func (t *tx) readRecord(second, off int64) (segment.Record, error) {
	if p := t.pend[second]; p != nil && off >= p.base {
		r, _, err := segment.DecodeRecord(p.buf[off-p.base:])
		return r, err
	}
	return t.s.segs.ReadRecord(second, off)
}

// readMessage reads and decodes the message record at off of a slot file.
// The last one decoded is kept: a lease or a touch reads a message's meta
// from its placement, which decodes its record, and then the message
// itself. A record at an offset never changes (slot files are append-only
// and a batch's pending records are appended at their offsets), and the
// message is returned by value, its body and headers shared but never
// written, so the copy reads the same as a fresh decode.
func (t *tx) readMessage(second, off int64) (segment.RecordType, model.Message, error) {
	if l := &t.lastMsg; l.ok && l.second == second && l.off == off {
		return l.typ, l.msg, nil
	}
	r, err := t.readRecord(second, off)
	if err != nil {
		return 0, model.Message{}, err
	}
	m, err := DecodeMessage(r.Payload)
	if err != nil {
		return 0, model.Message{}, err
	}
	t.lastMsg = lastMsg{second: second, off: off, typ: r.Type, msg: m, ok: true}
	return r.Type, m, nil
}

// lastMsg is the last slot-file message a batch decoded.
type lastMsg struct {
	second, off int64
	typ         segment.RecordType
	msg         model.Message
	ok          bool
}

// event records e for the observer, if one is attached.
func (t *tx) event(e Event) {
	if t.s.observer != nil {
		t.events = append(t.events, e)
	}
}

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

func (s *Store) get(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("index get: %w", err)
	}
	out := append([]byte(nil), v...)
	closer.Close()
	return out, nil
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

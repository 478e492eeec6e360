package wheel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/cockroachdb/pebble"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// A batch (tx) is one Apply: an indexed Pebble batch, whose reads see its
// own writes, and the records it appends to slot files, which are written
// before the index when it commits (commit.go). This file holds its
// primitives (index reads and writes, slot-file appends and reads, counts
// and topics), which call nothing above them: the metas (metaread.go),
// the placements (placed.go), where a message lives (placement.go) and the
// command handlers call down into them.

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
	// slot files, for its own later reads (placed.go, readMessage).
	placed  map[uint64][]placed
	lastMsg lastMsg
	intern  map[string]string      // topic names readMessage decoded
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
	// its placement (placed.go) stands for its meta.
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
	// The body aliases the record, a copy the batch owns or its pending
	// appends, and topics are interned: what keeps a message past the batch
	// copies its body (put's event), as for a Schedule's bodies, which alias
	// the log entry.
	if t.intern == nil {
		t.intern = map[string]string{}
	}
	m, err := decodeMessage(r.Payload, t.intern)
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

package wheel

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Where a message lives. A delayed message due within the horizon, and a
// reserved message's redelivery, is a record in the slot file of its due
// second; one due beyond the horizon is in the overflow; a ready or dead
// one is in its topic's ready queue or dead letters. Its meta names the
// place, or, for a message enqueued without a key straight into a slot
// file and untouched since, its entry's placements do (below).

// put writes a message into the place its due time and state call for and
// records its meta. from is its previous state (0 for a new message); typ
// is the record type: a lease's redelivery, or a message.
func (t *tx) put(m *model.Message, tid uint32, from State, typ segment.RecordType) {
	state := recordState(typ)
	sec := SecondOf(m.DeliverAtMs)
	switch {
	case sec < t.cursor:
		if typ == segment.TypeLease && m.Attempts >= m.MaxAttempts {
			t.toDead(m, tid, from)
			return
		}
		t.toReady(m, tid, from)
		return
	case sec < t.cursor+HorizonSecs:
		t.scratch = EncodeMessage(t.scratch[:0], m)
		off := t.appendSeg(sec, typ, t.scratch)
		if t.implicit && from == 0 && typ == segment.TypeMessage {
			t.place(m.ID, sec, off)
		} else {
			mt := slotMeta(m, tid, typ, sec, off)
			t.setMeta(m.ID, &mt)
		}
		if sec <= t.follows {
			// put keeps neither m nor its body, which may alias the log
			// entry (DecodeCommands): the event takes its own copy.
			mc := *m
			mc.Body = bytes.Clone(m.Body)
			t.event(Event{Kind: EventPlaced, Second: sec, ID: m.ID, Msg: &mc, Lease: typ == segment.TypeLease})
		}
	default:
		t.scratch = EncodeMessage(append(t.scratch[:0], byte(typ)), m)
		t.set(overflowKey(m.DeliverAtMs, m.ID), t.scratch)
		t.overflowAdd(m.DeliverAtMs, 1)
		if t.implicit && from == 0 && typ == segment.TypeMessage {
			// One index write per message: its placement stands for its
			// meta, as for a slot file's (placement.go).
			t.place(m.ID, m.DeliverAtMs, overflowOff)
		} else {
			mt := overflowMeta(m, tid, typ)
			t.setMeta(m.ID, &mt)
		}
	}
	t.move(tid, from, state)
}

// recordState is the state of a message whose pending record in a slot
// file or the overflow has type typ: a lease's redelivery is reserved,
// anything else delayed.
func recordState(typ segment.RecordType) State {
	if typ == segment.TypeLease {
		return StateReserved
	}
	return StateDelayed
}

// slotMeta is the meta of message m whose current record, of type typ,
// lies in the slot file of second at off. put writes it, and a placement
// implies it from the record, so the two agree.
func slotMeta(m *model.Message, tid uint32, typ segment.RecordType, second, off int64) meta {
	return meta{State: recordState(typ), Loc: locSegment, TopicID: tid, DueMs: m.DeliverAtMs, Priority: m.Priority,
		Second: second, Offset: off, Receipt: m.Receipt, LeaseExpMs: m.LeaseExpiresMs, Keyed: m.Key != "", Key: m.Key}
}

// overflowMeta is the meta of message m whose pending record, of type typ,
// is in the overflow. put writes it, and a placement implies it from the
// record, so the two agree.
func overflowMeta(m *model.Message, tid uint32, typ segment.RecordType) meta {
	return meta{State: recordState(typ), Loc: locOverflow, TopicID: tid, DueMs: m.DeliverAtMs, Priority: m.Priority,
		Receipt: m.Receipt, LeaseExpMs: m.LeaseExpiresMs, Keyed: m.Key != "", Key: m.Key}
}

func (t *tx) move(tid uint32, from, to State) {
	if from != 0 {
		t.count(tid, from, -1)
	}
	if to != 0 {
		t.count(tid, to, 1)
	}
}

func clearLease(m *model.Message) {
	m.Receipt, m.LeaseExpiresMs, m.LeaseMs = 0, 0, 0
}

// toReady puts a message on its topic's ready queue.
func (t *tx) toReady(m *model.Message, tid uint32, from State) {
	clearLease(m)
	k := readyKey(tid, m.DeliverAtMs, m.Priority, m.ID)
	t.set(k, EncodeMessage(nil, m))
	if low, ok := t.readyLow[tid]; !ok || bytes.Compare(k, low) < 0 {
		if t.readyLow == nil {
			t.readyLow = map[uint32][]byte{}
		}
		t.readyLow[tid] = k
	}
	t.setMeta(m.ID, &meta{State: StateReady, Loc: locReady, TopicID: tid, DueMs: m.DeliverAtMs, Priority: m.Priority, Keyed: m.Key != "", Key: m.Key})
	t.move(tid, from, StateReady)
	t.event(Event{Kind: EventReady, Topic: m.Topic, ID: m.ID})
}

// toDead moves a message to its topic's dead letters and frees its key:
// a dead message is never Keyed. Its record keeps the key, which a redrive
// takes again if no other message holds it by then.
func (t *tx) toDead(m *model.Message, tid uint32, from State) {
	clearLease(m)
	t.set(deadKey(tid, m.ID), EncodeMessage(nil, m))
	t.setMeta(m.ID, &meta{State: StateDead, Loc: locDead, TopicID: tid, DueMs: m.DeliverAtMs, Priority: m.Priority})
	t.releaseKey(m, tid)
	t.move(tid, from, StateDead)
	t.stat(tid).Dead++
}

// releaseKey drops the key index entry if it still names m.
func (t *tx) releaseKey(m *model.Message, tid uint32) {
	if m.Key == "" {
		return
	}
	k := keyIndexKey(tid, m.Key)
	if v := t.get(k); v != nil {
		if id, err := model.IDFromBytes(v); err == nil && id == m.ID {
			t.del(k)
		}
	}
}

// finish deletes a message entirely (ack, cancel). A Keyed meta names the
// key the message holds, which it frees without reading it first (the
// invariant at meta.Keyed); any other message holds no key.
func (t *tx) finish(id model.ID, mt meta) {
	t.unplace(id, mt)
	t.delMeta(id, mt)
	if mt.Keyed {
		t.del(keyIndexKey(mt.TopicID, mt.Key))
	}
	t.move(mt.TopicID, mt.State, 0)
}

// unplace removes a message's record from its location. It does not touch
// meta or counts.
func (t *tx) unplace(id model.ID, mt meta) {
	switch mt.Loc {
	case locSegment:
		if mt.Second < t.cursor {
			t.fail(fmt.Errorf("message %s: %w: lives in expired slot second %d", id, ErrInconsistent, mt.Second))
			return
		}
		t.appendSeg(mt.Second, segment.TypeTombstone, EncodeTombstone(id))
		t.event(Event{Kind: EventRemoved, Second: mt.Second, ID: id})
	case locOverflow:
		t.del(overflowKey(mt.DueMs, id))
		t.overflowAdd(mt.DueMs, -1)
	case locReady:
		t.del(readyKey(mt.TopicID, mt.DueMs, mt.Priority, id))
	case locDead:
		t.del(deadKey(mt.TopicID, id))
	}
}

// full reads a message's full record from wherever meta says it lives.
func (t *tx) full(id model.ID, mt meta) (model.Message, bool) {
	if t.err != nil {
		return model.Message{}, false
	}
	var p []byte
	switch mt.Loc {
	case locSegment:
		_, m, err := t.readMessage(mt.Second, mt.Offset)
		if err != nil {
			t.fail(fmt.Errorf("read message %s: %w", id, err))
			return model.Message{}, false
		}
		return m, true
	case locOverflow:
		if p = t.get(overflowKey(mt.DueMs, id)); len(p) > 0 {
			p = p[1:]
		}
	case locReady:
		p = t.get(readyKey(mt.TopicID, mt.DueMs, mt.Priority, id))
	case locDead:
		p = t.get(deadKey(mt.TopicID, id))
	}
	if p == nil {
		t.fail(fmt.Errorf("message %s: %w: index names location %d but the record is missing", id, ErrInconsistent, mt.Loc))
		return model.Message{}, false
	}
	m, err := DecodeMessage(p)
	if err != nil {
		t.fail(fmt.Errorf("message %s: %w", id, err))
		return model.Message{}, false
	}
	return m, true
}

// Placements. Most messages are enqueued into a slot file and stay there
// until they are handed out or their slot expires. A meta for each would
// cost the index a key per message, flushed and then rewritten by every
// compaction that carries it, so an enqueue records where it put such
// messages in one key for the whole entry:
//
//	'e' index                → for each such message: seq, slot second, offset
//	'f' maxSecond index      → a marker byte: the entry's last slot second
//
// A message without a meta of its own ('m') has the meta its placement
// implies: delayed, in that slot at that offset, with its due time and
// priority read from the record. A message enqueued without a key beyond
// the horizon is placed the same way, with its due millisecond for the
// slot second and overflowOff for the offset: the meta implied is delayed,
// in the overflow under that due time (overflowMeta), and the entry's last
// slot second counts the second it is due. Invariant: such a message is
// promoted, which writes it a meta, before the cursor passes its second
// (Expire and the Promote that follows it share an entry, and Promote
// reaches a horizon past the cursor), so its placement is kept as long as
// it implies anything. Every change of a message's state or
// place writes it a meta, which takes precedence from then on. One that
// ends it (ack, cancel) deletes its meta, or, if its entry has placements,
// which would otherwise bring it back, replaces the meta with a gone mark
// (goneMark). The mark sits under the message's meta key, not a key of its
// own, so that looking a message up reads one key before the placements:
// handing out a placed message, which has no meta, would otherwise read
// two keys that are not there, and a key that is not there is the dearest
// read of the index (every level is asked). When the cursor passes an
// entry's last slot second, every message placed by it has moved on (to
// the ready queue, or with its own meta) or is gone, so Expire deletes the
// placements and the gone marks.
//
// Messages with a key get a meta at enqueue.
const (
	pPlaced   = 'e'
	pPlacedBy = 'f'
)

// goneMark is the value of the meta key of a message its entry's placements
// still list but that has ended. A meta's encoding starts with metaTag, so
// the two never meet.
const goneMark = 0

func isGoneMark(v []byte) bool { return len(v) == 1 && v[0] == goneMark }

// present is the value of keys whose presence is what they say: the
// index's readers take an empty value for an absent key.
const present = 1

// placedOverflow is the value of the placedBy key of an entry that placed
// messages in the overflow (present: in slot files alone).
const placedOverflow = 2

func placedKey(index uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{pPlaced}, index)
}

// overflowOff is the offset of a placement in the overflow: no record of a
// slot file starts before its header, so it names no slot record.
const overflowOff = 0

func placedByKey(second int64, index uint64) []byte {
	k := binary.BigEndian.AppendUint64([]byte{pPlacedBy}, uint64(second))
	return binary.BigEndian.AppendUint64(k, index)
}

// placing collects the placements of the entry being applied.
type placing struct {
	index   uint64
	buf     []byte // encoded placements
	n       int
	lastSeq uint32
	lastSec int64
	maxSec  int64 // -1: none yet
	written int64 // maxSec of the placedBy key written, -1: none
	slots   int   // placements in slot files (the others are in the overflow)
	// wroteOver says the placedBy key written is placedOverflow.
	wroteOver bool
}

// place records that message id of the entry being applied was put, new,
// into the slot file of second at off, or, with off overflowOff, into the
// overflow due at the millisecond second.
func (t *tx) place(id model.ID, second, off int64) {
	p := &t.placing
	if p.index != id.Index || p.n == 0 {
		*p = placing{index: id.Index, buf: p.buf[:0], maxSec: -1, written: -1}
	}
	p.buf = binary.AppendUvarint(p.buf, uint64(id.Seq-p.lastSeq))
	p.buf = binary.AppendVarint(p.buf, second-p.lastSec)
	p.buf = binary.AppendUvarint(p.buf, uint64(off))
	p.n++
	p.lastSeq, p.lastSec = id.Seq, second
	if off == overflowOff {
		p.maxSec = max(p.maxSec, SecondOf(second))
	} else {
		p.maxSec = max(p.maxSec, second)
		p.slots++
	}
}

// flushPlacing writes the placements collected for the entry being applied.
// It runs after each command, so that the next one reads them.
func (t *tx) flushPlacing() {
	p := &t.placing
	if p.n == 0 || p.index != t.index {
		return
	}
	t.set(placedKey(p.index), p.buf)
	delete(t.placed, p.index)
	// An entry that placed messages in the overflow alone is not kept
	// decoded (placedCache): its messages are not read before they are
	// promoted, hours later, and would only evict the entries whose leases
	// are about to come. The cache never held it (it is being applied), so
	// reads of it go to the index.
	if p.slots > 0 {
		if t.newPlaced == nil {
			t.newPlaced = map[uint64][]byte{}
		}
		t.newPlaced[p.index] = append(t.newPlaced[p.index][:0], p.buf...)
	}
	if p.written != p.maxSec || (p.slots < p.n) != p.wroteOver {
		if p.written >= 0 {
			t.del(placedByKey(p.written, p.index))
		}
		mark := byte(present)
		if p.slots < p.n {
			mark = placedOverflow
		}
		t.set(placedByKey(p.maxSec, p.index), []byte{mark})
		p.written, p.wroteOver = p.maxSec, p.slots < p.n
	}
}

// findPlacement returns the slot second and offset where the entry's
// placements v put message seq.
func findPlacement(v []byte, seq uint32) (second, off int64, ok bool, err error) {
	err = eachPlacement(v, func(s uint32, sec, o int64) bool {
		if s >= seq {
			second, off, ok = sec, o, s == seq
			return false
		}
		return true
	})
	if err != nil || !ok {
		return 0, 0, false, err
	}
	return second, off, true, nil
}

// eachPlacement calls fn with each of the entry's placements v, in seq
// order, until fn returns false.
func eachPlacement(v []byte, fn func(seq uint32, second, off int64) bool) error {
	var seq uint32
	var second int64
	for len(v) > 0 {
		ds, n1 := binary.Uvarint(v)
		if n1 <= 0 {
			return errBadPlacement
		}
		dsec, n2 := binary.Varint(v[n1:])
		if n2 <= 0 {
			return errBadPlacement
		}
		o, n3 := binary.Uvarint(v[n1+n2:])
		if n3 <= 0 {
			return errBadPlacement
		}
		v = v[n1+n2+n3:]
		seq += uint32(ds)
		second += dsec
		if !fn(seq, second, int64(o)) {
			return nil
		}
	}
	return nil
}

var errBadPlacement = errors.New("undecodable placement")

// metaSource is what lookupMeta reads: the index (a batch's view or the
// committed one) and the slot files.
type metaSource interface {
	getKey(key []byte) ([]byte, error)
	// placement returns where id's entry placed it, if it did and the
	// placements are still kept.
	placement(id model.ID) (second, off int64, ok bool, err error)
	readMessage(second, off int64) (segment.RecordType, model.Message, error)
	topicOf(name string) (uint32, bool)
}

// lookupMeta returns a message's meta: its own, or the one its entry's
// placements imply.
func lookupMeta(src metaSource, id model.ID) (meta, bool, error) {
	v, err := src.getKey(metaKey(id))
	if err != nil {
		return meta{}, false, err
	}
	switch {
	case v == nil:
		return implicitMeta(src, id)
	case isGoneMark(v):
		return meta{}, false, nil
	}
	m, err := decodeMeta(v)
	if err != nil {
		return meta{}, false, fmt.Errorf("index meta of message %s: %w", id, err)
	}
	return m, true, nil
}

// placementIn returns where the entry's placements v (nil: none) put id.
func placementIn(v []byte, id model.ID) (second, off int64, ok bool, err error) {
	second, off, ok, err = findPlacement(v, id.Seq)
	if err != nil {
		return 0, 0, false, fmt.Errorf("placements of entry %d: %w: %w", id.Index, ErrInconsistent, err)
	}
	return second, off, ok, nil
}

// placed is one decoded placement.
type placed struct {
	seq         uint32
	second, off int64
}

// decodePlacements decodes an entry's placements, which are in increasing
// seq order.
func decodePlacements(v []byte) ([]placed, error) {
	var out []placed
	var err error
	if perr := eachPlacement(v, func(seq uint32, second, off int64) bool {
		if n := len(out); n > 0 && seq <= out[n-1].seq {
			err = errBadPlacement
			return false
		}
		out = append(out, placed{seq, second, off})
		return true
	}); perr != nil {
		return nil, perr
	}
	return out, err
}

// placement returns where id's entry placed it. The batch decodes an
// entry's placements once, so that the lookups of the messages one entry
// enqueued (the leases and acks of a slot's messages, handed out together)
// cost a search each, not a decode. An entry's placements are written
// while it is applied and only deleted after; the batch forgets the ones
// it writes or deletes.
func (t *tx) placement(id model.ID) (second, off int64, ok bool, err error) {
	ps, cached := t.placed[id.Index]
	if !cached {
		if e := t.cachedPlaced(id.Index); e != nil {
			second, off, ok = e.find(id.Seq)
			return second, off, ok, nil
		}
		v := t.get(placedKey(id.Index))
		if t.err != nil {
			return 0, 0, false, t.err
		}
		if ps, err = decodePlacements(v); err != nil {
			return 0, 0, false, fmt.Errorf("placements of entry %d: %w: %w", id.Index, ErrInconsistent, err)
		}
		if t.placed == nil {
			t.placed = map[uint64][]placed{}
		}
		t.placed[id.Index] = ps
	}
	i, found := slices.BinarySearchFunc(ps, id.Seq, func(p placed, seq uint32) int { return cmp.Compare(p.seq, seq) })
	if !found {
		return 0, 0, false, nil
	}
	return ps[i].second, ps[i].off, true, nil
}

// cachedPlaced returns the committed placements of entry index the store
// keeps (placedCache), unless this batch wrote or deleted them.
func (t *tx) cachedPlaced(index uint64) *placedEntry {
	if t.newPlaced[index] != nil || t.dropPlaced[index] {
		return nil
	}
	return t.s.placed.get(index)
}

// implicitMeta returns the meta a message without one of its own has by its
// entry's placements.
func implicitMeta(src metaSource, id model.ID) (meta, bool, error) {
	sec, off, ok, err := src.placement(id)
	if err != nil || !ok {
		return meta{}, false, err
	}
	if off == overflowOff {
		return overflowImplicitMeta(src, id, sec)
	}
	typ, m, err := src.readMessage(sec, off)
	if err != nil {
		return meta{}, false, fmt.Errorf("read message %s placed at slot %d offset %d: %w", id, sec, off, err)
	}
	if m.ID != id || typ != segment.TypeMessage {
		return meta{}, false, fmt.Errorf("message %s: %w: its placement names slot %d offset %d, which holds %s (type %d)",
			id, ErrInconsistent, sec, off, m.ID, typ)
	}
	tid, ok := src.topicOf(m.Topic)
	if !ok {
		return meta{}, false, fmt.Errorf("message %s: %w: unknown topic %q", id, ErrInconsistent, m.Topic)
	}
	return slotMeta(&m, tid, typ, sec, off), true, nil
}

// overflowImplicitMeta returns the meta of a message placed in the overflow
// due at dueMs, read from its overflow record.
func overflowImplicitMeta(src metaSource, id model.ID, dueMs int64) (meta, bool, error) {
	v, err := src.getKey(overflowKey(dueMs, id))
	if err != nil {
		return meta{}, false, err
	}
	if len(v) < 1 || segment.RecordType(v[0]) != segment.TypeMessage {
		return meta{}, false, fmt.Errorf("message %s: %w: placed in the overflow at %d, which holds no message for it", id, ErrInconsistent, dueMs)
	}
	m, err := DecodeMessage(v[1:])
	if err != nil {
		return meta{}, false, fmt.Errorf("message %s placed in the overflow: %w", id, err)
	}
	tid, ok := src.topicOf(m.Topic)
	if m.ID != id || !ok {
		return meta{}, false, fmt.Errorf("message %s: %w: its overflow record names %s of topic %q", id, ErrInconsistent, m.ID, m.Topic)
	}
	return overflowMeta(&m, tid, segment.TypeMessage), true, nil
}

// txSource reads through the batch.
type txSource struct{ t *tx }

func (s txSource) getKey(key []byte) ([]byte, error) {
	v := s.t.get(key)
	return v, s.t.err
}

func (s txSource) placement(id model.ID) (second, off int64, ok bool, err error) {
	return s.t.placement(id)
}

func (s txSource) readMessage(second, off int64) (segment.RecordType, model.Message, error) {
	return s.t.readMessage(second, off)
}

func (s txSource) topicOf(name string) (uint32, bool) { return s.t.topicID(name, false) }

// storeSource reads committed state; s.mu is held.
type storeSource struct{ s *Store }

func (s storeSource) getKey(key []byte) ([]byte, error) { return s.s.get(key) }

func (s storeSource) placement(id model.ID) (second, off int64, ok bool, err error) {
	v, err := s.s.get(placedKey(id.Index))
	if err != nil || v == nil {
		return 0, 0, false, err
	}
	return placementIn(v, id)
}

func (s storeSource) readMessage(second, off int64) (segment.RecordType, model.Message, error) {
	r, err := s.s.segs.ReadRecord(second, off)
	if err != nil {
		return 0, model.Message{}, err
	}
	m, err := DecodeMessage(r.Payload)
	return r.Type, m, err
}

func (s storeSource) topicOf(name string) (uint32, bool) {
	id, ok := s.s.topics[name]
	return id, ok
}

// dropPlacements deletes the placements of every entry whose last slot
// second lies before before, and their gone marks: Expire has moved every
// message they placed in slot files that is still live. A message placed
// in the overflow that no Promote has moved yet (an Expire without the
// Promote that goes with it) gets the meta its placement implied, so that
// dropping the placement changes nothing it implies. It runs before the
// cursor moves, and scans from the cursor: the keys before it were dropped
// by earlier Expires (an entry places messages at or after the cursor
// only), and their tombstones stay in the index until a compaction drops
// them, so a scan from the start would step over every one, once a second.
func (t *tx) dropPlacements(before int64) {
	keys, vals := t.scanKeys(placedByKey(t.cursor, 0), placedByKey(before, 0), 0)
	for i, k := range keys {
		index := binary.BigEndian.Uint64(k[9:])
		lo := binary.BigEndian.AppendUint64([]byte{pMeta}, index)
		metas, mvals := t.scanKeys(lo, prefixEnd(lo), 0)
		if len(vals[i]) == 1 && vals[i][0] == placedOverflow {
			t.keepOverflowMetas(index, metas)
		}
		t.del(placedKey(index))
		delete(t.placed, index)
		if t.dropPlaced == nil {
			t.dropPlaced = map[uint64]bool{}
		}
		t.dropPlaced[index] = true
		for j, mk := range metas {
			if isGoneMark(mvals[j]) {
				t.del(mk)
			}
		}
		t.del(k)
	}
}

// keepOverflowMetas writes its meta to every message entry index placed
// in the overflow that has no meta key of its own (metas: the entry's meta
// keys, gone marks included).
func (t *tx) keepOverflowMetas(index uint64, metas [][]byte) {
	has := make(map[uint32]bool, len(metas))
	for _, k := range metas {
		if id, err := model.IDFromBytes(k[1:]); err == nil {
			has[id.Seq] = true
		}
	}
	v := t.get(placedKey(index))
	var kept []model.ID
	var dues []int64
	if err := eachPlacement(v, func(seq uint32, at, off int64) bool {
		if off == overflowOff && !has[seq] {
			kept, dues = append(kept, model.ID{Index: index, Seq: seq}), append(dues, at)
		}
		return true
	}); err != nil {
		t.fail(fmt.Errorf("placements of entry %d: %w: %w", index, ErrInconsistent, err))
		return
	}
	for i, id := range kept {
		mt, ok, err := overflowImplicitMeta(txSource{t}, id, dues[i])
		if err != nil {
			t.fail(err)
			return
		}
		if ok {
			t.setMeta(id, &mt)
		}
	}
}

package wheel

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/delaywheel/delaywheel/segment"
)

// Placements. Most messages are enqueued into a slot file and stay there
// until they are handed out or their slot expires. Writing a meta for each
// of them cost the index a key per message, flushed and then rewritten by
// every compaction that carried it: under a sustained enqueue load, about
// a quarter of a node's CPU. An enqueue therefore records where it put such
// messages in one key for the whole entry:
//
//	'e' index                → for each such message: seq, slot second, offset
//	'f' maxSecond index      → a marker byte: the entry's last slot second
//	'g' id                   → a marker byte: the message is gone (acked, cancelled)
//
// A message without a meta of its own ('m') has the meta its placement
// implies: delayed, in that slot at that offset, with its due time and
// priority read from the record. Every change of a message's state or
// place writes it a meta, which takes precedence from then on; one that
// ends it (ack, cancel) deletes its meta and, if its entry has placements,
// marks it gone, since the placement would otherwise bring it back. When
// the cursor passes an entry's last slot second, every message placed by
// it has moved on (to the ready queue, or with its own meta) or is gone,
// so Expire deletes the placements and the gone marks.
//
// Messages with a key, and messages beyond the horizon, still get a meta
// at enqueue.

const (
	pPlaced   = 'e'
	pPlacedBy = 'f'
	pGone     = 'g'
)

// present is the value of keys whose presence is what they say: the
// index's readers take an empty value for an absent key.
const present = 1

func placedKey(index uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{pPlaced}, index)
}

func placedByKey(second int64, index uint64) []byte {
	k := binary.BigEndian.AppendUint64([]byte{pPlacedBy}, uint64(second))
	return binary.BigEndian.AppendUint64(k, index)
}

func goneKey(id ID) []byte {
	b := id.Bytes()
	return append([]byte{pGone}, b[:]...)
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
}

// place records that message id of the entry being applied was put, new,
// into the slot file of second at off.
func (t *tx) place(id ID, second, off int64) {
	p := &t.placing
	if p.index != id.Index || p.n == 0 {
		*p = placing{index: id.Index, buf: p.buf[:0], maxSec: -1, written: -1}
	}
	p.buf = binary.AppendUvarint(p.buf, uint64(id.Seq-p.lastSeq))
	p.buf = binary.AppendVarint(p.buf, second-p.lastSec)
	p.buf = binary.AppendUvarint(p.buf, uint64(off))
	p.n++
	p.lastSeq, p.lastSec = id.Seq, second
	p.maxSec = max(p.maxSec, second)
}

// flushPlacing writes the placements collected for the entry being applied.
// It runs after each command, so that the next one reads them.
func (t *tx) flushPlacing() {
	p := &t.placing
	if p.n == 0 || p.index != t.index {
		return
	}
	t.set(placedKey(p.index), p.buf)
	if p.written != p.maxSec {
		if p.written >= 0 {
			t.del(placedByKey(p.written, p.index))
		}
		t.set(placedByKey(p.maxSec, p.index), []byte{present})
		p.written = p.maxSec
	}
}

// findPlacement returns the slot second and offset where the entry's
// placements v put message seq.
func findPlacement(v []byte, seq uint32) (second, off int64, ok bool, err error) {
	var s uint32
	for len(v) > 0 {
		ds, n1 := binary.Uvarint(v)
		if n1 <= 0 {
			return 0, 0, false, errBadPlacement
		}
		dsec, n2 := binary.Varint(v[n1:])
		if n2 <= 0 {
			return 0, 0, false, errBadPlacement
		}
		o, n3 := binary.Uvarint(v[n1+n2:])
		if n3 <= 0 {
			return 0, 0, false, errBadPlacement
		}
		v = v[n1+n2+n3:]
		s += uint32(ds)
		second += dsec
		if s == seq {
			return second, int64(o), true, nil
		}
		if s > seq {
			break
		}
	}
	return 0, 0, false, nil
}

var errBadPlacement = errors.New("undecodable placement")

// metaSource is what lookupMeta reads: the index (a batch's view or the
// committed one) and the slot files.
type metaSource interface {
	getKey(key []byte) ([]byte, error)
	readRecord(second, off int64) (segment.Record, error)
	topicOf(name string) (uint32, bool)
}

// lookupMeta returns a message's meta: its own, or the one its entry's
// placements imply.
func lookupMeta(src metaSource, id ID) (meta, bool, error) {
	v, err := src.getKey(metaKey(id))
	if err != nil {
		return meta{}, false, err
	}
	if v == nil {
		return implicitMeta(src, id)
	}
	m, err := decodeMeta(v)
	if err != nil {
		return meta{}, false, fmt.Errorf("index meta of message %s: %w", id, err)
	}
	return m, true, nil
}

// placementOf returns where id's entry placed it, if it did and the
// placements are still kept.
func placementOf(src metaSource, id ID) (second, off int64, ok bool, err error) {
	v, err := src.getKey(placedKey(id.Index))
	if err != nil || v == nil {
		return 0, 0, false, err
	}
	second, off, ok, err = findPlacement(v, id.Seq)
	if err != nil {
		return 0, 0, false, fmt.Errorf("placements of entry %d: %w: %w", id.Index, ErrInconsistent, err)
	}
	return second, off, ok, nil
}

// implicitMeta returns the meta a message without one of its own has by its
// entry's placements.
func implicitMeta(src metaSource, id ID) (meta, bool, error) {
	sec, off, ok, err := placementOf(src, id)
	if err != nil || !ok {
		return meta{}, false, err
	}
	if g, err := src.getKey(goneKey(id)); err != nil || g != nil {
		return meta{}, false, err
	}
	r, err := src.readRecord(sec, off)
	if err != nil {
		return meta{}, false, fmt.Errorf("read message %s placed at slot %d offset %d: %w", id, sec, off, err)
	}
	m, err := DecodeMessage(r.Payload)
	if err != nil {
		return meta{}, false, fmt.Errorf("message %s placed at slot %d offset %d: %w", id, sec, off, err)
	}
	if m.ID != id || r.Type != segment.TypeMessage {
		return meta{}, false, fmt.Errorf("message %s: %w: its placement names slot %d offset %d, which holds %s (type %d)",
			id, ErrInconsistent, sec, off, m.ID, r.Type)
	}
	tid, ok := src.topicOf(m.Topic)
	if !ok {
		return meta{}, false, fmt.Errorf("message %s: %w: unknown topic %q", id, ErrInconsistent, m.Topic)
	}
	return slotMeta(&m, tid, r.Type, sec, off), true, nil
}

// txSource reads through the batch.
type txSource struct{ t *tx }

func (s txSource) getKey(key []byte) ([]byte, error) {
	v := s.t.get(key)
	return v, s.t.err
}

func (s txSource) readRecord(second, off int64) (segment.Record, error) {
	return s.t.readRecord(second, off)
}

func (s txSource) topicOf(name string) (uint32, bool) { return s.t.topicID(name, false) }

// storeSource reads committed state; s.mu is held.
type storeSource struct{ s *Store }

func (s storeSource) getKey(key []byte) ([]byte, error) { return s.s.get(key) }

func (s storeSource) readRecord(second, off int64) (segment.Record, error) {
	return s.s.segs.ReadRecord(second, off)
}

func (s storeSource) topicOf(name string) (uint32, bool) {
	id, ok := s.s.topics[name]
	return id, ok
}

// dropPlacements deletes the placements of every entry whose last slot
// second lies before before, and their gone marks: Expire has moved every
// message they placed that is still live. It runs before the cursor moves,
// and scans from the cursor: the keys before it were dropped by earlier
// Expires (an entry places messages at or after the cursor only), and their
// tombstones stay in the index until a compaction drops them, so a scan
// from the start would step over every one, once a second.
func (t *tx) dropPlacements(before int64) {
	keys, _ := t.scanKeys(placedByKey(t.cursor, 0), placedByKey(before, 0), 0)
	for _, k := range keys {
		index := binary.BigEndian.Uint64(k[9:])
		t.del(placedKey(index))
		lo := binary.BigEndian.AppendUint64([]byte{pGone}, index)
		gone, _ := t.scanKeys(lo, prefixEnd(lo), 0)
		for _, g := range gone {
			t.del(g)
		}
		t.del(k)
	}
}

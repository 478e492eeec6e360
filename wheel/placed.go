package wheel

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// Placements. Most messages are enqueued into a slot file and stay there
// until they are handed out or their slot expires. A meta for each would
// cost the index a key per message, flushed and then rewritten by every
// compaction that carries it, so an enqueue records where it put such
// messages in one key for the whole entry:
//
//	'e' index                → for each such message: seq, slot second, offset
//	'f' maxSecond index      → a marker byte (present, or placedOverflow when
//	                           some are in the overflow): the entry's last slot second
//
// A message without a meta of its own ('m') has the meta its placement
// implies: delayed, in that slot at that offset, with its due time and
// priority read from the record. A message enqueued without a key beyond
// the horizon is placed the same way, with its due millisecond for the
// slot second and overflowOff for the offset: the meta implied is delayed,
// in the overflow under that due time (overflowMeta), and the entry's last
// slot second counts the second it is due. Promote, which the leader
// proposes in the entry of each Expire, gives it a meta of its own hours
// before the cursor passes that second; one that no Promote has moved
// when Expire drops its entry's placements is given the meta they implied
// then (keepOverflowMetas). Invariant: dropping placements changes no
// message's meta. Every change of a message's state or
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

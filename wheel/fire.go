package wheel

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Time moves messages: Expire fires the slots the cursor passes (a slot's
// live messages go to their ready queues, an expired lease to ready or to
// the dead letters), and Promote moves overflow messages into the wheel as
// the horizon reaches them. Both are commands of apply.go's dispatch.

// expire fires every slot before the second before and moves the cursor
// there. Live messages go to their ready queues; live leases have expired:
// their messages go to ready, or dead after max_attempts.
func (t *tx) expire(before int64) {
	if before <= t.cursor {
		return
	}
	seconds := map[int64]bool{}
	keys, _ := t.scanKeys(segLenKey(0), segLenKey(before), 0)
	for _, k := range keys {
		seconds[int64(binary.BigEndian.Uint64(k[1:]))] = true
	}
	for s := range t.pend {
		if s < before {
			seconds[s] = true
		}
	}
	for _, s := range slices.Sorted(maps.Keys(seconds)) {
		t.fireSlot(s)
		if t.err != nil {
			return
		}
	}
	t.dropPlacements(before)
	t.cursor = before
	t.event(Event{Kind: EventExpired, Second: before})
}

func (t *tx) fireSlot(second int64) {
	if t.slotLive(second) > 0 {
		t.fireLive(second)
	}
	if t.err != nil {
		return
	}
	delete(t.pend, second)
	t.del(segLenKey(second))
	t.expired = append(t.expired, second)
}

// slotLive is how many live records the slot file of second holds, as this
// batch sees it. A slot whose messages were all handed out or acked before
// it expires (the usual case: every lease moves its message to the slot of
// its deadline) holds none, and its file need not be read.
func (t *tx) slotLive(second int64) int64 {
	if p := t.pend[second]; p != nil {
		return p.stats.Live
	}
	if v := t.get(segLenKey(second)); v != nil {
		return decodeSegLen(v).Live
	}
	return 0
}

// fireLive moves the live records of the slot file of second to their
// ready queues (leases past their attempts to the dead letters).
func (t *tx) fireLive(second int64) {
	entries, err := t.slotEntries(second)
	if err != nil {
		t.fail(err)
		return
	}
	for _, e := range liveEntries(entries) {
		m, err := DecodeMessage(e.Payload)
		if err != nil {
			t.fail(fmt.Errorf("slot %d offset %d: %w", second, e.Offset, err))
			return
		}
		mt, ok := t.meta(m.ID)
		if !ok || mt.Loc != locSegment || mt.Second != second || mt.Offset != e.Offset {
			t.fail(fmt.Errorf("slot %d offset %d: %w: record of %s is live but the index disagrees", second, e.Offset, ErrInconsistent, m.ID))
			return
		}
		if e.Type == segment.TypeLease {
			t.stat(mt.TopicID).ExpiredLeases++
		}
		if e.Type == segment.TypeLease && m.Attempts >= m.MaxAttempts {
			t.toDead(&m, mt.TopicID, mt.State)
		} else {
			t.toReady(&m, mt.TopicID, mt.State)
		}
	}
}

// slotEntries returns every record of a slot file as this batch sees it.
func (t *tx) slotEntries(second int64) ([]segment.Entry, error) {
	var entries []segment.Entry
	if t.get(segLenKey(second)) != nil {
		_, es, err := segment.ReadFileFS(t.s.fs, t.s.segs.Path(second))
		if err != nil {
			return nil, err
		}
		entries = es
	}
	if p := t.pend[second]; p != nil && len(p.buf) > 0 {
		for off := 0; off < len(p.buf); {
			r, n, err := segment.DecodeRecord(p.buf[off:])
			if err != nil {
				return nil, err
			}
			entries = append(entries, segment.Entry{Offset: p.base + int64(off), Record: r})
			off += n
		}
	}
	return entries, nil
}

// promote moves overflow entries due before the second before (never past
// the horizon) into the wheel, and returns how many moved.
func (t *tx) promote(before int64) int {
	before = min(before, t.cursor+HorizonSecs)
	if before <= 0 {
		return 0
	}
	// The scan starts where the last one ended, not at the start of the
	// overflow: the keys promoted before are deleted, and their tombstones
	// stay in the index until a compaction drops them, so a scan from the
	// start would step over every one of them, once a second.
	lo := []byte{pOverflow}
	if t.promoted > 0 {
		lo = overflowKey(t.promoted, model.ID{})
	}
	hi := before * TickMs
	if hi <= t.promoted {
		return 0
	}
	keys, vals := t.scanKeys(lo, overflowKey(hi, model.ID{}), 0)
	t.promoted = hi
	for i, k := range keys {
		v := vals[i]
		if len(v) < 1 {
			t.fail(fmt.Errorf("overflow %x: %w: empty value", k, ErrInconsistent))
			return 0
		}
		m, err := DecodeMessage(v[1:])
		if err != nil {
			t.fail(fmt.Errorf("overflow %x: %w", k, err))
			return 0
		}
		// The overflow holds delayed messages and the redeliveries of
		// leases (reserved), and its record says which: the message's meta
		// need not be read, which for a message enqueued hours ago costs a
		// block read from the index for each message promoted.
		typ := segment.RecordType(v[0])
		state := recordState(typ)
		tid, ok := t.topicID(m.Topic, false)
		if !ok {
			t.fail(fmt.Errorf("overflow %s: %w: unknown topic %q", m.ID, ErrInconsistent, m.Topic))
			return 0
		}
		t.del(k)
		t.overflowAdd(int64(u64(k[1:9])), -1)
		t.put(&m, tid, state, typ)
	}
	return len(keys)
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

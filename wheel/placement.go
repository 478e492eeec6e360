package wheel

import (
	"bytes"
	"fmt"

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
			// meta, as for a slot file's (placed.go).
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

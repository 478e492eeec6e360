package wheel

import (
	"fmt"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// A message's meta, read and written by a batch: its own, a cached one, or
// the one its entry's placement implies (placed.go). The handlers and
// placement.go call these; they call placed.go and batch.go's primitives,
// never back up.

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

// storeSource reads committed state; s.mu is held.
type storeSource struct{ s *Store }

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

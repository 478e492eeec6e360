package wheel

import (
	"fmt"
	"sort"

	"github.com/cockroachdb/pebble"

	"github.com/delaywheel/delaywheel/segment"
)

func (s *Store) checkOpen() error {
	if s.db == nil {
		return ErrClosed
	}
	return nil
}

// Get returns a message and its state, or an error wrapping ErrNotFound.
func (s *Store) Get(id ID) (View, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return View{}, err
	}
	mt, ok, err := lookupMeta(storeSource{s}, id)
	if err != nil {
		return View{}, err
	}
	if !ok {
		return View{}, fmt.Errorf("%w: message %s", ErrNotFound, id)
	}
	m, err := s.fullCommitted(id, mt)
	if err != nil {
		return View{}, err
	}
	return View{Message: m, State: mt.State}, nil
}

// fullCommitted reads a message's record from committed state; s.mu is held.
func (s *Store) fullCommitted(id ID, mt meta) (Message, error) {
	var p []byte
	var err error
	switch mt.Loc {
	case locSegment:
		var r segment.Record
		r, err = s.segs.ReadRecord(mt.Second, mt.Offset)
		p = r.Payload
	case locOverflow:
		if p, err = s.get(overflowKey(mt.DueMs, id)); len(p) > 0 {
			p = p[1:]
		}
	case locReady:
		p, err = s.get(readyKey(mt.TopicID, mt.DueMs, mt.Priority, id))
	case locDead:
		p, err = s.get(deadKey(mt.TopicID, id))
	}
	if err != nil {
		return Message{}, fmt.Errorf("read message %s: %w", id, err)
	}
	if p == nil {
		return Message{}, fmt.Errorf("message %s: %w: record missing", id, ErrInconsistent)
	}
	return DecodeMessage(p)
}

// Topics returns the per-state counts of every topic, sorted by name.
func (s *Store) Topics() []TopicCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]TopicCounts, 0, len(s.topics))
	for name, tid := range s.topics {
		c := s.counts[tid]
		out = append(out, TopicCounts{Topic: name, Delayed: c.Delayed, Ready: c.Ready, Reserved: c.Reserved, Dead: c.Dead})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out
}

// NumTopics is the number of topics ever used.
func (s *Store) NumTopics() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.topics)
}

// HasTopic reports whether the topic exists.
func (s *Store) HasTopic(topic string) bool {
	_, ok := s.pub.Load().topics[topic]
	return ok
}

// iterPrefix calls fn for committed keys with prefix p until fn returns false.
func (s *Store) iterPrefix(p []byte, fn func(k, v []byte) (bool, error)) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
	if err != nil {
		return fmt.Errorf("index scan: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		more, err := fn(it.Key(), it.Value())
		if err != nil {
			it.Close()
			return err
		}
		if !more {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("index scan: %w", err)
	}
	return nil
}

// Dead returns up to limit dead messages of a topic, oldest id first.
func (s *Store) Dead(topic string, limit int) ([]View, error) {
	return s.queue(topic, limit, deadPrefix, StateDead, nil)
}

// Ready returns up to limit messages from the head of a topic's ready queue
// (due order, higher priority first), passing over ids for which skip says
// true (hand-offs whose lease is not applied yet).
func (s *Store) Ready(topic string, limit int, skip func(ID) bool) ([]View, error) {
	return s.queue(topic, limit, readyPrefix, StateReady, skip)
}

func (s *Store) queue(topic string, limit int, prefix func(uint32) []byte, st State, skip func(ID) bool) ([]View, error) {
	// Committed state only, without mu: the leader's dispatcher reads the
	// ready queue on every hand-off and must not wait for an Apply.
	s.life.RLock()
	defer s.life.RUnlock()
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	tid, ok := s.pub.Load().topics[topic]
	if !ok || limit <= 0 {
		return nil, nil
	}
	var out []View
	err := s.iterPrefix(prefix(tid), func(k, v []byte) (bool, error) {
		id, err := IDFromBytes(k[len(k)-IDLen:])
		if err != nil {
			return false, err
		}
		if skip != nil && skip(id) {
			return true, nil
		}
		m, err := DecodeMessage(v)
		if err != nil {
			return false, err
		}
		out = append(out, View{Message: m, State: st})
		return len(out) < limit, nil
	})
	return out, err
}

// Nodes returns the replicated node metadata, sorted by id.
func (s *Store) Nodes() []Node {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Node, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// OpenSegments is the number of open segment handles.
func (s *Store) OpenSegments() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.segs == nil {
		return 0
	}
	return s.segs.OpenHandles()
}

// Wheel describes the cursor, the horizon and the non-empty slots.
func (s *Store) Wheel() (WheelInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return WheelInfo{}, err
	}
	lens, err := s.segLens()
	if err != nil {
		return WheelInfo{}, err
	}
	info := WheelInfo{CursorMs: s.cursor * TickMs, HorizonMs: (s.cursor + HorizonSecs) * TickMs,
		OpenSegments: s.segs.OpenHandles(), OverflowMessages: s.overflow}
	for sec, l := range lens {
		info.NonEmpty = append(info.NonEmpty, SlotSummary{Slot: SlotOf(sec), Second: sec, Messages: int(l.Live), Bytes: l.Length})
	}
	sort.Slice(info.NonEmpty, func(i, j int) bool { return info.NonEmpty[i].Second < info.NonEmpty[j].Second })
	return info, nil
}

// Slot describes the slot with index slot (0..7199) in the current lap and,
// with records set, decodes its file.
func (s *Store) Slot(slot int, records bool) (SlotInfo, error) {
	if slot < 0 || slot >= Slots {
		return SlotInfo{}, fmt.Errorf("%w: slot %d is outside 0..%d", ErrNotFound, slot, Slots-1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return SlotInfo{}, err
	}
	sec := s.cursor + int64((slot-SlotOf(s.cursor)+Slots)%Slots)
	info := SlotInfo{SlotSummary: SlotSummary{Slot: slot, Second: sec}, File: s.segs.Path(sec)}
	v, err := s.get(segLenKey(sec))
	if err != nil {
		return SlotInfo{}, err
	}
	if v == nil {
		info.File = ""
		return info, nil
	}
	l := decodeSegLen(v)
	info.Messages, info.Bytes = int(l.Live), l.Length
	if !records {
		return info, nil
	}
	_, entries, err := segment.ReadFileFS(s.fs, info.File)
	if err != nil {
		return SlotInfo{}, err
	}
	live := map[int64]bool{}
	for _, e := range liveEntries(entries) {
		live[e.Offset] = true
	}
	for _, e := range entries {
		r := SlotRecord{Offset: e.Offset, Type: e.Type.String(), Index: e.Index, Bytes: e.Size(), Live: live[e.Offset]}
		if e.Type == segment.TypeTombstone {
			r.ID, _ = DecodeTombstone(e.Payload)
		} else if m, err := DecodeMessage(e.Payload); err == nil {
			r.ID, r.Topic, r.DueMs, r.Attempts = m.ID, m.Topic, m.DeliverAtMs, m.Attempts
		}
		info.Records = append(info.Records, r)
	}
	return info, nil
}

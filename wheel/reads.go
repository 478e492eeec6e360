package wheel

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/cockroachdb/pebble"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/model"
)

func (s *Store) checkOpen() error {
	if s.db == nil {
		return ErrClosed
	}
	return nil
}

// Get returns a message and its state, or an error wrapping ErrNotFound.
func (s *Store) Get(id model.ID) (View, error) {
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
		return View{}, fmt.Errorf("%w: message %s", model.ErrNotFound, id)
	}
	m, err := s.fullCommitted(id, mt)
	if err != nil {
		return View{}, err
	}
	return View{Message: m, State: mt.State}, nil
}

// fullCommitted reads a message's record from committed state; s.mu is held.
func (s *Store) fullCommitted(id model.ID, mt meta) (model.Message, error) {
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
		return model.Message{}, fmt.Errorf("read message %s: %w", id, err)
	}
	if p == nil {
		return model.Message{}, fmt.Errorf("message %s: %w: record missing", id, ErrInconsistent)
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

// TopicsAt is Topics as a reader sees it at nowMs: the delayed messages of
// the slots not yet expired whose due millisecond has come count as ready
// (View.At). It reads the slot files from the cursor's second through
// nowMs's, which the leader expires a grace period after each second ends.
func (s *Store) TopicsAt(nowMs int64) ([]TopicCounts, error) {
	due, err := s.dueDelayed(nowMs)
	if err != nil {
		return nil, err
	}
	out := s.Topics()
	for i := range out {
		if n := due[out[i].Topic]; n > 0 {
			n = min(n, out[i].Delayed)
			out[i].Delayed -= n
			out[i].Ready += n
		}
	}
	return out, nil
}

// dueDelayed counts, by topic, the messages in slot files from the cursor's
// second through nowMs's that are due by nowMs.
func (s *Store) dueDelayed(nowMs int64) (map[string]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	due := map[string]int64{}
	for sec := s.cursor; sec <= min(SecondOf(nowMs), s.cursor+Slots-1); sec++ {
		live, err := s.liveCommitted(sec)
		if err != nil {
			return nil, err
		}
		for _, e := range live {
			if e.Type != segment.TypeMessage {
				continue // a lease: the message is reserved
			}
			m, err := DecodeMessage(e.Payload)
			if err != nil {
				return nil, fmt.Errorf("slot second %d offset %d: %w", sec, e.Offset, err)
			}
			if m.DeliverAtMs <= nowMs {
				due[m.Topic]++
			}
		}
	}
	return due, nil
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

// iterRange calls fn for committed keys in [lo, hi) until fn returns false.
func (s *Store) iterRange(lo, hi []byte, fn func(k, v []byte) (bool, error)) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
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
	return s.queue(topic, limit, deadPrefix, StateDead, nil, nil)
}

// Ready returns up to limit messages from the head of a topic's ready queue
// (due order, higher priority first), passing over ids for which skip says
// true (hand-offs whose lease is not applied yet).
func (s *Store) Ready(topic string, limit int, skip func(model.ID) bool) ([]View, error) {
	return s.queue(topic, limit, readyPrefix, StateReady, skip, &s.readyFloors)
}

// queue reads the head of a queue; with floors, it starts at the topic's
// floor and raises the floor to the first key it meets.
func (s *Store) queue(topic string, limit int, prefix func(uint32) []byte, st State, skip func(model.ID) bool, floors *readyFloors) ([]View, error) {
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
	p := prefix(tid)
	lo, hi := p, prefixEnd(p)
	var from readyFloor
	if floors != nil {
		from = floors.get(tid)
		if bytes.Compare(from.key, lo) > 0 {
			lo = from.key
		}
	}
	var out []View
	var first []byte // the first key met, when there are floors to raise
	err := s.iterRange(lo, hi, func(k, v []byte) (bool, error) {
		if floors != nil && first == nil {
			first = slices.Clone(k)
		}
		id, err := model.IDFromBytes(k[len(k)-model.IDLen:])
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
	if err == nil && floors != nil {
		if first == nil {
			first = hi
		}
		floors.raise(tid, from, first)
	}
	return out, err
}

// Nodes returns the replicated node metadata, sorted by id.
func (s *Store) Nodes() []model.Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]model.Member, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Node returns the replicated metadata of the node id, and whether there is
// any.
func (s *Store) Node(id string) (model.Member, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.nodes[id]
	return m, ok
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
func (s *Store) Wheel() (Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return Info{}, err
	}
	lens, err := s.segLens()
	if err != nil {
		return Info{}, err
	}
	info := Info{CursorMs: s.cursor * TickMs, HorizonMs: (s.cursor + HorizonSecs) * TickMs,
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
		return SlotInfo{}, fmt.Errorf("%w: slot %d is outside 0..%d", model.ErrNotFound, slot, Slots-1)
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
	// The records the index covers: a read-only open cuts no tail a crash
	// left past them.
	entries, err := segment.ReadPrefixFS(s.fs, info.File, l.Length)
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

// dumpPrefixes are the index's key prefixes whose keys Dump counts.
var dumpPrefixes = []byte{pDead, pPlaced, pPlacedBy, pKey, pMeta, pNode, pWebhook, pOverflow, pReady, pTopic, pCounts, pSegLen, pSchedule, pCalendar, pScheduleDue}

// Dump writes the replicated state in a stable text form: the applied
// index, the cursor, the next topic id and the overflow count; how many
// index keys each prefix holds; the overflow's counts by hour; every topic with its per-state counts;
// every node; every slot file with its recorded length, live records and
// bytes; every key and the message holding it; and every message, by id,
// with its state, place (slot second and offset, due ms), attempts, lease
// and contents. Replicas that applied the same log up to the same index
// write the same dump, whatever they keep in memory besides. The
// transition counters of Stats count since the process started and are
// not part of it.
func (s *Store) Dump(w io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "applied %d\ncursor %d\nnext-topic %d\noverflow %d\n", s.applied, s.cursor, s.nextTopic, s.overflow)
	for _, p := range dumpPrefixes {
		n := 0
		if err := s.scan([]byte{p}, func(_, _ []byte) error { n++; return nil }); err != nil {
			return err
		}
		fmt.Fprintf(bw, "keys %c %d\n", p, n)
	}
	if err := s.dumpOverflowHours(bw); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(s.topics)) {
		tid := s.topics[name]
		c := s.counts[tid]
		fmt.Fprintf(bw, "topic %q id %d delayed %d ready %d reserved %d dead %d\n", name, tid, c.Delayed, c.Ready, c.Reserved, c.Dead)
	}
	for _, id := range slices.Sorted(maps.Keys(s.nodes)) {
		n := s.nodes[id]
		fmt.Fprintf(bw, "node %q raft %q http %q", n.ID, n.RaftAddr, n.HTTPAddr)
		if n.GRPCAddr != "" {
			fmt.Fprintf(bw, " grpc %q", n.GRPCAddr)
		}
		fmt.Fprintln(bw)
	}
	s.dumpWebhooks(bw)
	lens, err := s.segLens()
	if err != nil {
		return err
	}
	for _, sec := range slices.Sorted(maps.Keys(lens)) {
		l := lens[sec]
		fmt.Fprintf(bw, "slot %d length %d live %d bytes %d\n", sec, l.Length, l.Live, l.Bytes)
	}
	if err := s.dumpSchedules(bw); err != nil {
		return err
	}
	if err := s.scan([]byte{pKey}, func(k, v []byte) error {
		id, err := model.IDFromBytes(v)
		if err != nil {
			return fmt.Errorf("key index %x: %w", k, err)
		}
		fmt.Fprintf(bw, "key topic %d %q %s\n", binary.BigEndian.Uint32(k[1:5]), k[5:], id)
		return nil
	}); err != nil {
		return err
	}
	ids, err := s.messageIDs()
	if err != nil {
		return err
	}
	for _, id := range ids {
		mt, ok, err := lookupMeta(storeSource{s}, id)
		if err != nil {
			return err
		}
		if !ok {
			continue // placed, then gone
		}
		m, err := s.fullCommitted(id, mt)
		if err != nil {
			return err
		}
		hs := make([]string, 0, len(m.Headers))
		for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
			hs = append(hs, fmt.Sprintf("%q=%q", k, m.Headers[k]))
		}
		fmt.Fprintf(bw, "msg %s %s loc %d topic %q/%d key %q due %d prio %d second %d offset %d "+
			"attempts %d/%d receipt %x lease-exp %d/%d lease-ms %d ttr %d enqueued %d body %d:%08x headers [%s]\n",
			id, mt.State, mt.Loc, m.Topic, mt.TopicID, m.Key, mt.DueMs, mt.Priority, mt.Second, mt.Offset,
			m.Attempts, m.MaxAttempts, mt.Receipt, mt.LeaseExpMs, m.LeaseExpiresMs, m.LeaseMs, m.TTRMs, m.EnqueuedMs,
			len(m.Body), crc32.ChecksumIEEE(m.Body), strings.Join(hs, " "))
	}
	return bw.Flush()
}

// messageIDs returns, in order, the id of every message with a meta of
// its own or a placement (which may be gone). s.mu is held.
func (s *Store) messageIDs() ([]model.ID, error) {
	set := map[model.ID]bool{}
	if err := s.scan([]byte{pMeta}, func(k, _ []byte) error {
		id, err := model.IDFromBytes(k[1:])
		set[id] = true
		return err
	}); err != nil {
		return nil, err
	}
	if err := s.scan([]byte{pPlaced}, func(k, v []byte) error {
		index := binary.BigEndian.Uint64(k[1:])
		return eachPlacement(v, func(seq uint32, _, _ int64) bool {
			set[model.ID{Index: index, Seq: seq}] = true
			return true
		})
	}); err != nil {
		return nil, err
	}
	ids := slices.Collect(maps.Keys(set))
	slices.SortFunc(ids, func(a, b model.ID) int {
		if a.Less(b) {
			return -1
		}
		if b.Less(a) {
			return 1
		}
		return 0
	})
	return ids, nil
}

package wheel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble"

	"github.com/delaywheel/delaywheel/segment"
)

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
	seq     uint32 // next message position in the entry
	applied uint64
	cursor  int64
	nextTop uint32
	overDel int64
	sync    bool
	// promoted is the due instant (ms) before which the overflow holds
	// nothing: what lies before it was promoted, put never sends a message
	// due within the horizon to the overflow, and the cursor, and with it
	// the horizon, never moves back. 0: not known (the first promote after
	// an open scans from the start).
	promoted int64

	pend     map[int64]*pendSeg
	expired  []int64
	counts   map[uint32]counts // deltas
	newTopic map[string]uint32
	newNodes map[string]*Node // nil value: removed
	events   []Event
	stats    map[uint32]*TopicStats // transition counts of this batch
	scratch  []byte                 // reused encoding buffer; whatever takes it copies it
	keyBuf   []byte                 // reused by setMeta
	metaBuf  []byte                 // reused by setMeta
	// metaW holds the metas this batch wrote or deleted that the meta
	// cache (metacache.go) must hear of; they are also the batch's view.
	metaW map[ID]metaWrite
	// implicit is set while a Schedule puts a new message without a key:
	// its placement (placement.go) stands for its meta.
	implicit bool
	placing  placing
}

func (s *Store) newTx() *tx {
	return &tx{
		s: s, b: s.db.NewIndexedBatch(), applied: s.applied, cursor: s.cursor, nextTop: s.nextTopic, promoted: s.promoted,
		pend: map[int64]*pendSeg{}, counts: map[uint32]counts{}, newTopic: map[string]uint32{},
		newNodes: map[string]*Node{}, sync: s.opts.SyncEveryBatch, stats: map[uint32]*TopicStats{},
	}
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

func (t *tx) set(k, v []byte) {
	if err := t.b.Set(k, v, nil); err != nil {
		t.fail(fmt.Errorf("index set: %w", err))
	}
}

// setMeta writes a message's meta. The batch copies key and value, so both
// are encoded into buffers the transaction reuses.
func (t *tx) setMeta(id ID, m *meta) {
	t.keyBuf = appendMetaKey(t.keyBuf[:0], id)
	t.metaBuf = m.appendTo(t.metaBuf[:0])
	t.set(t.keyBuf, t.metaBuf)
	t.noteMeta(id, m)
}

// delMeta deletes a message's meta, and marks it gone if its entry's
// placements would otherwise imply one.
func (t *tx) delMeta(id ID) {
	t.del(metaKey(id))
	_, _, placed, err := placementOf(txSource{t}, id)
	if err != nil {
		t.fail(err)
	}
	if placed {
		t.set(goneKey(id), []byte{present})
	}
	t.noteMeta(id, nil)
}

// noteMeta records a meta written (nil: deleted) for the meta cache.
func (t *tx) noteMeta(id ID, m *meta) {
	_, noted := t.metaW[id]
	if !noted && !t.s.watchesMeta(id, m) {
		return
	}
	if t.metaW == nil {
		t.metaW = map[ID]metaWrite{}
	}
	if m == nil {
		t.metaW[id] = metaWrite{del: true}
	} else {
		t.metaW[id] = metaWrite{m: *m}
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

func (t *tx) meta(id ID) (meta, bool) {
	if w, ok := t.metaW[id]; ok {
		return w.m, !w.del
	}
	if m, ok := t.cachedMeta(id); ok {
		return m, true
	}
	return t.indexMeta(id)
}

// indexMeta reads a message's meta from the batch's view of the index:
// its own, or the one its placement implies.
func (t *tx) indexMeta(id ID) (meta, bool) {
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
	t.newTopic[name] = id
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

// full reads a message's full record from wherever meta says it lives.
func (t *tx) full(id ID, mt meta) (Message, bool) {
	if t.err != nil {
		return Message{}, false
	}
	var p []byte
	switch mt.Loc {
	case locSegment:
		r, err := t.readRecord(mt.Second, mt.Offset)
		if err != nil {
			t.fail(fmt.Errorf("read message %s: %w", id, err))
			return Message{}, false
		}
		p = r.Payload
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
		return Message{}, false
	}
	m, err := DecodeMessage(p)
	if err != nil {
		t.fail(fmt.Errorf("message %s: %w", id, err))
		return Message{}, false
	}
	return m, true
}

// unplace removes a message's record from its location. It does not touch
// meta or counts.
func (t *tx) unplace(id ID, mt meta) {
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
		t.overDel--
	case locReady:
		t.del(readyKey(mt.TopicID, mt.DueMs, mt.Priority, id))
	case locDead:
		t.del(deadKey(mt.TopicID, id))
	}
}

// put writes a message into the place its due time and state call for and
// records its meta. from is its previous state (0 for a new message).
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
// lies in the slot file of second at off. put writes it; a loaded slot
// and a placement imply it from the record, so all three must agree (the
// meta cache's checks compare them).
func slotMeta(m *Message, tid uint32, typ segment.RecordType, second, off int64) meta {
	return meta{State: recordState(typ), Loc: locSegment, TopicID: tid, DueMs: m.DeliverAtMs, Priority: m.Priority,
		Second: second, Offset: off, Receipt: m.Receipt, LeaseExpMs: m.LeaseExpiresMs}
}

func (t *tx) put(m *Message, tid uint32, from State, typ segment.RecordType) {
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
		mt := slotMeta(m, tid, typ, sec, off)
		if t.implicit && from == 0 && typ == segment.TypeMessage {
			t.place(m.ID, sec, off)
			t.noteMeta(m.ID, &mt)
		} else {
			t.setMeta(m.ID, &mt)
		}
		if t.s.loader != nil && sec <= t.s.loadedThrough {
			t.event(Event{Kind: EventPlaced, Second: sec, ID: m.ID, Msg: m, Lease: typ == segment.TypeLease})
		}
	default:
		t.scratch = EncodeMessage(append(t.scratch[:0], byte(typ)), m)
		t.set(overflowKey(m.DeliverAtMs, m.ID), t.scratch)
		t.overDel++
		t.setMeta(m.ID, &meta{State: state, Loc: locOverflow, TopicID: tid, DueMs: m.DeliverAtMs, Priority: m.Priority,
			Receipt: m.Receipt, LeaseExpMs: m.LeaseExpiresMs})
	}
	t.move(tid, from, state)
}

func (t *tx) move(tid uint32, from, to State) {
	if from != 0 {
		t.count(tid, from, -1)
	}
	if to != 0 {
		t.count(tid, to, 1)
	}
}

func clearLease(m *Message) {
	m.Receipt, m.LeaseExpiresMs, m.LeaseMs = 0, 0, 0
}

// toReady puts a message on its topic's ready queue.
func (t *tx) toReady(m *Message, tid uint32, from State) {
	clearLease(m)
	t.set(readyKey(tid, m.DeliverAtMs, m.Priority, m.ID), EncodeMessage(nil, m))
	t.setMeta(m.ID, &meta{State: StateReady, Loc: locReady, TopicID: tid, DueMs: m.DeliverAtMs, Priority: m.Priority})
	t.move(tid, from, StateReady)
	t.event(Event{Kind: EventReady, Topic: m.Topic, ID: m.ID})
}

// toDead moves a message to its topic's dead letters and frees its key.
func (t *tx) toDead(m *Message, tid uint32, from State) {
	clearLease(m)
	t.set(deadKey(tid, m.ID), EncodeMessage(nil, m))
	t.setMeta(m.ID, &meta{State: StateDead, Loc: locDead, TopicID: tid, DueMs: m.DeliverAtMs, Priority: m.Priority})
	t.releaseKey(m, tid)
	t.move(tid, from, StateDead)
	t.stat(tid).Dead++
}

// releaseKey drops the key index entry if it still names m.
func (t *tx) releaseKey(m *Message, tid uint32) {
	if m.Key == "" {
		return
	}
	k := keyIndexKey(tid, m.Key)
	if v := t.get(k); v != nil {
		if id, err := IDFromBytes(v); err == nil && id == m.ID {
			t.del(k)
		}
	}
}

// finish deletes a message entirely (ack, cancel).
func (t *tx) finish(m *Message, mt meta) {
	t.unplace(m.ID, mt)
	t.delMeta(m.ID)
	t.releaseKey(m, mt.TopicID)
	t.move(mt.TopicID, mt.State, 0)
}

func (t *tx) event(e Event) {
	if t.s.loader != nil {
		t.events = append(t.events, e)
	}
}

func (t *tx) apply(c Command) Result {
	switch c := c.(type) {
	case Schedule:
		return t.schedule(c)
	case Cancel:
		return t.cancel(c)
	case Reschedule:
		return t.reschedule(c)
	case Lease:
		return t.lease(c)
	case Ack:
		return t.ack(c)
	case Nack:
		return t.nack(c)
	case Touch:
		return t.touch(c)
	case Expire:
		t.s.expiresSinceFlush++
		t.expire(c.Before)
		return Result{}
	case Promote:
		return Result{Value: t.promote(c.Before)}
	case Redrive:
		return t.redrive(c)
	case SetNode:
		n := c.Node
		t.set(nodeKey(n.ID), encodeNode(n))
		t.newNodes[n.ID] = &n
		return Result{}
	case RemoveNode:
		t.del(nodeKey(c.ID))
		t.newNodes[c.ID] = nil
		return Result{}
	default:
		return Result{Err: fmt.Errorf("%w: unknown command %T", ErrInvalid, c)}
	}
}

func clampDue(ms int64) int64 {
	if ms < 0 {
		return 0
	}
	if ms > MaxDueMs {
		return MaxDueMs
	}
	return ms
}

func (t *tx) schedule(c Schedule) Result {
	out := make([]Enqueued, 0, len(c.Messages))
	for i := range c.Messages {
		nm := &c.Messages[i]
		tid, _ := t.topicID(nm.Topic, true)
		if nm.Key != "" {
			if v := t.get(keyIndexKey(tid, nm.Key)); v != nil {
				if id, err := IDFromBytes(v); err == nil {
					if mt, ok := t.meta(id); ok && mt.State != StateDead {
						out = append(out, Enqueued{ID: id, DeliverAtMs: mt.DueMs, Duplicate: true})
						continue
					}
				}
			}
		}
		id := ID{Index: t.index, Seq: t.seq}
		t.seq++
		m := Message{ID: id, Topic: nm.Topic, Key: nm.Key, Body: nm.Body, Headers: nm.Headers, Priority: nm.Priority,
			DeliverAtMs: clampDue(nm.DeliverAtMs), TTRMs: nm.TTRMs, MaxAttempts: nm.MaxAttempts, EnqueuedMs: c.NowMs}
		if m.TTRMs <= 0 {
			m.TTRMs = DefaultTTRMs
		}
		if m.MaxAttempts <= 0 {
			m.MaxAttempts = DefaultMaxAttempts
		}
		t.implicit = nm.Key == ""
		t.put(&m, tid, 0, segment.TypeMessage)
		t.implicit = false
		t.stat(tid).Enqueued++
		if nm.Key != "" {
			b := id.Bytes()
			t.set(keyIndexKey(tid, nm.Key), b[:])
		}
		out = append(out, Enqueued{ID: id, DeliverAtMs: m.DeliverAtMs})
	}
	t.flushPlacing()
	return Result{Value: out}
}

// Scheduled is what Apply answers for an entry at index whose only command
// is a Schedule of msgs, none of which has a key: message i becomes
// ID{index, i}, due at its time clamped to [0, MaxDueMs]. With no key there
// is no duplicate to find, so the answer does not depend on the state, and
// a leader can give it as soon as the entry commits.
func Scheduled(index uint64, msgs []NewMessage) []Enqueued {
	out := make([]Enqueued, len(msgs))
	for i := range msgs {
		out[i] = Enqueued{ID: ID{Index: index, Seq: uint32(i)}, DeliverAtMs: clampDue(msgs[i].DeliverAtMs)}
	}
	return out
}

// Defaults for messages that do not set them.
const (
	DefaultTTRMs       = 30_000
	DefaultMaxAttempts = 10
)

func (t *tx) resolve(c Cancel) (ID, bool) {
	if c.Topic == "" {
		return c.ID, true
	}
	tid, ok := t.topicID(c.Topic, false)
	if !ok {
		return ID{}, false
	}
	v := t.get(keyIndexKey(tid, c.Key))
	if v == nil {
		return ID{}, false
	}
	id, err := IDFromBytes(v)
	return id, err == nil
}

func (t *tx) cancel(c Cancel) Result {
	id, ok := t.resolve(c)
	if !ok {
		return Result{Err: fmt.Errorf("%w: no pending message with key %q on topic %q", ErrNotFound, c.Key, c.Topic)}
	}
	mt, ok := t.meta(id)
	if !ok {
		return Result{Err: fmt.Errorf("%w: message %s", ErrNotFound, id)}
	}
	if mt.State == StateReserved {
		return Result{Err: fmt.Errorf("%w: message %s is reserved; ack or nack it instead", ErrConflict, id)}
	}
	m, ok := t.full(id, mt)
	if !ok {
		return Result{}
	}
	t.finish(&m, mt)
	t.stat(mt.TopicID).Cancelled++
	return Result{Value: id}
}

func (t *tx) reschedule(c Reschedule) Result {
	mt, ok := t.meta(c.ID)
	if !ok {
		return Result{Err: fmt.Errorf("%w: message %s", ErrNotFound, c.ID)}
	}
	if mt.State != StateDelayed && mt.State != StateReady {
		return Result{Err: fmt.Errorf("%w: message %s is %s; only delayed or ready messages can be rescheduled", ErrConflict, c.ID, mt.State)}
	}
	m, ok := t.full(c.ID, mt)
	if !ok {
		return Result{}
	}
	t.unplace(c.ID, mt)
	m.DeliverAtMs = clampDue(c.DeliverAtMs)
	t.put(&m, mt.TopicID, mt.State, segment.TypeMessage)
	return Result{Value: m.DeliverAtMs}
}

func (t *tx) lease(c Lease) Result {
	ok := make([]bool, len(c.Items))
	for i, it := range c.Items {
		mt, found := t.meta(it.ID)
		expiredLease := found && mt.State == StateReserved && mt.LeaseExpMs < c.NowMs
		if !found || (mt.State != StateDelayed && mt.State != StateReady && !expiredLease) {
			continue // cancelled, or handed out twice: the later receipt is stale
		}
		m, read := t.full(it.ID, mt)
		if !read {
			break
		}
		if m.Attempts >= m.MaxAttempts {
			continue // out of attempts: it goes dead when its slot expires
		}
		t.unplace(it.ID, mt)
		m.Attempts++
		m.Receipt = it.Nonce
		m.LeaseExpiresMs = it.ExpiresMs
		m.LeaseMs = it.ExpiresMs - c.NowMs
		m.DeliverAtMs = clampDue(max(it.RedeliverMs, it.ExpiresMs))
		t.put(&m, mt.TopicID, mt.State, segment.TypeLease)
		t.stat(mt.TopicID).Delivered++
		if expiredLease {
			t.stat(mt.TopicID).ExpiredLeases++
		}
		ok[i] = true
	}
	return Result{Value: ok}
}

// held returns the meta and message of a receipt that is still valid at now.
func (t *tx) held(r Receipt, now int64) (meta, Message, bool) {
	mt, ok := t.meta(r.ID)
	if !ok || mt.State != StateReserved || mt.Receipt != r.Nonce || now > mt.LeaseExpMs {
		return meta{}, Message{}, false
	}
	m, ok := t.full(r.ID, mt)
	return mt, m, ok
}

// eachHeld calls fn for every receipt still valid at now and counts the
// others as stale.
func (t *tx) eachHeld(rs []Receipt, now int64, fn func(mt meta, m *Message)) Result {
	var n Counted
	for _, r := range rs {
		mt, m, ok := t.held(r, now)
		if !ok {
			n.Stale++
			continue
		}
		fn(mt, &m)
		n.Done++
	}
	return Result{Value: n}
}

func (t *tx) ack(c Ack) Result {
	return t.eachHeld(c.Receipts, c.NowMs, func(mt meta, m *Message) {
		t.finish(m, mt)
		t.stat(mt.TopicID).Acked++
	})
}

func (t *tx) nack(c Nack) Result {
	return t.eachHeld(c.Receipts, c.NowMs, func(mt meta, m *Message) {
		t.unplace(m.ID, mt)
		clearLease(m)
		t.stat(mt.TopicID).Nacked++
		if m.Attempts >= m.MaxAttempts {
			t.toDead(m, mt.TopicID, mt.State)
			return
		}
		m.DeliverAtMs = clampDue(c.NowMs + max(c.DelayMs, 0))
		t.put(m, mt.TopicID, mt.State, segment.TypeMessage)
	})
}

func (t *tx) touch(c Touch) Result {
	return t.eachHeld(c.Receipts, c.NowMs, func(mt meta, m *Message) {
		t.unplace(m.ID, mt)
		backoff := max(m.DeliverAtMs-m.LeaseExpiresMs, 0)
		m.LeaseExpiresMs = c.NowMs + m.LeaseMs
		m.DeliverAtMs = clampDue(m.LeaseExpiresMs + backoff)
		t.put(m, mt.TopicID, mt.State, segment.TypeLease)
	})
}

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
		lo = overflowKey(t.promoted, ID{})
	}
	hi := before * TickMs
	if hi <= t.promoted {
		return 0
	}
	keys, vals := t.scanKeys(lo, overflowKey(hi, ID{}), 0)
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
		t.overDel--
		t.put(&m, tid, state, typ)
	}
	return len(keys)
}

func (t *tx) redrive(c Redrive) Result {
	tid, ok := t.topicID(c.Topic, false)
	if !ok {
		return Result{Value: 0}
	}
	ids := c.IDs
	if len(ids) == 0 {
		keys, _ := t.scanKeys(deadPrefix(tid), prefixEnd(deadPrefix(tid)), 0)
		for _, k := range keys {
			id, _ := IDFromBytes(k[5:])
			ids = append(ids, id)
		}
	}
	n := 0
	for _, id := range ids {
		mt, ok := t.meta(id)
		if !ok || mt.State != StateDead || mt.TopicID != tid {
			continue
		}
		m, ok := t.full(id, mt)
		if !ok {
			break
		}
		t.unplace(id, mt)
		m.Attempts = 0
		m.DeliverAtMs = clampDue(c.NowMs)
		if m.Key != "" {
			k := keyIndexKey(tid, m.Key)
			if t.get(k) == nil {
				b := id.Bytes()
				t.set(k, b[:])
			} else {
				m.Key = "" // a newer message holds the key now
			}
		}
		t.toReady(&m, tid, mt.State)
		n++
	}
	return Result{Value: n}
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
	t.set(keyApplied, putU64(t.applied))
	t.set(keyCursor, putU64(uint64(t.cursor)))
	t.set(keyNextTopic, putU64(uint64(t.nextTop)))
	t.set(keyOverflow, putU64(uint64(s.overflow+t.overDel)))
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
	if p := s.flushErr.Load(); p != nil {
		return *p
	}
	s.applied, s.cursor, s.nextTopic, s.promoted = t.applied, t.cursor, t.nextTop, t.promoted
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
	defer s.publishLocked(len(t.newTopic) > 0)
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
	t.commitMetas()
	if s.loader != nil && len(t.events) > 0 {
		s.loader.applied(t.events)
	}
	return nil
}

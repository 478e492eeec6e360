package wheel

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Apply applies log entries in order as one atomic batch and returns each
// command's result. Entries at or below the applied index were applied
// before a restart and are skipped (their results are nil). An error means
// storage failed; the store refuses further writes.
func (s *Store) Apply(entries []Entry) ([][]command.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return nil, s.broken
	}
	if s.opts.ReadOnly {
		return nil, fmt.Errorf("apply: store opened read-only")
	}
	t := s.newTx()
	out := make([][]command.Result, len(entries))
	for i, e := range entries {
		if e.Index <= s.applied || e.Index <= t.applied {
			continue
		}
		t.index, t.seq, t.applied = e.Index, 0, e.Index
		res := make([]command.Result, len(e.Cmds))
		for j, c := range e.Cmds {
			res[j] = t.apply(c)
			if t.err != nil {
				break
			}
		}
		out[i] = res
		if t.err != nil {
			break
		}
	}
	if t.err == nil {
		t.err = t.commit()
	}
	if t.err != nil {
		s.broken = fmt.Errorf("%w: %w", ErrClosed, t.err)
		t.b.Close()
		return nil, t.err
	}
	return out, nil
}

func (t *tx) apply(c command.Command) command.Result {
	switch c := c.(type) {
	case command.Schedule:
		return t.schedule(c)
	case command.Cancel:
		return t.cancel(c)
	case command.Reschedule:
		return t.reschedule(c)
	case command.Lease:
		return t.lease(c)
	case command.Ack:
		return t.ack(c)
	case command.Nack:
		return t.nack(c)
	case command.Touch:
		return t.touch(c)
	case command.Bury:
		return t.bury(c)
	case command.Expire:
		t.s.expiresSinceFlush++
		t.expire(c.Before)
		return command.Result{}
	case command.Promote:
		return command.Result{Value: t.promote(c.Before)}
	case command.Redrive:
		return t.redrive(c)
	case command.SetNode:
		n := c.Node
		t.set(nodeKey(n.ID), encodeNode(n))
		t.newNodes[n.ID] = &n
		return command.Result{}
	case command.RemoveNode:
		t.del(nodeKey(c.ID))
		t.newNodes[c.ID] = nil
		return command.Result{}
	case command.SetWebhook:
		return t.setWebhook(c.Webhook)
	case command.DeleteWebhook:
		return t.deleteWebhook(c.Topic)
	case command.SetSchedule:
		return t.setSchedule(c)
	case command.DeleteSchedule:
		return t.deleteSchedule(c)
	case command.AdvanceSchedules:
		return t.advanceSchedules(c)
	default:
		return command.Result{Err: fmt.Errorf("%w: unknown command %T", model.ErrInvalid, c)}
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

func (t *tx) schedule(c command.Schedule) command.Result {
	if room := model.MaxEntryMessages - int(t.seq); len(c.Messages) > room {
		return command.Result{Err: fmt.Errorf("%w: a log entry enqueues at most %d messages (MaxEntryMessages); this command brings it to %d",
			model.ErrInvalid, model.MaxEntryMessages, int(t.seq)+len(c.Messages))}
	}
	out := make([]Enqueued, 0, len(c.Messages))
	held := t.keysHeldBy(c.Messages)
	for i := range c.Messages {
		nm := &c.Messages[i]
		tid, _ := t.topicID(nm.Topic, true)
		if nm.Key != "" && held[i] {
			if v := t.get(keyIndexKey(tid, nm.Key)); v != nil {
				if id, err := model.IDFromBytes(v); err == nil {
					if mt, ok := t.meta(id); ok && mt.State != StateDead {
						out = append(out, Enqueued{ID: id, DeliverAtMs: mt.DueMs, Duplicate: true})
						continue
					}
				}
			}
		}
		id := model.ID{Index: t.index, Seq: model.SeqOf(t.s.opts.Group, t.seq)}
		t.seq++
		m := model.Message{ID: id, Topic: nm.Topic, Key: nm.Key, Body: nm.Body, Headers: nm.Headers, Priority: nm.Priority,
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
	return command.Result{Value: out}
}

// keysHeldBy reports, for each of msgs, whether its key is held in the
// index before the command runs. A key that repeats within msgs is
// reported held from its second on, so that the check of get decides it
// against the command's own earlier writes. It creates no topic: a topic
// the command creates holds no key yet, and topics are numbered in the
// order the command's messages name them.
func (t *tx) keysHeldBy(msgs []command.NewMessage) []bool {
	held := make([]bool, len(msgs))
	var keys [][]byte
	var at []int
	var seen map[[2]string]bool // made at the first key: most enqueues carry none
	for i := range msgs {
		nm := &msgs[i]
		if nm.Key == "" {
			continue
		}
		tk := [2]string{nm.Topic, nm.Key}
		if seen[tk] {
			held[i] = true
			continue
		}
		if seen == nil {
			seen = map[[2]string]bool{}
		}
		seen[tk] = true
		if tid, ok := t.topicID(nm.Topic, false); ok {
			keys, at = append(keys, keyIndexKey(tid, nm.Key)), append(at, i)
		}
	}
	for j, h := range t.keysHeld(keys) {
		held[at[j]] = h
	}
	return held
}

// Scheduled is what the store of group answers for an entry at index whose
// only command is a Schedule of msgs (at most MaxEntryMessages), none of
// which has a key: message i becomes the id of position i in group, due at
// its time clamped to [0, MaxDueMs]. With no key there is no duplicate to
// find, so the answer does not depend on the state, and a leader can give
// it as soon as the entry commits.
func Scheduled(group int, index uint64, msgs []command.NewMessage) []Enqueued {
	out := make([]Enqueued, len(msgs))
	for i := range msgs {
		out[i] = Enqueued{ID: model.ID{Index: index, Seq: model.SeqOf(group, uint32(i))}, DeliverAtMs: clampDue(msgs[i].DeliverAtMs)}
	}
	return out
}

// Defaults for messages that do not set them.
const (
	DefaultTTRMs       = 30_000
	DefaultMaxAttempts = 10
)

func (t *tx) resolve(c command.Cancel) (model.ID, bool) {
	if c.Topic == "" {
		return c.ID, true
	}
	tid, ok := t.topicID(c.Topic, false)
	if !ok {
		return model.ID{}, false
	}
	v := t.get(keyIndexKey(tid, c.Key))
	if v == nil {
		return model.ID{}, false
	}
	id, err := model.IDFromBytes(v)
	return id, err == nil
}

func (t *tx) cancel(c command.Cancel) command.Result {
	id, ok := t.resolve(c)
	if !ok {
		return command.Result{Err: fmt.Errorf("%w: no pending message with key %q on topic %q", model.ErrNotFound, c.Key, c.Topic)}
	}
	mt, ok := t.meta(id)
	if !ok {
		return command.Result{Err: fmt.Errorf("%w: message %s", model.ErrNotFound, id)}
	}
	if mt.State == StateReserved {
		return command.Result{Err: fmt.Errorf("%w: message %s is reserved; ack or nack it instead", model.ErrConflict, id)}
	}
	t.finish(id, mt)
	t.stat(mt.TopicID).Cancelled++
	return command.Result{Value: id}
}

func (t *tx) reschedule(c command.Reschedule) command.Result {
	mt, ok := t.meta(c.ID)
	if !ok {
		return command.Result{Err: fmt.Errorf("%w: message %s", model.ErrNotFound, c.ID)}
	}
	if mt.State != StateDelayed && mt.State != StateReady {
		return command.Result{Err: fmt.Errorf("%w: message %s is %s; only delayed or ready messages can be rescheduled", model.ErrConflict, c.ID, mt.State)}
	}
	m, ok := t.full(c.ID, mt)
	if !ok {
		return command.Result{}
	}
	t.unplace(c.ID, mt)
	m.DeliverAtMs = clampDue(c.DeliverAtMs)
	t.put(&m, mt.TopicID, mt.State, segment.TypeMessage)
	return command.Result{Value: m.DeliverAtMs}
}

func (t *tx) lease(c command.Lease) command.Result {
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
	return command.Result{Value: ok}
}

// held returns the meta and message of a receipt that is still valid at
// now. Unless full, the record is not read and the message is its id
// alone: all that ending it needs (finish).
func (t *tx) held(r model.Receipt, now int64, full bool) (meta, model.Message, bool) {
	mt, ok := t.meta(r.ID)
	if !ok || mt.State != StateReserved || mt.Receipt != r.Nonce || now > mt.LeaseExpMs {
		return meta{}, model.Message{}, false
	}
	if !full {
		return mt, model.Message{ID: r.ID}, true
	}
	m, ok := t.full(r.ID, mt)
	return mt, m, ok
}

// eachHeld calls fn for every receipt still valid at now and counts the
// others as stale. Unless full, fn gets the message's id alone (see held).
func (t *tx) eachHeld(rs []model.Receipt, now int64, full bool, fn func(mt meta, m *model.Message)) command.Result {
	var n command.Counted
	for _, r := range rs {
		mt, m, ok := t.held(r, now, full)
		if !ok {
			n.Stale++
			continue
		}
		fn(mt, &m)
		n.Done++
	}
	return command.Result{Value: n}
}

func (t *tx) ack(c command.Ack) command.Result {
	return t.eachHeld(c.Receipts, c.NowMs, false, func(mt meta, m *model.Message) {
		t.finish(m.ID, mt)
		t.stat(mt.TopicID).Acked++
	})
}

func (t *tx) nack(c command.Nack) command.Result {
	return t.eachHeld(c.Receipts, c.NowMs, true, func(mt meta, m *model.Message) {
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

func (t *tx) touch(c command.Touch) command.Result {
	return t.eachHeld(c.Receipts, c.NowMs, true, func(mt meta, m *model.Message) {
		t.unplace(m.ID, mt)
		backoff := max(m.DeliverAtMs-m.LeaseExpiresMs, 0)
		m.LeaseExpiresMs = c.NowMs + m.LeaseMs
		m.DeliverAtMs = clampDue(m.LeaseExpiresMs + backoff)
		t.put(m, mt.TopicID, mt.State, segment.TypeLease)
	})
}

// bury moves reserved messages out of attempts whose lease ended before
// c.NowMs to the dead letters: what the expiry of their slot would do, at
// the end of the lease.
func (t *tx) bury(c command.Bury) command.Result {
	var n command.Counted
	for _, r := range c.Receipts {
		mt, ok := t.meta(r.ID)
		if !ok || mt.State != StateReserved || mt.Receipt != r.Nonce || mt.LeaseExpMs >= c.NowMs {
			n.Stale++
			continue
		}
		m, ok := t.full(r.ID, mt)
		if !ok {
			break
		}
		if m.Attempts < m.MaxAttempts {
			n.Stale++
			continue
		}
		t.unplace(m.ID, mt)
		t.stat(mt.TopicID).ExpiredLeases++
		t.toDead(&m, mt.TopicID, mt.State)
		n.Done++
	}
	return command.Result{Value: n}
}

func (t *tx) redrive(c command.Redrive) command.Result {
	tid, ok := t.topicID(c.Topic, false)
	if !ok {
		return command.Result{Value: 0}
	}
	ids := c.IDs
	if len(ids) == 0 {
		keys, _ := t.scanKeys(deadPrefix(tid), prefixEnd(deadPrefix(tid)), 0)
		for _, k := range keys {
			id, _ := model.IDFromBytes(k[5:])
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
	return command.Result{Value: n}
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

package wheel

import (
	"fmt"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Apply runs a log entry's commands in one batch of the index: the
// dispatch by kind, and the commands that add or remove messages (Schedule,
// Cancel, Reschedule). A consumer's hand-offs are lease.go's, the passing
// of time fire.go's; where a message lives (wheel slot, overflow, ready
// queue) is placement.go's, in the keys keys.go lays out.

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
	// Committed: the memtable holds copies of its writes (or, for a batch
	// too large for it, the batch's data, which Commit detached), so the
	// batch goes back to Pebble's pool, and the next Apply reuses its
	// buffers instead of growing new ones.
	t.b.Close()
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
	case command.LeaseBuried:
		return t.leaseBuried(c)
	case command.Ack:
		return t.ack(c)
	case command.Nack:
		return t.nack(c)
	case command.Touch:
		return t.touch(c)
	case command.Bury:
		return t.bury(c)
	case command.DeadLetter:
		return t.deadLetter(c)
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
		setIn(&t.newNodes, n.ID, &n)
		return command.Result{}
	case command.RemoveNode:
		t.del(nodeKey(c.ID))
		setIn(&t.newNodes, c.ID, nil)
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

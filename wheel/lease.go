package wheel

import (
	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// A consumer's hand-offs: Lease takes ready messages for their lease, and
// Ack, Nack, Touch, Bury and DeadLetter settle a lease by its receipt;
// Redrive returns dead letters to ready. Each is a command of apply.go's
// dispatch.

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

// leaseBuried redrives one dead message and leases it: a Redrive of it,
// then a Lease of its item, in one apply, so that no other hand-off comes
// between.
func (t *tx) leaseBuried(c command.LeaseBuried) command.Result {
	mt, ok := t.meta(c.Item.ID)
	if !ok || mt.State != StateDead {
		return command.Result{Value: []bool{false}}
	}
	if n, _ := t.redrive(command.Redrive{NowMs: c.NowMs, Topic: c.Topic, IDs: []model.ID{c.Item.ID}}).Value.(int); n != 1 {
		return command.Result{Value: []bool{false}}
	}
	return t.lease(command.Lease{NowMs: c.NowMs, Items: []command.LeaseItem{c.Item}})
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

// deadLetter moves held messages to the dead letters, as a nack of their
// last attempt does.
func (t *tx) deadLetter(c command.DeadLetter) command.Result {
	return t.eachHeld(c.Receipts, c.NowMs, true, func(mt meta, m *model.Message) {
		t.unplace(m.ID, mt)
		clearLease(m)
		t.toDead(m, mt.TopicID, mt.State)
	})
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

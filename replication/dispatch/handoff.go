package dispatch

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// leaseCommit is a submitted Lease entry and the hand-off it carries.
type leaseCommit struct {
	wait  func() ([]command.Result, error)
	msgs  []model.Message
	items []command.LeaseItem // msgs' items of the entry
	res   chan leaseRes       // buffered: finishLease never waits for the hand-off
	// applied is closed once the entry is applied here (or has failed).
	applied chan struct{}
	// early is set when the hand-off was answered before the commit.
	early bool
}

type leaseRes struct {
	ok  []bool
	err error
}

// backoff is how long after a lease expires an unacked message comes back.
func (d *Dispatcher) backoff(attempt int32) int64 {
	b := d.cfg.RedeliveryBackoff * time.Duration(attempt)
	return min(b, time.Minute).Milliseconds()
}

// handoff leases msgs and returns their deliveries: at once when the Lease
// is in the log order and the leader holds its lease, else once it commits.
func (d *Dispatcher) handoff(ctx context.Context, msgs []model.Message, ttr time.Duration) ([]model.Delivery, error) {
	return d.lease(ctx, msgs, ttr, firstHandoffs(msgs), leaseOf)
}

// leaseOf is the Lease entry of a hand-off's items.
func leaseOf(nowMs int64, items []command.LeaseItem) command.Command {
	return command.Lease{NowMs: nowMs, Items: items}
}

// lease leases msgs by the entry entry builds (whose result is a Lease's)
// and returns their deliveries, at once when early is allowed and the
// leader holds its lease, else once the entry commits.
func (d *Dispatcher) lease(ctx context.Context, msgs []model.Message, ttr time.Duration, early bool,
	entry func(nowMs int64, items []command.LeaseItem) command.Command) ([]model.Delivery, error) {
	if len(msgs) == 0 {
		return []model.Delivery{}, nil
	}
	now := d.clock.Now().UnixMilli()
	items := make([]command.LeaseItem, len(msgs))
	for i, m := range msgs {
		ttrMs := m.TTRMs
		if ttr > 0 {
			ttrMs = ttr.Milliseconds()
		}
		exp := now + max(ttrMs, 1)
		// The redelivery comes due a millisecond after the lease ends at the
		// earliest: at the end instant itself the lease still holds, and a
		// Lease proposed then would be refused. A last attempt is not
		// redelivered: it comes due right after its lease, to be buried.
		redeliver := exp + max(d.backoff(m.Attempts+1), 1)
		if m.Attempts+1 >= m.MaxAttempts {
			redeliver = exp + 1
		}
		items[i] = command.LeaseItem{ID: m.ID, Nonce: rand.Uint64() | 1, ExpiresMs: exp, RedeliverMs: redeliver}
	}
	// An entry that may be answered early rides with the node's next
	// entry (an ack, most often), sharing its write, unless the leadership
	// lease is not held after all: then its commit is awaited, and it is
	// handed over at once.
	var wait func() ([]command.Result, error)
	var err error
	flush := func() {}
	if early {
		wait, flush, err = d.n.SubmitRider(d.ctx, entry(now, items))
	} else {
		wait, err = d.n.Submit(d.ctx, entry(now, items))
	}
	if err != nil {
		d.release(msgs, nil, true)
		return nil, err
	}
	// The Lease is in the log order now: an ack the consumer sends for what
	// it is answered is ordered after it.
	c := &leaseCommit{wait: wait, msgs: msgs, items: items, res: make(chan leaseRes, 1), applied: make(chan struct{})}
	early = early && d.n.LeaseHeld()
	c.early = early
	if early {
		// Answered before its apply: reads on this node wait for it
		// (WaitAnswered), so a consumer reads its own lease.
		d.mu.Lock()
		d.early[c] = struct{}{}
		d.mu.Unlock()
	} else {
		flush() // answered at its commit: it rides no longer
	}
	go d.finishLease(c)
	if early {
		ok := make([]bool, len(msgs))
		for i := range ok {
			ok[i] = true
		}
		return d.deliveries(msgs, items, ok), nil
	}
	var res leaseRes
	select {
	case res = <-c.res:
	case <-d.ctx.Done():
		// Leadership ended; if the Lease still commits, the message comes
		// back when that lease expires.
		res.err = model.ErrNotLeader
	}
	if res.err != nil {
		return nil, res.err
	}
	return d.deliveries(msgs, items, res.ok), nil
}

// deliveries builds the answer for leased messages and observes lateness.
func (d *Dispatcher) deliveries(msgs []model.Message, items []command.LeaseItem, ok []bool) []model.Delivery {
	out := make([]model.Delivery, 0, len(msgs))
	at := d.clock.Now().UnixMilli()
	for i, m := range msgs {
		if !ok[i] {
			continue
		}
		// A message taken by id before its due time (ReserveID) was not late.
		if d.cfg.Lateness != nil && at >= m.DeliverAtMs {
			d.cfg.Lateness(float64(at-m.DeliverAtMs) / 1000)
		}
		m.Attempts++
		m.Receipt = items[i].Nonce
		m.LeaseExpiresMs = items[i].ExpiresMs
		out = append(out, model.Delivery{Message: m, Attempt: m.Attempts, Receipt: model.Receipt{ID: m.ID, Nonce: items[i].Nonce}})
	}
	return out
}

// release ends the hand-off of msgs: they may be taken again. leased says
// which of them the Lease reserved (nil: none); the others are where they
// were, and their topics' ready queues are read again. retake says that
// the Lease entry failed (it did not commit, or its outcome is unknown)
// and nobody holds the messages: nobody was answered, or the lease they
// were answered with has ended (holdBack). The messages popped from the
// heap that no batch changed since (Unclaim) go back to the due list, so
// they are handed out again at once, not when their slot expires. A
// committed Lease's refusals are not retaken: the apply refused them for
// a reason that stays (out of attempts, a read that failed), and handing
// them out again would only be refused again.
func (d *Dispatcher) release(msgs []model.Message, leased []bool, retake bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.releaseLocked(msgs, leased, retake)
}

// releaseLocked is release with d.mu held.
func (d *Dispatcher) releaseLocked(msgs []model.Message, leased []bool, retake bool) {
	var topics []string
	var again map[string][]model.Message
	for i, m := range msgs {
		delete(d.inflight, m.ID)
		back := leased == nil || !leased[i]
		if back {
			delete(d.drained, m.Topic)
			if retake && d.loader.Unclaim(m.ID) {
				if again == nil {
					again = map[string][]model.Message{}
				}
				again[m.Topic] = append(again[m.Topic], m)
			}
		}
		if (back || len(d.due[m.Topic]) > 0) && !slices.Contains(topics, m.Topic) {
			topics = append(topics, m.Topic)
		}
	}
	// Taken from the head of their due list, they go back to its head:
	// what is there now was behind them or popped later.
	for t, ms := range again {
		d.due[t] = slices.Insert(d.due[t], 0, ms...)
	}
	// A message popped again while its hand-off was in flight waits in
	// the due list for this release (takeLocked); one the Lease did not
	// reserve may wait on its ready queue, skipped by the reserves that
	// started waiting meanwhile.
	for _, t := range topics {
		d.serveWaitersLocked(t)
	}
}

// firstHandoffs reports whether none of msgs is the redelivery of an
// expired lease. Only those are answered before their Lease commits: the
// Lease of a message that is not reserved is refused only if a cancel or
// reschedule races it, while a lease redelivery races the consumer's own
// ack, touch or nack of the previous attempt, and must not be handed out
// if one of those wins.
func firstHandoffs(msgs []model.Message) bool {
	for _, m := range msgs {
		if m.Receipt != 0 {
			return false
		}
	}
	return true
}

// finishLease waits for a Lease entry to commit, releases its messages and
// answers its hand-off if it is still waiting.
func (d *Dispatcher) finishLease(c *leaseCommit) {
	res, err := c.wait()
	// An entry that failed was not applied here; one that committed with
	// an unexpected result was, and decided what it reserved.
	failed := err != nil
	defer func() {
		d.mu.Lock()
		delete(d.early, c)
		d.mu.Unlock()
		close(c.applied)
	}()
	var ok []bool
	if err == nil {
		if res[0].Err != nil {
			err = res[0].Err
		} else {
			ok, _ = res[0].Value.([]bool)
			if len(ok) != len(c.msgs) {
				err = fmt.Errorf("%w: lease result has %d items, want %d", model.ErrUnavailable, len(ok), len(c.msgs))
			}
		}
	}
	if err != nil {
		if failed && c.early {
			d.holdBack(c)
		} else {
			d.release(c.msgs, nil, failed)
		}
		c.res <- leaseRes{err: err}
		return
	}
	d.release(c.msgs, ok, false)
	c.res <- leaseRes{ok: ok}
}

// heldMsg is a message held in flight until its lease ends.
type heldMsg struct {
	msg model.Message
	end int64 // the lease's last millisecond
}

// holdBack keeps the messages of a hand-off answered before its Lease
// entry failed in flight until the leases they were answered with end:
// their consumer holds them till then, as under a committed Lease, while
// this node leads (the next leader's dispatcher starts without the hold).
// The fire loop then releases them (releaseHeldLocked).
func (d *Dispatcher) holdBack(c *leaseCommit) {
	d.mu.Lock()
	for i, m := range c.msgs {
		d.held = append(d.held, heldMsg{msg: m, end: c.items[i].ExpiresMs})
	}
	slices.SortStableFunc(d.held, func(a, b heldMsg) int { return cmp.Compare(a.end, b.end) })
	d.mu.Unlock()
	signal(d.rearm)
}

// releaseHeldLocked releases the held messages whose lease ended before
// nowMs, as nobody holds them, and returns the instant the next one's
// ends (-1 when none is held).
func (d *Dispatcher) releaseHeldLocked(nowMs int64) int64 {
	i := 0
	for i < len(d.held) && d.held[i].end < nowMs {
		i++
	}
	if i > 0 {
		msgs := make([]model.Message, i)
		for j, h := range d.held[:i] {
			msgs[j] = h.msg
		}
		d.held = slices.Delete(d.held, 0, i)
		d.releaseLocked(msgs, nil, true)
	}
	if len(d.held) == 0 {
		return -1
	}
	return d.held[0].end + 1
}

// WaitAnswered waits until every Lease this dispatcher answered before
// its entry was applied, as of the call, has been applied (or has failed),
// so a read that follows sees the leases its client was handed.
func (d *Dispatcher) WaitAnswered(ctx context.Context) error {
	d.mu.Lock()
	pending := make([]chan struct{}, 0, len(d.early))
	for c := range d.early {
		pending = append(pending, c.applied)
	}
	d.mu.Unlock()
	for _, ch := range pending {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

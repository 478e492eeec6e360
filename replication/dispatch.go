package replication

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
)

// dispatcher runs on the leader only. It keeps the precision heap loaded a
// little ahead of the cursor, pops each message at its due millisecond,
// hands it to a waiting consumer, and stamps time into the log (Expire and
// Promote) as the cursor moves.
//
// A hand-off is answered as soon as its Lease entry is in the leader's log
// order, without waiting for the commit, while the leader holds a lease on
// its leadership: a quorum confirmed it at most half a heartbeat timeout
// ago. No follower votes for another candidate until it has not heard from
// the leader for a whole heartbeat timeout, so within that window no other
// leader can exist, and a deposed leader (paused, partitioned) cannot
// deliver. An ack the consumer sends afterwards is ordered after the Lease.
// If the leader dies before the Lease commits, the next leader delivers the
// message again (at-least-once, a duplicate only where the leader changed).
// Without a lease (just elected, or quorum contact lost), a hand-off is
// answered only once its Lease has committed. The only voter of a cluster
// always holds the lease: no other node can be elected while it leads.
//
// The path from a due millisecond to the answer is kept short, because
// every step of it is lateness: the fire loop wakes on a precise alarm (see
// waker), an arriving reserve pops what came due itself rather than wait for
// the fire loop, the consumer's goroutine submits its Lease entry itself
// (Raft batches concurrent entries into one write), and a goroutine per
// Lease waits for its commit, so a commit stall holds up no hand-off while
// the lease is held.
type dispatcher struct {
	n      *Node
	clock  wheel.Clock
	loader *wheel.Loader // replaced under mu by a snapshot restore
	wake   *waker

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	waiters  map[string][]*waiter
	due      map[string][]wheel.Message // popped from the heap, not handed out yet
	inflight map[wheel.ID]struct{}      // handed out, Lease not yet applied
	// drained holds the topics whose ready queue held nothing to hand out
	// when last read, and has not received a message since: taking from
	// them skips reading the queue. A topic absent is read.
	drained map[string]bool

	// confirmedNs is the latest instant (clock nanoseconds) at which a quorum
	// is known to have followed this leader; revoked turns the lease off for
	// good (leadership is being handed over).
	confirmedNs atomic.Int64
	revoked     atomic.Bool
}

type waiter struct {
	max  int
	ch   chan []wheel.Message // receives once, buffered
	done bool
}

// leaseCommit is a submitted Lease entry and the hand-off it carries.
type leaseCommit struct {
	p    *proposal
	msgs []wheel.Message
	res  chan leaseRes // buffered: finishLease never waits for the hand-off
}

type leaseRes struct {
	ok  []bool
	err error
}

func newDispatcher(n *Node) *dispatcher {
	return &dispatcher{
		n: n, clock: n.clock, loader: wheel.NewLoader(),
		waiters: map[string][]*waiter{}, due: map[string][]wheel.Message{},
		inflight: map[wheel.ID]struct{}{}, drained: map[string]bool{},
	}
}

func (d *dispatcher) start(parent context.Context) error {
	d.ctx, d.cancel = context.WithCancel(parent)
	w, err := newWaker(d.clock)
	if err != nil {
		d.n.log.Warn("no precise alarm; due messages may fire up to a millisecond late", "err", err)
	}
	d.wake = w
	st := d.n.store()
	st.AttachLoader(d.loader)
	if err := d.tick(); err != nil {
		st.DetachLoader()
		d.wake.close()
		return err
	}
	d.wg.Add(3)
	go d.tickLoop()
	go d.fireLoop()
	go d.confirmLoop()
	return nil
}

func (d *dispatcher) stop() {
	d.cancel()
	d.wg.Wait()
	d.wake.close()
	d.n.store().DetachLoader()
	d.mu.Lock()
	defer d.mu.Unlock()
	for topic, ws := range d.waiters {
		for _, w := range ws {
			if !w.done {
				w.done = true
				close(w.ch)
			}
		}
		delete(d.waiters, topic)
	}
}

// reattach follows a store swapped by a snapshot restore.
func (d *dispatcher) reattach(st *wheel.Store) {
	l := wheel.NewLoader()
	st.AttachLoader(l)
	d.mu.Lock()
	d.loader = l
	clear(d.drained) // the loader that reported new ready messages is gone
	d.mu.Unlock()
}

// tick loads the slots about to come due and, once a second (plus the
// grace) has passed, proposes its expiry and the matching promotion.
func (d *dispatcher) tick() error {
	st := d.n.store()
	now := d.clock.Now()
	before := wheel.SecondOf(now.Add(-d.n.cfg.ExpireGrace).UnixMilli())
	if before > st.Cursor() {
		ctx, cancel := context.WithTimeout(d.ctx, d.n.cfg.ApplyTimeout)
		_, err := d.n.propose(ctx, wheel.Expire{Before: before}, wheel.Promote{Before: before + wheel.HorizonSecs})
		cancel()
		if err != nil {
			return fmt.Errorf("expire up to second %d: %w", before, err)
		}
	}
	if _, err := st.LoadThrough(wheel.SecondOf(now.Add(d.n.cfg.Preload).UnixMilli())); err != nil {
		return fmt.Errorf("load slots: %w", err)
	}
	return nil
}

func (d *dispatcher) tickLoop() {
	defer d.wg.Done()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-d.clock.After(100 * time.Millisecond):
		}
		if err := d.tick(); err != nil && d.ctx.Err() == nil {
			d.n.log.Warn("wheel tick", "err", err)
		}
	}
}

// fireLoop wakes at each due millisecond and offers the due messages.
func (d *dispatcher) fireLoop() {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		changed := d.loader.Changed()
		next := d.offerLocked()
		d.mu.Unlock()
		var timer <-chan time.Time
		if next >= 0 {
			timer = d.wake.at(time.UnixMilli(next))
		}
		select {
		case <-d.ctx.Done():
			return
		case <-changed:
		case <-timer:
		}
	}
}

// offerLocked pops the loaded messages due by the clock and hands them, and
// the messages of topics whose ready queue received some, to the waiting
// consumers. It returns the next due instant (-1 when none is loaded).
// Both the fire loop and an arriving reserve call it: whichever runs first
// after a message comes due hands it out.
func (d *dispatcher) offerLocked() int64 {
	msgs, next := d.loader.PopDue(d.clock.Now().UnixMilli())
	topics := d.loader.TakeReadyTopics()
	for _, t := range topics {
		delete(d.drained, t)
	}
	for _, m := range msgs {
		d.due[m.Topic] = append(d.due[m.Topic], m)
		if !slices.Contains(topics, m.Topic) {
			topics = append(topics, m.Topic)
		}
	}
	for _, t := range topics {
		d.serveWaitersLocked(t)
	}
	return next
}

// serveWaitersLocked hands available messages to a topic's waiters, oldest first.
func (d *dispatcher) serveWaitersLocked(topic string) {
	ws := d.waiters[topic]
	for len(ws) > 0 {
		w := ws[0]
		msgs := d.takeLocked(topic, w.max)
		if len(msgs) == 0 {
			break
		}
		w.done = true
		w.ch <- msgs
		ws = ws[1:]
	}
	if len(ws) == 0 {
		delete(d.waiters, topic)
	} else {
		d.waiters[topic] = ws
	}
}

// takeLocked takes up to max deliverable messages of a topic: the ready
// queue first (it holds older, expired slots), then the due list. Taken
// messages are in flight until their Lease applies.
func (d *dispatcher) takeLocked(topic string, max int) []wheel.Message {
	st := d.n.store()
	var out []wheel.Message
	if !d.drained[topic] {
		skipped := false
		views, err := st.Ready(topic, max, func(id wheel.ID) bool {
			_, ok := d.inflight[id]
			skipped = skipped || ok
			return ok
		})
		if err != nil {
			d.n.log.Warn("reading ready queue", "topic", topic, "err", err)
		} else if len(views) < max && !skipped {
			d.drained[topic] = true
		}
		for _, v := range views {
			out = append(out, v.Message)
			d.inflight[v.ID] = struct{}{}
		}
	}
	list := d.due[topic]
	cursor := st.Cursor()
	for len(out) < max && len(list) > 0 {
		m := list[0]
		list = list[1:]
		if !d.loader.Claim(m.ID) {
			continue // acked, cancelled or moved since it was loaded
		}
		if wheel.SecondOf(m.DeliverAtMs) < cursor {
			continue // its slot expired: it is on the ready queue now
		}
		if _, ok := d.inflight[m.ID]; ok {
			continue
		}
		out = append(out, m)
		d.inflight[m.ID] = struct{}{}
	}
	if len(list) == 0 {
		delete(d.due, topic)
	} else {
		d.due[topic] = list
	}
	return out
}

// inFlight reports whether a message is being handed out.
func (d *dispatcher) inFlight(id wheel.ID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.inflight[id]
	return ok
}

// reserve takes up to max due messages of topic, waiting up to wait for the
// first, and leases them.
func (d *dispatcher) reserve(ctx context.Context, topic string, max int, wait, ttr time.Duration) ([]wheel.Delivery, error) {
	max = min(max, d.n.cfg.MaxLeaseBatch) // one hand-off is one Lease entry
	d.mu.Lock()
	d.offerLocked()
	msgs := d.takeLocked(topic, max)
	if len(msgs) > 0 || wait <= 0 {
		d.mu.Unlock()
		return d.handoff(ctx, msgs, ttr)
	}
	w := &waiter{max: max, ch: make(chan []wheel.Message, 1)}
	d.waiters[topic] = append(d.waiters[topic], w)
	d.mu.Unlock()

	select {
	case msgs, ok := <-w.ch:
		if !ok {
			return []wheel.Delivery{}, nil // drained: leadership ended
		}
		return d.handoff(ctx, msgs, ttr)
	case <-ctx.Done():
	case <-d.ctx.Done():
	case <-d.clock.After(wait):
	}
	d.mu.Lock()
	if w.done {
		d.mu.Unlock()
		msgs, ok := <-w.ch
		if !ok {
			return []wheel.Delivery{}, nil
		}
		return d.handoff(ctx, msgs, ttr)
	}
	w.done = true
	ws := d.waiters[topic]
	for i, x := range ws {
		if x == w {
			d.waiters[topic] = append(ws[:i:i], ws[i+1:]...)
			break
		}
	}
	if len(d.waiters[topic]) == 0 {
		delete(d.waiters, topic)
	}
	d.mu.Unlock()
	return []wheel.Delivery{}, nil
}

// backoff is how long after a lease expires an unacked message comes back.
func (d *dispatcher) backoff(attempt int32) int64 {
	b := d.n.cfg.RedeliveryBackoff * time.Duration(attempt)
	return min(b, time.Minute).Milliseconds()
}

// leaseHeld reports whether a quorum confirmed this leader recently enough
// that no other leader can exist yet: within half a heartbeat timeout.
func (d *dispatcher) leaseHeld() bool {
	if d.revoked.Load() {
		return false
	}
	if d.soleVoter() {
		return true
	}
	return d.clock.Now().UnixNano() < d.confirmedNs.Load()+int64(d.n.cfg.HeartbeatTimeout/2)
}

// soleVoter reports whether this node is the only voter of the latest
// configuration: no other node can be elected while it leads.
func (d *dispatcher) soleVoter() bool {
	v, self := d.n.voters()
	return v == 1 && self
}

// confirmed records that a quorum followed this leader at some instant at or
// after start.
func (d *dispatcher) confirmed(start time.Time) {
	ns := start.UnixNano()
	for {
		cur := d.confirmedNs.Load()
		if ns <= cur || d.confirmedNs.CompareAndSwap(cur, ns) {
			return
		}
	}
}

// revokeLease stops answering hand-offs before their commit, for good.
// StepDown calls it before handing leadership over.
func (d *dispatcher) revokeLease() { d.revoked.Store(true) }

// confirmLoop keeps the leadership lease fresh while the log is idle, with
// a round of heartbeats every fifth of a heartbeat timeout.
func (d *dispatcher) confirmLoop() {
	defer d.wg.Done()
	every := max(d.n.cfg.HeartbeatTimeout/5, time.Millisecond)
	for {
		start := d.clock.Now()
		if err := d.n.raft.VerifyLeader().Error(); err == nil {
			d.confirmed(start)
		}
		select {
		case <-d.ctx.Done():
			return
		case <-d.clock.After(every):
		}
	}
}

// handoff leases msgs and returns their deliveries: at once when the Lease
// is in the log order and the leader holds its lease, else once it commits.
func (d *dispatcher) handoff(ctx context.Context, msgs []wheel.Message, ttr time.Duration) ([]wheel.Delivery, error) {
	if len(msgs) == 0 {
		return []wheel.Delivery{}, nil
	}
	now := d.clock.Now().UnixMilli()
	items := make([]wheel.LeaseItem, len(msgs))
	for i, m := range msgs {
		ttrMs := m.TTRMs
		if ttr > 0 {
			ttrMs = ttr.Milliseconds()
		}
		exp := now + max(ttrMs, 1)
		// The redelivery comes due a millisecond after the lease ends at the
		// earliest: at the end instant itself the lease still holds, and a
		// Lease proposed then would be refused.
		items[i] = wheel.LeaseItem{ID: m.ID, Nonce: rand.Uint64() | 1, ExpiresMs: exp, RedeliverMs: exp + max(d.backoff(m.Attempts+1), 1)}
	}
	p, err := d.n.submit(d.ctx, false, wheel.Lease{NowMs: now, Items: items})
	if err != nil {
		d.release(msgs, nil)
		return nil, err
	}
	// The Lease is in the log order now: an ack the consumer sends for what
	// it is answered is ordered after it.
	c := &leaseCommit{p: p, msgs: msgs, res: make(chan leaseRes, 1)}
	go d.finishLease(c)
	if firstHandoffs(msgs) && d.leaseHeld() {
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
		res.err = wheel.ErrNotLeader
	}
	if res.err != nil {
		return nil, res.err
	}
	return d.deliveries(msgs, items, res.ok), nil
}

// deliveries builds the answer for leased messages and observes lateness.
func (d *dispatcher) deliveries(msgs []wheel.Message, items []wheel.LeaseItem, ok []bool) []wheel.Delivery {
	out := make([]wheel.Delivery, 0, len(msgs))
	at := d.clock.Now().UnixMilli()
	for i, m := range msgs {
		if !ok[i] {
			continue
		}
		d.n.met.lateness.Observe(float64(at-m.DeliverAtMs) / 1000)
		m.Attempts++
		m.Receipt = items[i].Nonce
		m.LeaseExpiresMs = items[i].ExpiresMs
		out = append(out, wheel.Delivery{Message: m, Attempt: m.Attempts, Receipt: wheel.Receipt{ID: m.ID, Nonce: items[i].Nonce}})
	}
	return out
}

// release ends the hand-off of msgs: they may be taken again. leased says
// which of them the Lease reserved (nil: none); the others are where they
// were, and their topics' ready queues are read again.
func (d *dispatcher) release(msgs []wheel.Message, leased []bool) {
	d.mu.Lock()
	for i, m := range msgs {
		delete(d.inflight, m.ID)
		if leased == nil || !leased[i] {
			delete(d.drained, m.Topic)
		}
	}
	d.mu.Unlock()
}

// firstHandoffs reports whether none of msgs is the redelivery of an
// expired lease. Only those are answered before their Lease commits: the
// Lease of a message that is not reserved is refused only if a cancel or
// reschedule races it, while a lease redelivery races the consumer's own
// ack, touch or nack of the previous attempt, and must not be handed out
// if one of those wins.
func firstHandoffs(msgs []wheel.Message) bool {
	for _, m := range msgs {
		if m.Receipt != 0 {
			return false
		}
	}
	return true
}

// finishLease waits for a Lease entry to commit, releases its messages and
// answers its hand-off if it is still waiting.
func (d *dispatcher) finishLease(c *leaseCommit) {
	res, err := c.p.wait()
	var ok []bool
	if err == nil {
		d.confirmed(c.p.start)
		if res[0].Err != nil {
			err = res[0].Err
		} else {
			ok, _ = res[0].Value.([]bool)
			if len(ok) != len(c.msgs) {
				err = fmt.Errorf("%w: lease result has %d items, want %d", wheel.ErrUnavailable, len(ok), len(c.msgs))
			}
		}
	}
	if err != nil {
		d.release(c.msgs, nil)
		c.res <- leaseRes{err: err}
		return
	}
	d.release(c.msgs, ok)
	c.res <- leaseRes{ok: ok}
}

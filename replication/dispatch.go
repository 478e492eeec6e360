package replication

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
)

// dispatcher runs on the leader only. It keeps the precision heap loaded a
// little ahead of the cursor, pops each message at its due millisecond,
// hands it to a waiting consumer, and stamps time into the log (Expire and
// Promote) as the cursor moves.
//
// A hand-off is answered to the consumer only once its Lease entry has
// committed. That costs one commit (about one fsync) per batch of
// hand-offs, and buys two things: a deposed leader that has not noticed yet
// (paused, partitioned) can never deliver, because it cannot commit; and a
// receipt a consumer holds is always backed by the log, so failover never
// duplicates a delivery that was answered.
type dispatcher struct {
	n      *Node
	clock  wheel.Clock
	loader *wheel.Loader

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	waiters  map[string][]*waiter
	due      map[string][]wheel.Message // popped from the heap, not handed out yet
	inflight map[wheel.ID]struct{}      // handed out, Lease not yet applied
	leases   chan *leaseReq
}

type waiter struct {
	max  int
	ch   chan []wheel.Message // receives once, buffered
	done bool
}

type leaseReq struct {
	items []wheel.LeaseItem
	now   int64
	res   chan leaseRes
}

type leaseRes struct {
	ok  []bool
	err error
}

func newDispatcher(n *Node) *dispatcher {
	return &dispatcher{
		n: n, clock: n.clock, loader: wheel.NewLoader(),
		waiters: map[string][]*waiter{}, due: map[string][]wheel.Message{},
		inflight: map[wheel.ID]struct{}{}, leases: make(chan *leaseReq, 4096),
	}
}

func (d *dispatcher) start(parent context.Context) error {
	d.ctx, d.cancel = context.WithCancel(parent)
	st := d.n.store()
	st.AttachLoader(d.loader)
	if err := d.tick(); err != nil {
		st.DetachLoader()
		return err
	}
	d.wg.Add(3)
	go d.tickLoop()
	go d.fireLoop()
	go d.leaseLoop()
	return nil
}

func (d *dispatcher) stop() {
	d.cancel()
	d.wg.Wait()
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
	d.loader = wheel.NewLoader()
	st.AttachLoader(d.loader)
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
		changed := d.loader.Changed()
		msgs, next := d.loader.PopDue(d.clock.Now().UnixMilli())
		topics := d.loader.TakeReadyTopics()
		if len(msgs) > 0 || len(topics) > 0 {
			d.mu.Lock()
			for _, m := range msgs {
				d.due[m.Topic] = append(d.due[m.Topic], m)
				topics = append(topics, m.Topic)
			}
			for _, t := range topics {
				d.serveWaitersLocked(t)
			}
			d.mu.Unlock()
		}
		var timer <-chan time.Time
		if next >= 0 {
			timer = d.clock.After(time.UnixMilli(next).Sub(d.clock.Now()))
		}
		select {
		case <-d.ctx.Done():
			return
		case <-changed:
		case <-timer:
		}
	}
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
	views, err := st.Ready(topic, max, func(id wheel.ID) bool { _, ok := d.inflight[id]; return ok })
	if err != nil {
		d.n.log.Warn("reading ready queue", "topic", topic, "err", err)
	}
	for _, v := range views {
		out = append(out, v.Message)
		d.inflight[v.ID] = struct{}{}
	}
	list := d.due[topic]
	cursor := st.Cursor()
	for len(out) < max && len(list) > 0 {
		m := list[0]
		list = list[1:]
		if wheel.SecondOf(m.DeliverAtMs) < cursor {
			continue // its slot expired: it is on the ready queue now
		}
		if _, ok := d.inflight[m.ID]; ok {
			continue
		}
		if s, ok := st.StateOf(m.ID); !ok || (s != wheel.StateDelayed && s != wheel.StateReserved) {
			continue // cancelled or moved since it was loaded
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
	d.mu.Lock()
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

// handoff leases msgs and returns the deliveries whose Lease committed.
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
		items[i] = wheel.LeaseItem{ID: m.ID, Nonce: rand.Uint64() | 1, ExpiresMs: exp, RedeliverMs: exp + d.backoff(m.Attempts+1)}
	}
	req := &leaseReq{items: items, now: now, res: make(chan leaseRes, 1)}
	var res leaseRes
	select {
	case d.leases <- req:
		select {
		case res = <-req.res:
		case <-d.ctx.Done():
			// Leadership ended; if the Lease still commits, the message comes
			// back when that lease expires.
			res.err = wheel.ErrNotLeader
		}
	case <-d.ctx.Done():
		res.err = wheel.ErrNotLeader
	}
	d.mu.Lock()
	for _, m := range msgs {
		delete(d.inflight, m.ID)
	}
	d.mu.Unlock()
	if res.err != nil {
		return nil, res.err
	}
	out := make([]wheel.Delivery, 0, len(msgs))
	committed := d.clock.Now().UnixMilli()
	for i, m := range msgs {
		if !res.ok[i] {
			continue
		}
		d.n.met.lateness.Observe(float64(committed-m.DeliverAtMs) / 1000)
		m.Attempts++
		m.Receipt = items[i].Nonce
		m.LeaseExpiresMs = items[i].ExpiresMs
		out = append(out, wheel.Delivery{Message: m, Attempt: m.Attempts, Receipt: wheel.Receipt{ID: m.ID, Nonce: items[i].Nonce}})
	}
	return out, nil
}

// leaseLoop group-commits hand-offs: everything queued while one Lease entry
// commits goes into the next.
func (d *dispatcher) leaseLoop() {
	defer d.wg.Done()
	for {
		var batch []*leaseReq
		select {
		case <-d.ctx.Done():
			d.drainLeases(wheel.ErrNotLeader)
			return
		case r := <-d.leases:
			batch = append(batch, r)
		}
		n := len(batch[0].items)
	more:
		for n < d.n.cfg.MaxLeaseBatch {
			select {
			case r := <-d.leases:
				batch = append(batch, r)
				n += len(r.items)
			default:
				break more
			}
		}
		cmd := wheel.Lease{NowMs: batch[0].now}
		for _, r := range batch {
			cmd.NowMs = max(cmd.NowMs, r.now)
			cmd.Items = append(cmd.Items, r.items...)
		}
		res, err := d.n.propose(d.ctx, cmd)
		var ok []bool
		if err == nil {
			if res[0].Err != nil {
				err = res[0].Err
			} else {
				ok, _ = res[0].Value.([]bool)
				if len(ok) != len(cmd.Items) {
					err = fmt.Errorf("%w: lease result has %d items, want %d", wheel.ErrUnavailable, len(ok), len(cmd.Items))
				}
			}
		}
		off := 0
		for _, r := range batch {
			if err != nil {
				r.res <- leaseRes{err: err}
				continue
			}
			r.res <- leaseRes{ok: ok[off : off+len(r.items)]}
			off += len(r.items)
		}
	}
}

func (d *dispatcher) drainLeases(err error) {
	for {
		select {
		case r := <-d.leases:
			r.res <- leaseRes{err: err}
		default:
			return
		}
	}
}

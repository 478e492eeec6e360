package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Replica is what the dispatcher needs from the Raft node it runs on.
type Replica interface {
	// Store returns the node's current store. A snapshot restore replaces
	// it; the node then calls Reattach.
	Store() *wheel.Store
	// Propose commits cmds as one log entry and returns their results.
	Propose(ctx context.Context, cmds ...command.Command) ([]command.Result, error)
	// Submit hands cmds to the log as one entry without waiting for the
	// commit. Entries submitted one after another commit in that order,
	// before any entry submitted later. wait blocks until the entry
	// commits and returns its results; it must be called once.
	Submit(ctx context.Context, cmds ...command.Command) (wait func() ([]command.Result, error), err error)
	// SubmitRider is Submit for an entry whose hand-off is answered before
	// it commits: it is in the log order at once, before every entry
	// submitted later, but may reach Raft only with the node's next entry
	// (within a millisecond), so that the two share a write. flush hands
	// it to Raft at once.
	SubmitRider(ctx context.Context, cmds ...command.Command) (wait func() ([]command.Result, error), flush func(), err error)
	// LeaseHeld reports whether the node holds the leadership lease: no
	// other leader can exist yet, so nothing but this node can deliver.
	LeaseHeld() bool
}

// Config is the dispatcher's timing and limits; the node fills it from its own.
type Config struct {
	// Clock is the time the dispatcher fires by (default the system clock).
	Clock wheel.Clock
	// Logger receives the dispatcher's warnings (default: discarded).
	Logger *slog.Logger
	// ExpireGrace is how long after a second ends it expires.
	ExpireGrace time.Duration
	// Preload is how far ahead slots are loaded into the heap.
	Preload time.Duration
	// ApplyTimeout bounds each proposal the tick makes.
	ApplyTimeout time.Duration
	// RedeliveryBackoff times the attempt number is added to a lease's
	// expiry before an unacked message comes back (at most a minute).
	RedeliveryBackoff time.Duration
	// MaxLeaseBatch bounds the messages of one hand-off (one Lease entry).
	MaxLeaseBatch int
	// Lateness, when set, observes each delivery's lateness in seconds
	// (hand-off time minus due time).
	Lateness func(seconds float64)
	// Streamed, when set, counts the deliveries streams take, by topic.
	Streamed func(topic string, n int)
}

// Dispatcher runs on the leader only. It keeps the precision heap loaded a
// little ahead of the cursor, pops each message at its due millisecond,
// hands it to a waiting consumer, and stamps time into the log (Expire and
// Promote) as the cursor moves. See the package documentation for when a
// hand-off is answered.
type Dispatcher struct {
	n      Replica
	cfg    Config
	log    *slog.Logger
	clock  wheel.Clock
	loader *wheel.Loader // replaced under mu by a snapshot restore
	wake   *waker
	// rearm (cap 1) wakes the fire loop to look again at what it waits
	// for: when loader is replaced (it waits on the Changed channel of the
	// loader it read, which the store no longer feeds), or when a message
	// is held back (holdBack), for the end of its lease.
	rearm chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	waiters map[string][]*waiter
	// due holds, by topic, the messages popped from the heap and not
	// handed out yet, of slots that have not expired: an expiry moves a
	// slot's messages to the ready queue, and the tick then drops them
	// here (dropExpiredLocked), so that due holds at most the seconds
	// between the cursor and the clock, however long nobody reserves.
	due map[string][]model.Message
	// dueCursor is the store's cursor when due was last pruned.
	dueCursor int64
	inflight  map[model.ID]struct{} // handed out, Lease not yet applied
	// drained holds the topics whose ready queue held nothing to hand out
	// when last read, and has not received a message since: taking from
	// them skips reading the queue. A topic absent is read.
	drained map[string]bool
	// early holds the Leases answered before they were applied here.
	early map[*leaseCommit]struct{}
	// held holds, by the end of their lease, the messages of hand-offs
	// answered before their Lease entry failed, in flight until then.
	held []heldMsg

	smu     sync.Mutex
	streams map[model.Receipt]*stream // unsettled stream deliveries
	open    int                       // streams running
	running map[*stream]struct{}      // the streams running, for Seal
}

type waiter struct {
	max  int
	ch   chan []model.Message // receives once, buffered
	done bool
}

// New returns a dispatcher for n, not started. Zero Clock and Logger take
// the system clock and a logger that discards.
func New(n Replica, cfg Config) *Dispatcher {
	if cfg.Clock == nil {
		cfg.Clock = wheel.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{
		n: n, cfg: cfg, log: cfg.Logger, clock: cfg.Clock, loader: wheel.NewLoader(),
		waiters: map[string][]*waiter{}, due: map[string][]model.Message{},
		inflight: map[model.ID]struct{}{}, drained: map[string]bool{},
		early: map[*leaseCommit]struct{}{}, streams: map[model.Receipt]*stream{},
		running: map[*stream]struct{}{}, rearm: make(chan struct{}, 1),
	}
}

// Start attaches the dispatcher's loader to the store, runs a first tick
// and starts the tick and fire loops, which run until Stop or until parent
// is done.
func (d *Dispatcher) Start(parent context.Context) error {
	d.ctx, d.cancel = context.WithCancel(parent)
	w, err := newWaker(d.clock)
	if err != nil {
		d.log.Warn("no precise alarm; due messages may fire up to a millisecond late", "err", err)
	}
	d.wake = w
	st := d.n.Store()
	st.AttachLoader(d.loader)
	now := d.clock.Now()
	if err := d.tick(now); err != nil {
		st.DetachLoader()
		d.wake.close()
		d.cancel()
		return err
	}
	d.wg.Add(2)
	go d.tickLoop(now)
	go d.fireLoop()
	return nil
}

// Stop ends the loops, detaches the loader and answers every waiting
// reserve empty.
func (d *Dispatcher) Stop() {
	d.cancel()
	d.wg.Wait()
	d.wake.close()
	d.n.Store().DetachLoader()
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

// Reattach follows a store swapped by a snapshot restore.
func (d *Dispatcher) Reattach(st *wheel.Store) {
	l := wheel.NewLoader()
	st.AttachLoader(l)
	d.mu.Lock()
	d.loader = l
	clear(d.drained) // the loader that reported new ready messages is gone
	d.mu.Unlock()
	signal(d.rearm)
}

// tick loads the slots about to come due by now and, once a second (plus
// the grace) has passed, proposes its expiry and the matching promotion.
func (d *Dispatcher) tick(now time.Time) error {
	st := d.n.Store()
	before := wheel.SecondOf(now.Add(-d.cfg.ExpireGrace).UnixMilli())
	if before > st.Cursor() {
		ctx, cancel := context.WithTimeout(d.ctx, d.cfg.ApplyTimeout)
		_, err := d.n.Propose(ctx, command.Expire{Before: before}, command.Promote{Before: before + wheel.HorizonSecs})
		cancel()
		if err != nil {
			return fmt.Errorf("expire up to second %d: %w", before, err)
		}
	}
	d.mu.Lock()
	if cursor := st.Cursor(); cursor > d.dueCursor {
		d.dropExpiredLocked(cursor)
	}
	d.mu.Unlock()
	if _, err := st.LoadThrough(wheel.SecondOf(now.Add(d.cfg.Preload).UnixMilli())); err != nil {
		return fmt.Errorf("load slots: %w", err)
	}
	return nil
}

// tickEvery is the period of the tick loop.
const tickEvery = 100 * time.Millisecond

// tickLoop ticks once the clock reads a period past the reading the last
// tick (at last) went by, not a period after that tick ended: a clock that
// moved while a tick ran gets its tick at once.
func (d *Dispatcher) tickLoop(last time.Time) {
	defer d.wg.Done()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-d.clock.At(last.Add(tickEvery)):
		}
		last = d.clock.Now()
		if err := d.tick(last); err != nil && d.ctx.Err() == nil {
			d.log.Warn("wheel tick", "err", err)
		}
	}
}

// fireLoop wakes at each due millisecond and offers the due messages.
func (d *Dispatcher) fireLoop() {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		changed := d.loader.Changed()
		next := d.offerLocked()
		d.mu.Unlock()
		var timer, alarm <-chan time.Time
		if next >= 0 {
			timer, alarm = d.wake.at(time.UnixMilli(next))
		}
		select {
		case <-d.ctx.Done():
			return
		case <-changed:
		case <-d.rearm:
		case <-timer:
		case <-alarm:
		}
	}
}

// offerLocked pops the loaded messages due by the clock and hands them, and
// the messages of topics whose ready queue received some, to the waiting
// consumers, as it does the held messages whose lease ended. It returns
// the next due instant or end of a held lease (-1 when there is none).
// Both the fire loop and an arriving reserve call it: whichever runs first
// after a message comes due hands it out.
func (d *Dispatcher) offerLocked() int64 {
	now := d.clock.Now().UnixMilli()
	held := d.releaseHeldLocked(now)
	msgs, next := d.loader.PopDue(now)
	if held >= 0 && (next < 0 || held < next) {
		next = held
	}
	topics := d.loader.TakeReadyTopics()
	for _, t := range topics {
		delete(d.drained, t)
	}
	var spent []model.Receipt
	for _, m := range msgs {
		if m.Receipt != 0 && m.Attempts >= m.MaxAttempts {
			// A last lease ended: the message goes dead now, not when its
			// slot expires.
			spent = append(spent, model.Receipt{ID: m.ID, Nonce: m.Receipt})
			continue
		}
		d.due[m.Topic] = append(d.due[m.Topic], m)
		if !slices.Contains(topics, m.Topic) {
			topics = append(topics, m.Topic)
		}
	}
	for _, t := range topics {
		d.serveWaitersLocked(t)
	}
	if len(spent) > 0 {
		go d.bury(now, spent)
	}
	return next
}

// bury proposes that the messages whose last lease ended go dead. Should
// the proposal fail, the expiry of their slot buries them.
func (d *Dispatcher) bury(nowMs int64, rs []model.Receipt) {
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.ApplyTimeout)
	defer cancel()
	if _, err := d.n.Propose(ctx, command.Bury{NowMs: nowMs, Receipts: rs}); err != nil && d.ctx.Err() == nil {
		d.log.Warn("moving messages out of attempts to the dead letters; their slot's expiry will", "messages", len(rs), "err", err)
	}
}

// serveWaitersLocked hands available messages to a topic's waiters, oldest first.
func (d *Dispatcher) serveWaitersLocked(topic string) {
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

// dropExpiredLocked forgets the due messages of slots before cursor: their
// expiry moved them to the ready queue, which takeLocked reads (and where it
// would skip them itself, but only for a topic someone reserves from).
func (d *Dispatcher) dropExpiredLocked(cursor int64) {
	d.dueCursor = cursor
	for topic, list := range d.due {
		list = slices.DeleteFunc(list, func(m model.Message) bool { return wheel.SecondOf(m.DeliverAtMs) < cursor })
		if len(list) == 0 {
			delete(d.due, topic)
		} else {
			d.due[topic] = list
		}
	}
}

// takeLocked takes up to max deliverable messages of a topic: the ready
// queue first (it holds older, expired slots), then the due list. Taken
// messages are in flight until their Lease applies.
func (d *Dispatcher) takeLocked(topic string, max int) []model.Message {
	st := d.n.Store()
	var out []model.Message
	if !d.drained[topic] {
		skipped := false
		views, err := st.Ready(topic, max, func(id model.ID) bool {
			_, ok := d.inflight[id]
			skipped = skipped || ok
			return ok
		})
		if err != nil {
			d.log.Warn("reading ready queue", "topic", topic, "err", err)
		} else if len(views) < max && !skipped {
			d.drained[topic] = true
		}
		for _, v := range views {
			out = append(out, v.Message)
			d.inflight[v.ID] = struct{}{}
		}
	}
	list := d.due[topic]
	whole := list
	if need := min(max-len(out), len(list)); need > 0 {
		out = slices.Grow(out, need) // grown once for what the list can give
	}
	cursor := st.Cursor()
	var busy []model.Message
	for len(out) < max && len(list) > 0 {
		m := list[0]
		list = list[1:]
		if _, ok := d.inflight[m.ID]; ok {
			// Nacked or released right after a hand-off whose Lease is
			// not applied here yet: it is taken up again once it is
			// (release), and claimed then.
			busy = append(busy, m)
			continue
		}
		if !d.loader.Claim(m.ID) {
			continue // acked, cancelled or moved since it was loaded
		}
		if wheel.SecondOf(m.DeliverAtMs) < cursor {
			continue // its slot expired: it is on the ready queue now
		}
		out = append(out, m)
		d.inflight[m.ID] = struct{}{}
	}
	if len(busy) > 0 {
		list = append(busy, list...)
	}
	switch {
	case len(list) > 0:
		d.due[topic] = list
	case cap(whole) > 0 && cap(whole) <= dueReuse:
		// Emptied: the next messages popped for the topic go into the
		// same array rather than a new one grown from nothing.
		clear(whole)
		d.due[topic] = whole[:0]
	default:
		delete(d.due, topic)
	}
	return out
}

// dueReuse bounds the array of due messages a topic keeps once emptied,
// for the next ones: a burst larger than it is not held on to.
const dueReuse = 1024

// InFlight reports whether a message is being handed out.
func (d *Dispatcher) InFlight(id model.ID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.inflight[id]
	return ok
}

// Reserve takes up to max due messages of topic, waiting up to wait for the
// first, and leases them for ttr (zero: each message's own).
func (d *Dispatcher) Reserve(ctx context.Context, topic string, max int, wait, ttr time.Duration) ([]model.Delivery, error) {
	max = min(max, d.cfg.MaxLeaseBatch) // one hand-off is one Lease entry
	d.mu.Lock()
	d.offerLocked()
	msgs := d.takeLocked(topic, max)
	if len(msgs) > 0 || wait <= 0 {
		d.mu.Unlock()
		return d.handoff(ctx, msgs, ttr)
	}
	w := &waiter{max: max, ch: make(chan []model.Message, 1)}
	d.waiters[topic] = append(d.waiters[topic], w)
	d.mu.Unlock()

	select {
	case msgs, ok := <-w.ch:
		if !ok {
			return []model.Delivery{}, nil // drained: leadership ended
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
			return []model.Delivery{}, nil
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
	return []model.Delivery{}, nil
}

package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// streamWait is how long one of a stream's reserves waits before it asks
// again (it asks again at once; the wait only bounds a waiter's life).
const streamWait = time.Minute

// streamBuffer bounds the deliveries a stream holds that its reader has
// not taken yet, whatever its window: a slow reader stops the stream
// taking more, never the dispatcher.
const streamBuffer = 1024

// sweepEvery is how often a stream whose window is full looks for leases
// that ended without an ack or nack.
const sweepEvery = time.Second

// streamRetry is how long a stream waits before it asks again after a
// reserve failed for a passing cause (back-pressure, a lease that did not
// commit); each further failure doubles it, up to streamRetryMax.
const (
	streamRetry    = 50 * time.Millisecond
	streamRetryMax = 2 * time.Second
)

// releaseBatch bounds the receipts of one release proposal.
const releaseBatch = 10000

// stream is a long-lived consumer of one topic (see model.Consumer). Its
// loop takes deliveries with the same Reserve every long-poll uses, for as
// many as its window and its buffer have room, so a delivery is a
// reserve's hand-off. A delivery leaves the window once its consumer's ack
// or nack is on its way (Settling: read up the stream, or submitted to the
// log) and is forgotten once that ack applied (Settled) or, at the lease's
// end, once the store says it ended, so the stream holds at most its
// window of receipts that nobody settled.
type stream struct {
	d      *Dispatcher
	topic  string
	opt    model.ConsumerOptions
	sender bool // the leader's own (SenderStream)
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	mu       sync.Mutex
	queue    []model.Delivery        // handed out, not read yet
	inflight map[model.Receipt]int64 // unsettled deliveries: lease end
	// settling holds the deliveries whose ack or nack is on its way and
	// not applied yet, out of the window: their lease end. Should that
	// ack fail, the owner's close still releases them (see finish).
	settling map[model.Receipt]int64
	minExp   int64 // no lease in inflight or settling ends before
	err      error // why the stream ended
	ended    bool
	sealed   error // why Seal ended it, set before its cancel

	ready chan struct{} // cap 1: the queue received deliveries, or the stream ended
	room  chan struct{} // cap 1: the window or the buffer has room again
}

var _ model.Consumer = (*stream)(nil)

// Stream opens a streaming consumer of topic. It runs until Close, until
// the dispatcher stops (leadership ended), or until Seal ends it.
func (d *Dispatcher) Stream(topic string, opt model.ConsumerOptions) (model.Consumer, error) {
	return d.stream(topic, opt, false)
}

// SenderStream opens a stream as Stream does, for the leader's own sender
// of a topic's messages (its webhook): Seal spares it.
func (d *Dispatcher) SenderStream(topic string, opt model.ConsumerOptions) (model.Consumer, error) {
	return d.stream(topic, opt, true)
}

// Seal ends the consumers' streams of topic with err, all but the
// senders' (SenderStream), and answers the topic's waiting reserves with
// nothing: its messages go elsewhere now (a webhook).
func (d *Dispatcher) Seal(topic string, err error) {
	var end []*stream
	d.smu.Lock()
	for s := range d.running {
		if s.topic == topic && !s.sender {
			end = append(end, s)
		}
	}
	d.smu.Unlock()
	for _, s := range end {
		s.mu.Lock()
		s.sealed = err
		s.mu.Unlock()
		s.cancel()
	}
	d.mu.Lock()
	for _, w := range d.waiters[topic] {
		if !w.done {
			w.done = true
			close(w.ch)
		}
	}
	delete(d.waiters, topic)
	d.mu.Unlock()
}

func (d *Dispatcher) stream(topic string, opt model.ConsumerOptions, sender bool) (model.Consumer, error) {
	if opt.MaxInflight < 1 {
		return nil, fmt.Errorf("%w: max_inflight must be at least 1, got %d", model.ErrInvalid, opt.MaxInflight)
	}
	if d.ctx == nil || d.ctx.Err() != nil {
		return nil, model.ErrNotLeader
	}
	s := &stream{
		d: d, topic: topic, opt: opt, sender: sender, done: make(chan struct{}),
		inflight: map[model.Receipt]int64{}, settling: map[model.Receipt]int64{}, minExp: -1,
		ready: make(chan struct{}, 1), room: make(chan struct{}, 1),
	}
	s.ctx, s.cancel = context.WithCancel(d.ctx)
	d.smu.Lock()
	d.open++
	d.running[s] = struct{}{}
	d.smu.Unlock()
	go s.run()
	return s, nil
}

// StreamStats returns how many streams run and how many deliveries they
// hold unsettled.
func (d *Dispatcher) StreamStats() (open, unsettled int) {
	d.smu.Lock()
	defer d.smu.Unlock()
	return d.open, len(d.streams)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// run takes deliveries while the window and the buffer have room.
func (s *stream) run() {
	defer close(s.done)
	retry := streamRetry
	for {
		swept := s.d.clock.Now()
		credit := s.credit(swept)
		if credit == 0 {
			// The next sweep is a period past the reading this one went
			// by, not past a later one: a clock that moved meanwhile
			// gets its sweep at once.
			select {
			case <-s.ctx.Done():
				s.finish(nil)
				return
			case <-s.room:
			case <-s.d.clock.At(swept.Add(sweepEvery)):
			}
			continue
		}
		ds, err := s.d.Reserve(s.ctx, s.topic, credit, streamWait, s.opt.TTR)
		s.push(ds) // taken even as the stream closes: released below
		switch {
		case s.ctx.Err() != nil:
			s.finish(nil)
			return
		case errors.Is(err, model.ErrNotLeader) || s.d.ctx.Err() != nil:
			s.finish(err)
			return
		case err != nil:
			// Back-pressure (ErrOverloaded) or a lease that failed to
			// commit: the messages went back, and the stream asks again.
			s.d.log.Debug("stream reserve failed; retrying", "topic", s.topic, "after", retry, "err", err)
			select {
			case <-s.ctx.Done():
				s.finish(nil)
				return
			case <-s.d.clock.After(retry):
			}
			retry = min(2*retry, streamRetryMax)
		default:
			retry = streamRetry
		}
	}
}

// credit sweeps the leases ended by now and returns how many deliveries
// the stream may take.
func (s *stream) credit(now time.Time) int {
	s.sweep(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(s.opt.MaxInflight-len(s.inflight), streamBuffer-len(s.queue))
	return max(n, 0)
}

// push records and queues deliveries.
func (s *stream) push(ds []model.Delivery) {
	if len(ds) == 0 {
		return
	}
	s.d.smu.Lock()
	for _, dl := range ds {
		s.d.streams[dl.Receipt] = s
	}
	s.d.smu.Unlock()
	if s.d.cfg.Streamed != nil {
		s.d.cfg.Streamed(s.topic, len(ds))
	}
	s.mu.Lock()
	for _, dl := range ds {
		s.inflight[dl.Receipt] = dl.LeaseExpiresMs
		if s.minExp < 0 || dl.LeaseExpiresMs < s.minExp {
			s.minExp = dl.LeaseExpiresMs
		}
	}
	if len(s.queue) == 0 {
		s.queue = ds // the caller's to give away: Next hands it on as it is
	} else {
		s.queue = append(s.queue, ds...)
	}
	s.mu.Unlock()
	signal(s.ready)
}

// settle forgets receipts the node saw settled.
func (s *stream) settle(rs []model.Receipt) {
	s.mu.Lock()
	for _, r := range rs {
		delete(s.inflight, r)
		delete(s.settling, r)
	}
	s.mu.Unlock()
	signal(s.room)
}

// Settling takes the receipts of rs this stream handed out out of its
// window: its consumer sent their acks or nacks, which are on their way
// through the log. A consumer that sent an ack holds the delivery no
// more, so the room comes back at once, not once the ack has applied.
// They stay the stream's until Settled, for finish to release should the
// ack fail.
func (s *stream) Settling(rs []model.Receipt) {
	moved := false
	s.mu.Lock()
	for _, r := range rs {
		if exp, ok := s.inflight[r]; ok {
			delete(s.inflight, r)
			s.settling[r] = exp
			moved = true
		}
	}
	s.mu.Unlock()
	if moved {
		signal(s.room)
	}
}

// sweep frees the window of leases that ended unsettled by at. A lease
// touched since it was handed out has its new end read from the store.
func (s *stream) sweep(at time.Time) {
	now := at.UnixMilli()
	s.mu.Lock()
	if s.minExp < 0 || s.minExp >= now {
		s.mu.Unlock()
		return
	}
	var ended []model.Receipt
	for _, held := range []map[model.Receipt]int64{s.inflight, s.settling} {
		for r, exp := range held {
			if exp < now {
				ended = append(ended, r)
			}
		}
	}
	s.mu.Unlock()
	st := s.d.n.Store()
	var gone []model.Receipt
	later := map[model.Receipt]int64{}
	for _, r := range ended {
		v, err := st.Get(r.ID)
		if err == nil && v.State == wheel.StateReserved && v.Receipt == r.Nonce && v.LeaseExpiresMs >= now {
			later[r] = v.LeaseExpiresMs
			continue
		}
		gone = append(gone, r)
	}
	s.forget(gone)
	s.mu.Lock()
	s.minExp = -1
	for _, held := range []map[model.Receipt]int64{s.inflight, s.settling} {
		for r, exp := range later {
			if _, ok := held[r]; ok {
				held[r] = exp
			}
		}
		for _, r := range gone {
			delete(held, r)
		}
		for _, exp := range held {
			if s.minExp < 0 || exp < s.minExp {
				s.minExp = exp
			}
		}
	}
	s.mu.Unlock()
}

// forget stops routing settlements of rs to this stream.
func (s *stream) forget(rs []model.Receipt) {
	s.d.smu.Lock()
	for _, r := range rs {
		if s.d.streams[r] == s {
			delete(s.d.streams, r)
		}
	}
	s.d.smu.Unlock()
}

// finish ends the stream: it releases the unsettled deliveries (while the
// dispatcher still runs; otherwise their leases end on their own) and
// wakes the reader. The settling ones are released only when the stream's
// owner closed it: an owner closes once the acks it read are in the log,
// so a release follows them and finds their leases over, whereas an end
// the dispatcher brings (Seal) may come before acks still on their way,
// and would undo them; those are left to their acks, or to their leases'
// end should the acks fail.
func (s *stream) finish(err error) {
	s.mu.Lock()
	owner := err == nil && s.sealed == nil
	rs := make([]model.Receipt, 0, len(s.inflight)+len(s.settling))
	for r := range s.inflight {
		rs = append(rs, r)
	}
	unsettled := len(rs)
	for r := range s.settling {
		rs = append(rs, r)
	}
	release := rs[:unsettled]
	if owner {
		release = rs
	}
	clear(s.inflight)
	clear(s.settling)
	s.queue = nil
	if err == nil && s.d.ctx.Err() != nil {
		err = model.ErrNotLeader
	}
	if err == nil {
		err = s.sealed
	}
	if err == nil {
		err = errClosed
	}
	s.err, s.ended = err, true
	s.mu.Unlock()
	close(s.ready)
	s.forget(rs)
	s.d.smu.Lock()
	s.d.open--
	delete(s.d.running, s)
	s.d.smu.Unlock()
	if s.d.ctx.Err() == nil {
		s.d.releaseNow(release)
	}
}

// errClosed is what Next returns after Close.
var errClosed = errors.New("stream closed")

// Next implements model.Consumer.
func (s *stream) Next(ctx context.Context) ([]model.Delivery, error) {
	for {
		s.mu.Lock()
		if s.ended {
			err := s.err
			s.mu.Unlock()
			return nil, err
		}
		if len(s.queue) > 0 {
			out := s.live(s.queue)
			s.queue = nil
			s.mu.Unlock()
			signal(s.room)
			if len(out) > 0 {
				return out, nil
			}
			continue
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.ready:
		}
	}
}

// live returns the queued deliveries still leased to the stream: a
// delivery whose lease ended (on the dispatcher's clock) or that was
// settled or swept meanwhile may be someone else's by now. s.mu is held.
func (s *stream) live(ds []model.Delivery) []model.Delivery {
	now := s.d.clock.Now().UnixMilli()
	out := ds[:0]
	for _, dl := range ds {
		if exp, ok := s.inflight[dl.Receipt]; ok && exp >= now {
			out = append(out, dl)
		}
	}
	return out
}

// Close implements model.Consumer.
func (s *stream) Close() {
	s.cancel()
	<-s.done
}

// releaseNow proposes that leased messages come back at once, as a nack
// with no delay would: the attempt they were handed out for counts.
func (d *Dispatcher) releaseNow(rs []model.Receipt) {
	for len(rs) > 0 {
		n := min(len(rs), releaseBatch)
		ctx, cancel := context.WithTimeout(d.ctx, d.cfg.ApplyTimeout)
		_, err := d.n.Propose(ctx, command.Nack{NowMs: d.clock.Now().UnixMilli(), Receipts: rs[:n]})
		cancel()
		if err != nil && d.ctx.Err() == nil {
			d.log.Warn("releasing a closed stream's deliveries; their leases will end on their own", "messages", n, "err", err)
		}
		rs = rs[n:]
	}
}

package beanstalkd

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// reserve answers reserve and reserve-with-timeout: RESERVED, TIMED_OUT
// (also when the client closes its side meanwhile), DEADLINE_SOON when a
// job this connection holds is about to time out, or DRAINING when the
// server shuts down meanwhile.
//
// The timeout of reserve-with-timeout is a deadline, read once on the
// configured clock: each wait lasts until the deadline at most, and the
// reserve answers TIMED_OUT once the clock reads the deadline, whatever
// the work done between the waits and however early they end. A timeout
// of 0 tries once and answers at once; a negative one (NoLimit) waits as
// reserve does.
func (c *conn) reserve(cmd Command) {
	timed := cmd.Op == OpReserveWithTimeout && !cmd.NoLimit
	var deadline time.Time
	if timed {
		deadline = c.s.cfg.Now().Add(time.Duration(cmd.Timeout) * time.Second)
	}
	if !timed || cmd.Timeout != 0 {
		defer c.watchHangup()()
	}
	owed := c.flushLater()
	defer owed()
	c.waiting(1)
	defer c.waiting(-1)
	for {
		now := c.s.cfg.Now()
		soon, holding := c.soonest(now)
		if holding && !soon.After(now.Add(deadlineSoon)) {
			owed()
			c.reply("DEADLINE_SOON")
			return
		}
		until := now.Add(c.s.cfg.MaxWait)
		if timed {
			until = earliest(until, deadline)
		}
		if holding {
			until = earliest(until, soon.Add(-deadlineSoon))
		}
		tubes, pauseEnd := c.reservable(now)
		var (
			d   model.Delivery
			ok  bool
			err error
		)
		if len(tubes) == 0 {
			if !pauseEnd.IsZero() {
				until = earliest(until, pauseEnd)
			}
			c.sleepUntil(until)
		} else {
			d, ok, err = c.reserveAny(c.ctx, tubes, until)
		}
		if c.ctx.Err() != nil && c.hungUp.Load() {
			owed()
			c.lastReserve(tubes, d, ok)
			return
		}
		if c.ctx.Err() != nil {
			if ok {
				c.s.giveBack(d)
			}
			owed()
			c.reply("DRAINING")
			return
		}
		switch {
		case ok:
			owed()
			if c.hold(d) {
				return
			}
			// Nothing to answer yet: what the connection owes goes now.
			c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.CommandTimeout))
			if c.w.Flush() != nil {
				return
			}
			owed = func() {}
			continue
		case errors.Is(err, model.ErrNotLeader), errors.Is(err, model.ErrUnavailable):
			// A leader change: ask again once there is a leader.
			c.s.log.Debug("beanstalkd: reserve waits for a leader", "err", err)
			c.sleepUntil(earliest(until, c.s.cfg.Now().Add(retryPause)))
		case err != nil:
			owed()
			c.fail("reserve", err)
			return
		}
		if timed && !c.s.cfg.Now().Before(deadline) {
			owed()
			c.reply("TIMED_OUT")
			return
		}
	}
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// lastReserve answers the reserve of a client that closed its side while
// it waited, as beanstalkd answers a half-closed connection: with a job
// due now (got, when ok, else one taken now), else TIMED_OUT.
func (c *conn) lastReserve(tubes []string, got model.Delivery, ok bool) {
	if !ok && len(tubes) > 0 {
		ctx, cancel := c.callCtx()
		got, ok, _ = c.reserveAny(ctx, tubes, time.Time{})
		cancel()
	}
	if !ok || !c.hold(got) {
		c.reply("TIMED_OUT")
	}
}

// lateFlush is how long the replies a connection owes when it starts to
// wait for a job (those of the commands it pipelined before the reserve)
// may wait to go out with the reserve's own answer. Invariant: a client
// that pipelines a delete and the next reserve, as a worker that takes
// its next job in the round trip of the last one's delete does, has the
// reserve run while the delete's ack commits (deleteJob, pendingDelete),
// so that it waits for the longer of the two instead of both, one after
// the other; the answers keep the commands' order (DELETED once its ack
// is applied, then RESERVED), and go out in one write when both are ready
// within lateFlush, instead of one write each. An owed reply waits at
// most lateFlush past its own readiness, and a client that waits for it
// before it sends its reserve is not delayed at all (its reserve is not
// read before the reply is flushed).
const lateFlush = 5 * time.Millisecond

// flushLater sends the replies written and not yet sent after lateFlush,
// unless the returned stop is called first. stop returns once such a send
// has ended, so that the connection may write again; calling it again
// does nothing.
func (c *conn) flushLater() (stop func()) {
	if c.w.Buffered() == 0 && c.pending == nil {
		return func() {}
	}
	done := make(chan struct{})
	var failed *pendingDelete // read once done is closed
	t := time.AfterFunc(lateFlush, func() {
		defer close(done)
		failed = c.answerPending()
		c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.CommandTimeout))
		if c.w.Flush() != nil {
			c.stop() // the client is gone: end its wait
		}
	})
	stopped := false
	return func() {
		if stopped {
			return
		}
		stopped = true
		if t.Stop() {
			c.settlePending()
		} else {
			<-done
			c.holdAgain(failed)
		}
	}
}

// retrying runs call again while it fails with ErrNotSent, until ctx
// ends or the server drains.
func retrying[T any](ctx context.Context, c *conn, call func() (T, error)) (T, error) {
	for {
		v, err := call()
		if !errors.Is(err, ErrNotSent) || ctx.Err() != nil || c.ctx.Err() != nil {
			return v, err
		}
		c.sleep(retryPause)
	}
}

// waiting counts this connection among the waiters of its watched tubes.
func (c *conn) waiting(n int) {
	c.s.tubesChange(func(tube func(string) *tubeState) {
		for _, t := range c.watched {
			tube(t).waiting += n
		}
	})
}

// sleep waits d on the configured clock, or until the server drains.
func (c *conn) sleep(d time.Duration) {
	c.sleepUntil(c.s.cfg.Now().Add(d))
}

// sleepUntil waits until the configured clock reads t, or until the
// server drains.
func (c *conn) sleepUntil(t time.Time) {
	if !t.After(c.s.cfg.Now()) {
		return
	}
	select {
	case <-c.s.cfg.At(t):
	case <-c.ctx.Done():
	}
}

// reservable returns the watched tubes that are not paused and, when some
// are, the end of the first pause.
func (c *conn) reservable(now time.Time) (tubes []string, pauseEnd time.Time) {
	for _, t := range c.watched {
		until := c.s.pausedUntil(t)
		if until.After(now) {
			if pauseEnd.IsZero() || until.Before(pauseEnd) {
				pauseEnd = until
			}
			continue
		}
		tubes = append(tubes, t)
	}
	return tubes, pauseEnd
}

// reserveAny takes a due job of one of tubes, waiting until the clock
// reads until (not at all when it does already) while ctx lasts. Over
// several tubes it first takes what is due now, in watch order, then
// waits on every tube at once (each may be in another group, led by
// another node) and keeps the first job; one that another tube handed
// out meanwhile goes back at once.
func (c *conn) reserveAny(ctx context.Context, tubes []string, until time.Time) (model.Delivery, bool, error) {
	if len(tubes) == 1 {
		return c.s.reserveOne(ctx, tubes[0], until)
	}
	for _, t := range tubes {
		if d, ok, err := c.s.reserveOne(ctx, t, time.Time{}); ok || err != nil {
			return d, ok, err
		}
	}
	if !until.After(c.s.cfg.Now()) {
		return model.Delivery{}, false, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		d   model.Delivery
		ok  bool
		err error
	}
	results := make(chan result, len(tubes))
	for _, t := range tubes {
		go func() {
			d, ok, err := c.s.reserveOne(ctx, t, until)
			results <- result{d, ok, err}
		}()
	}
	var got result
	for range tubes {
		r := <-results
		switch {
		case r.ok && got.ok:
			c.s.giveBack(r.d)
		case r.ok:
			got = r
			got.err = nil
			cancel()
		case r.err != nil && !got.ok && got.err == nil && ctx.Err() == nil:
			got.err = r.err
			cancel()
		}
	}
	return got.d, got.ok, got.err
}

// giveBack returns a job reserved that no client will get to ready.
func (s *Server) giveBack(d model.Delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CommandTimeout)
	defer cancel()
	if _, err := s.be.Nack(ctx, d.Receipt, 0); err != nil {
		s.log.Warn("beanstalkd: a job reserved and not handed out could not go back", "id", d.ID.String(), "err", err)
	}
}

// hold answers RESERVED with d and keeps its receipt. A message whose id
// does not pack into a job id (a batch of over 1,024 messages enqueued
// over HTTP or gRPC) cannot be named to the client: it goes to the dead
// letters, where the HTTP API reaches it, and hold returns false.
func (c *conn) hold(d model.Delivery) bool {
	job, ok := JobID(d.ID)
	if !ok {
		ctx, cancel := c.callCtx()
		defer cancel()
		_, err := c.s.be.Bury(ctx, d.Receipt)
		c.s.log.Warn("beanstalkd: a message whose id does not pack into a job id went to the dead letters", "id", d.ID.String(), "topic", d.Topic, "err", err)
		return false
	}
	// The lease a touch renews: its own length, which a reserve that sets
	// no ttr makes the message's time-to-run; a delivery forwarded over
	// HTTP carries neither, but the end of its lease.
	leaseMs := cmp.Or(d.LeaseMs, d.TTRMs, d.LeaseExpiresMs-c.s.cfg.Now().UnixMilli())
	lease := time.Duration(leaseMs) * time.Millisecond
	c.held[job] = heldJob{r: d.Receipt, topic: d.Topic, leaseEnd: time.UnixMilli(d.LeaseExpiresMs), lease: lease}
	c.job("RESERVED", job, d.Body)
	return true
}

// deleteJob answers delete: an ack of a job this connection holds, else a
// cancel of a delayed, ready or buried job (deleteUnheld).
func (c *conn) deleteJob(job uint64) {
	h, ok := c.held[job]
	delete(c.held, job)
	if !ok || !h.leaseEnd.After(c.s.cfg.Now()) { // not held, or its time-to-run ran out
		c.deleteUnheld(job)
		return
	}
	if c.reserveFollows() {
		// Answered before the reserve's own answer (flushLater).
		c.pending = &pendingDelete{ch: c.s.ackAsync(h.r), job: job, h: h}
		return
	}
	done, err := c.s.ack(h.r)
	c.settled("delete", done, err, "DELETED", h.topic)
	if err != nil {
		c.held[job] = h // as holdAgain
	}
}

// deleteUnheld answers delete of a job the connection does not hold: a
// cancel of a delayed, ready or buried job. A job whose time-to-run ran
// out is ready again in beanstalkd, so its delete deletes it (whoever
// reserved it): the node keeps it reserved until its lease's slot fires,
// so it is leased again and acked.
func (c *conn) deleteUnheld(job uint64) {
	ctx, cancel := c.callCtx()
	defer cancel()
	id := MessageID(job)
	v, err := c.s.be.Get(ctx, id)
	if err != nil {
		c.fail("delete", err)
		return
	}
	if v.State == wheel.StateReserved {
		if v.LeaseExpiresMs > c.s.cfg.Now().UnixMilli() {
			c.reply("NOT_FOUND") // another connection holds it
			return
		}
		d, err := retrying(ctx, c, func() (model.Delivery, error) { return c.s.be.ReserveID(ctx, id) })
		if err != nil {
			c.fail("delete", err)
			return
		}
		done, err := c.s.ack(d.Receipt)
		c.settled("delete", done, err, "DELETED", v.Topic)
		return
	}
	if _, err := retrying(ctx, c, func() (bool, error) { return true, c.s.be.Cancel(ctx, id) }); err != nil {
		c.fail("delete", err)
		return
	}
	c.countDelete(v.Topic)
	c.reply("DELETED")
}

// countDelete counts a delete in its tube's stats.
func (c *conn) countDelete(topic string) {
	c.s.tubesChange(func(tube func(string) *tubeState) { tube(topic).deletes++ })
}

// settled answers a call on a held job: word when it took effect,
// NOT_FOUND when the job's lease had ended.
func (c *conn) settled(op string, done bool, err error, word, topic string) {
	switch {
	case err != nil:
		c.fail(op, err)
	case !done:
		c.reply("NOT_FOUND")
	default:
		if op == "delete" {
			c.countDelete(topic)
		}
		c.reply(word)
	}
}

// settle answers release, bury and touch of a job this connection holds.
// The pri of release and bury is not kept: a message's priority is set
// when it is enqueued.
func (c *conn) settle(cmd Command) {
	h, ok := c.held[cmd.ID]
	if !ok {
		c.reply("NOT_FOUND")
		return
	}
	ctx, cancel := c.callCtx()
	defer cancel()
	switch cmd.Op {
	case OpRelease:
		delay := time.Duration(cmd.Delay) * time.Second
		if delay > c.s.cfg.MaxDelay {
			c.reply("BAD_FORMAT")
			return
		}
		delete(c.held, cmd.ID)
		done, err := retrying(ctx, c, func() (bool, error) { return c.s.be.Nack(ctx, h.r, delay.Milliseconds()) })
		c.settled("release", done, err, "RELEASED", h.topic)
	case OpBury:
		delete(c.held, cmd.ID)
		done, err := retrying(ctx, c, func() (bool, error) { return c.s.be.Bury(ctx, h.r) })
		c.settled("bury", done, err, "BURIED", h.topic)
	case OpTouch:
		done, err := retrying(ctx, c, func() (bool, error) { return c.s.be.Touch(ctx, h.r) })
		if err == nil && done {
			h.leaseEnd = c.s.cfg.Now().Add(h.lease)
			c.held[cmd.ID] = h
		} else if err == nil {
			delete(c.held, cmd.ID)
		}
		c.settled("touch", done, err, "TOUCHED", h.topic)
	}
}

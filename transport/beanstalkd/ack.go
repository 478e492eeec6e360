package beanstalkd

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// The deletes of held jobs. Invariant: the deletes of jobs that
// connections hold are acked through at most maxAckCalls Backend.AckEach
// calls in flight per group; the deletes that arrive while those are in
// flight wait and go together as the next call, one log entry that holds
// one ack per delete, instead of one log entry each. Each delete is
// answered DELETED only once that entry is applied and its own ack in it
// took effect (NOT_FOUND when the job's lease had ended), so DELETED
// still means deleted on a majority; a call that fails answers every
// delete in it with the failure, never DELETED. A call whose deletes the
// backend acks each on its own (forwarded to the leader of a group another
// node leads) answers each delete by its own outcome, and makes again only
// those whose ack surely reached no leader. A batch holds at most
// maxAckBatch deletes.
const (
	maxAckCalls = 16
	maxAckBatch = 1024
)

// ackReq is one delete waiting for its ack.
type ackReq struct {
	r  model.Receipt
	ch chan Acked // buffered for the one answer it gets
}

// groupAcks gathers the deletes of one group.
type groupAcks struct {
	s *Server

	mu      sync.Mutex
	pending []ackReq
	calls   int // AckEach calls in flight
}

// ack acks r through the deletes of its group and returns whether it took
// effect.
func (s *Server) ack(r model.Receipt) (bool, error) {
	got := <-s.ackAsync(r)
	return got.Done, got.Err
}

// ackAsync queues r with the deletes of its group; its answer comes on the
// channel returned.
func (s *Server) ackAsync(r model.Receipt) <-chan Acked {
	ch := make(chan Acked, 1)
	s.acksOf(r.ID.Group()).add(ackReq{r: r, ch: ch})
	return ch
}

// pendingDelete is a delete of a held job whose ack is in flight while
// the reserve the client pipelined after it runs.
type pendingDelete struct {
	ch  <-chan Acked
	job uint64
	h   heldJob
}

// reserveFollows tells whether the client has already sent a whole
// reserve or reserve-with-timeout line after the command being answered.
func (c *conn) reserveFollows() bool {
	b, _ := c.r.Peek(c.r.Buffered())
	line, _, ok := bytes.Cut(b, []byte("\n"))
	return ok && (bytes.Equal(line, []byte("reserve\r")) || bytes.HasPrefix(line, []byte("reserve-with-timeout ")))
}

// settlePending waits for the delete in flight, if any, and answers it.
func (c *conn) settlePending() { c.holdAgain(c.answerPending()) }

// answerPending waits for the delete in flight, if any, and answers it. It
// returns the delete when its ack failed: the connection holds its job
// still (holdAgain), which answerPending, run beside the reserve that
// reads what the connection holds (flushLater), must not change itself.
func (c *conn) answerPending() *pendingDelete {
	d := c.pending
	if d == nil {
		return nil
	}
	got := <-d.ch
	c.pending = nil
	c.settled("delete", got.Done, got.Err, "DELETED", d.h.topic)
	if got.Err != nil {
		return d
	}
	return nil
}

// holdAgain keeps holding the job of a delete whose ack failed (nil:
// none), as before its delete: its lease may be running, so the delete
// asked again acks it, and the connection's close releases it.
func (c *conn) holdAgain(d *pendingDelete) {
	if d != nil {
		c.held[d.job] = d.h
	}
}

// acksOf returns the deletes of group g, creating them.
func (s *Server) acksOf(g int) *groupAcks {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.acks[g]
	if !ok {
		a = &groupAcks{s: s}
		s.acks[g] = a
	}
	return a
}

// add queues a delete, and starts a call when fewer than maxAckCalls are
// in flight.
func (a *groupAcks) add(req ackReq) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pending = append(a.pending, req)
	if a.calls < maxAckCalls {
		a.calls++
		go a.run()
	}
}

// run makes calls of the pending deletes until none is left.
func (a *groupAcks) run() {
	for {
		a.mu.Lock()
		if len(a.pending) == 0 {
			a.calls--
			a.mu.Unlock()
			return
		}
		n := min(len(a.pending), maxAckBatch)
		batch := make([]ackReq, n)
		copy(batch, a.pending)
		a.pending = append(a.pending[:0], a.pending[n:]...)
		a.mu.Unlock()
		a.call(batch)
	}
}

// call acks batch as one AckEach and answers each delete in it. The
// deletes whose ack surely reached no leader are acked again, until the
// command timeout.
func (a *groupAcks) call(batch []ackReq) {
	ctx, cancel := context.WithTimeout(context.Background(), a.s.cfg.CommandTimeout)
	defer cancel()
	for {
		res := a.ackEach(ctx, batch)
		again := batch[:0]
		for i, req := range batch {
			if errors.Is(res[i].Err, ErrNotSent) && ctx.Err() == nil && !a.s.draining.Load() {
				again = append(again, req)
				continue
			}
			req.ch <- res[i]
		}
		if len(again) == 0 {
			return
		}
		batch = again
		t := time.NewTimer(retryPause)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// ackEach acks batch as one AckEach and returns each delete's outcome, a
// failure of the whole call as every delete's.
func (a *groupAcks) ackEach(ctx context.Context, batch []ackReq) []Acked {
	rs := make([]model.Receipt, len(batch))
	for i, req := range batch {
		rs[i] = req.r
	}
	res, err := a.s.be.AckEach(ctx, rs)
	if err == nil && len(res) != len(batch) {
		err = errAckCount
	}
	if err != nil {
		res = make([]Acked, len(batch))
		for i := range res {
			res[i].Err = err
		}
	}
	return res
}

// errAckCount means a backend answered AckEach with a count of results
// other than its receipts'.
var errAckCount = errors.New("beanstalkd: acks answered a count of results other than their receipts'")

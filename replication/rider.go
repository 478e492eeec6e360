package replication

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaywheel/delaywheel/wheel/command"
)

// riderWait is the longest an entry rides (riders) before it is handed to
// Raft on its own.
const riderWait = time.Millisecond

// riders holds entries whose answer does not wait for their commit (a
// hand-off answered before its Lease commits) until the node submits its
// next entry, and hands them to Raft just before it, or after riderWait at
// the latest. Invariant: Raft writes and fsyncs the entries queued while
// it wrote the previous batch as one batch, so a rider handed over right
// before the next entry shares its write and its fsync instead of taking
// one of its own; and a rider is in the log order from the moment it is
// queued: every entry submitted after that (an ack of what its hand-off
// delivered, a cancel, the tick's Expire) follows it in the log, because
// each submit that finds riders queued hands them over first, under mu.
// The price is that a rider commits up to riderWait later, which no answer
// waits for.
type riders struct {
	queued atomic.Int32 // riders in q: a submit that sees none does not take mu
	mu     sync.Mutex   // held while riders are handed to Raft
	q      []*rider
	timer  *time.Timer // hands q over after riderWait; armed while q is not empty
}

// rider is one queued entry.
type rider struct {
	ctx   context.Context
	cmds  []command.Command
	ready chan struct{} // closed once handed to Raft (p or err set)
	p     *proposal
	err   error
}

// submitRider queues cmds as one entry that rides with the next entry this
// node submits (riders). The caller has counted it as pending
// (reservePending): a rider is refused before its hand-off is answered,
// not after. wait blocks until the entry is settled and returns its
// results; flush hands it (and every rider before it) to Raft at once.
func (n *Node) submitRider(ctx context.Context, cmds ...command.Command) (wait func() ([]command.Result, error), flush func()) {
	r := &rider{ctx: context.WithoutCancel(ctx), cmds: cmds, ready: make(chan struct{})}
	rs := &n.riders
	rs.mu.Lock()
	rs.q = append(rs.q, r)
	rs.queued.Add(1)
	if len(rs.q) == 1 {
		if rs.timer == nil {
			rs.timer = time.AfterFunc(riderWait, n.flushRiders)
		} else {
			rs.timer.Reset(riderWait)
		}
	}
	rs.mu.Unlock()
	wait = func() ([]command.Result, error) {
		<-r.ready
		if r.err != nil {
			return nil, r.err
		}
		return r.p.result()
	}
	return wait, n.flushRiders
}

// flushRiders hands every queued rider to Raft.
func (n *Node) flushRiders() {
	n.riders.mu.Lock()
	defer n.riders.mu.Unlock()
	n.flushRidersLocked()
}

// flushRidersLocked hands every queued rider to Raft, in the order they
// were queued; the caller holds n.riders.mu.
func (n *Node) flushRidersLocked() {
	rs := &n.riders
	if len(rs.q) == 0 {
		return
	}
	rs.timer.Stop()
	for _, r := range rs.q {
		r.p, r.err = n.submitNow(r.ctx, false, true, r.cmds...)
		close(r.ready)
	}
	clear(rs.q)
	rs.q = rs.q[:0]
	rs.queued.Store(0)
}

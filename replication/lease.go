package replication

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
)

// leadershipLease is the leader's lease on its leadership for one term: it
// is held while a quorum confirmed this leader within half a heartbeat
// timeout. No follower votes for another candidate until it has not heard
// from the leader for a whole heartbeat timeout, so while the lease is held
// no other leader can exist. The only voter of a configuration always
// holds it: no other node can be elected while it leads. The dispatcher
// answers first hand-offs before their commit only while it is held
// (package dispatch).
//
// Confirmations come from two places: a round of heartbeats (VerifyLeader)
// every fifth of a heartbeat timeout while the log is idle, and every
// proposal of the term that commits (its entry reached a quorum at some
// instant after it was submitted).
type leadershipLease struct {
	n     *Node
	clock wheel.Clock
	// verify runs one round of heartbeats: nil when a quorum followed this
	// leader at some instant after the call.
	verify func() error

	// confirmedNs is the latest instant (clock nanoseconds) at which a
	// quorum is known to have followed this leader; revoked turns the lease
	// off for good (leadership is being handed over or has ended).
	confirmedNs atomic.Int64
	revoked     atomic.Bool

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newLeadershipLease(n *Node) *leadershipLease {
	return &leadershipLease{n: n, clock: n.clock, verify: func() error { return n.raft.VerifyLeader().Error() }}
}

// held reports whether a quorum confirmed this leader recently enough that
// no other leader can exist yet.
func (l *leadershipLease) held() bool {
	if l == nil || l.revoked.Load() {
		return false
	}
	if l.soleVoter() {
		return true
	}
	return l.clock.Now().UnixNano() < l.confirmedNs.Load()+int64(l.n.cfg.HeartbeatTimeout/2)
}

// soleVoter reports whether this node is the only voter of the latest
// configuration.
func (l *leadershipLease) soleVoter() bool {
	v, self := l.n.voters()
	return v == 1 && self
}

// confirmed records that a quorum followed this leader at some instant at
// or after start.
func (l *leadershipLease) confirmed(start time.Time) {
	if l == nil {
		return
	}
	ns := start.UnixNano()
	for {
		cur := l.confirmedNs.Load()
		if ns <= cur || l.confirmedNs.CompareAndSwap(cur, ns) {
			return
		}
	}
}

// revoke stops the lease for good.
func (l *leadershipLease) revoke() {
	if l != nil {
		l.revoked.Store(true)
	}
}

// start runs the confirmation loop until stop or until parent is done.
func (l *leadershipLease) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	l.cancel = cancel
	l.wg.Add(1)
	go l.confirmLoop(ctx)
}

// stop revokes the lease and ends the confirmation loop.
func (l *leadershipLease) stop() {
	l.revoke()
	if l.cancel != nil {
		l.cancel()
	}
	l.wg.Wait()
}

// confirmLoop keeps the lease fresh while the log is idle, with a round of
// heartbeats every fifth of a heartbeat timeout. Rounds start at multiples
// of that period from the loop's start: a slow round delays no later one,
// and one that outlasts the period skips the instants it ran past rather
// than running rounds back to back to catch up.
func (l *leadershipLease) confirmLoop(ctx context.Context) {
	defer l.wg.Done()
	every := max(l.n.cfg.HeartbeatTimeout/5, time.Millisecond)
	origin := l.clock.Now()
	for slot := int64(0); ; {
		start := l.clock.Now()
		if err := l.verify(); err == nil {
			l.confirmed(start)
		}
		slot++
		if past := l.clock.Now().Sub(origin); past > time.Duration(slot)*every {
			slot = int64((past + every - 1) / every) // the first instant not yet past
		}
		select {
		case <-ctx.Done():
			return
		case <-l.clock.At(origin.Add(time.Duration(slot) * every)):
		}
	}
}

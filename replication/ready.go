package replication

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// DefaultReadyMaxLag is Config.ReadyMaxLag's default: a node that has
// caught up stays ready while it trails the leader's commit index by at
// most this many log entries. It is far above what a follower keeping up
// trails by under load (a few batches in flight), and far below a backlog.
const DefaultReadyMaxLag = 1000

// ErrStopping is what Ready answers once the node is shutting down.
var ErrStopping = errors.New("this node is shutting down")

// commitWatch is the Raft transport as Raft sees it: it passes every RPC
// on, and records the highest commit index the leader's AppendEntries
// carry. A follower's own commit index never passes its last log entry,
// so only these tell it how far behind the leader it is. (Heartbeats carry
// no commit index, but the leader sends an AppendEntries to each follower
// at least every CommitTimeout, entries or not.)
type commitWatch struct {
	*raft.NetworkTransport
	ch   chan raft.RPC
	stop chan struct{}
	done chan struct{}
	// first is the first commit index learned since the node started,
	// latest the highest.
	first, latest atomic.Uint64
}

func newCommitWatch(t *raft.NetworkTransport) *commitWatch {
	w := &commitWatch{NetworkTransport: t, ch: make(chan raft.RPC), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// Consumer is the channel Raft takes its RPCs from.
func (w *commitWatch) Consumer() <-chan raft.RPC { return w.ch }

func (w *commitWatch) run() {
	defer close(w.done)
	in := w.NetworkTransport.Consumer()
	for {
		select {
		case <-w.stop:
			return
		case rpc := <-in:
			if a, ok := rpc.Command.(*raft.AppendEntriesRequest); ok {
				w.learned(a.LeaderCommitIndex)
			}
			select {
			case w.ch <- rpc:
			case <-w.stop:
				rpc.Respond(nil, raft.ErrRaftShutdown)
				return
			}
		}
	}
}

// learned records a commit index a leader sent.
func (w *commitWatch) learned(index uint64) {
	if index == 0 {
		return
	}
	w.first.CompareAndSwap(0, index)
	for {
		cur := w.latest.Load()
		if index <= cur || w.latest.CompareAndSwap(cur, index) {
			return
		}
	}
}

// close stops passing RPCs on, once Raft no longer takes them.
func (w *commitWatch) close() {
	close(w.stop)
	<-w.done
}

// readiness is what Ready remembers: whether this node has caught up
// once since it started, and whether it is shutting down.
type readiness struct {
	caughtUp atomic.Bool
	stopping atomic.Bool
}

// Ready returns nil when this node should take client traffic, as Consul,
// NATS and etcd define it, or says why not:
//   - it is a member (not removed) and is not shutting down (Stopping);
//   - it knows a leader, and, leading, runs its dispatcher (which starts
//     once the log of earlier terms is applied);
//   - it has caught up once since it started: a follower has applied the
//     first commit index the leader sent it (so not while it works
//     through a backlog after a restart, from the log or a snapshot);
//   - since then, it trails the leader's commit index (as the leader last
//     sent it, or its own while leading) by at most ReadyMaxLag entries,
//     so that entries in flight do not make it flap.
func (n *Node) Ready() error {
	switch {
	case n.removed.Load():
		return ErrRemoved
	case n.ready.stopping.Load():
		return ErrStopping
	}
	if err := n.noLeader(); err != nil {
		return err
	}
	applied, own := n.Indexes()
	commit := own
	if n.raft.State() == raft.Leader {
		if n.dispatcher() == nil {
			return errors.New("elected leader, still applying the log before serving")
		}
		n.ready.caughtUp.Store(true)
	} else {
		commit = max(commit, n.watch.latest.Load())
		if !n.ready.caughtUp.Load() {
			first := n.watch.first.Load()
			if first == 0 {
				return errors.New("catching up: no commit index heard from the leader yet")
			}
			if applied < first {
				return fmt.Errorf("catching up: applied %d of the leader's commit index %d", applied, first)
			}
			n.ready.caughtUp.Store(true)
		}
	}
	if lag := commit - min(commit, applied); lag > n.cfg.ReadyMaxLag {
		return fmt.Errorf("lagging: applied %d, %d entries behind the commit index %d (at most %d allowed)", applied, lag, commit, n.cfg.ReadyMaxLag)
	}
	return nil
}

// LeaderCommit returns the highest commit index this node knows the
// leader to have: its own while it leads, else the one the leader last
// sent (0 before it sent any).
func (n *Node) LeaderCommit() uint64 {
	_, own := n.Indexes()
	if n.raft.State() == raft.Leader {
		return own
	}
	return max(own, n.watch.latest.Load())
}

// Stopping marks this node as shutting down: Ready says so from here on.
// Shutdown calls it first, so that load balancers drain the node while it
// hands its leadership over.
func (n *Node) Stopping() { n.ready.stopping.Store(true) }

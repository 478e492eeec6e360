package replication

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/replication/dispatch"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// watchLeadership starts the dispatcher when this node becomes leader and
// stops it when it loses leadership.
func (n *Node) watchLeadership(ctx context.Context) {
	defer n.wg.Done()
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		_, ok2 := o.Data.(raft.RaftState)
		return ok || ok2
	})
	n.raft.RegisterObserver(obs)
	defer n.raft.DeregisterObserver(obs)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastLeader := ""
	for {
		isLeader := n.raft.State() == raft.Leader
		n.mu.Lock()
		running := n.disp != nil
		n.mu.Unlock()
		if isLeader && !running {
			n.solo.refresh(ctx, n.raft)
			n.startDispatcher(ctx)
		} else if !isLeader && running {
			n.stopDispatcher()
		}
		if _, id := n.raft.LeaderWithID(); string(id) != lastLeader {
			lastLeader = string(id)
			n.log.Info("leader changed", "leader", lastLeader, "term", n.raft.CurrentTerm())
		}
		select {
		case <-ctx.Done():
			n.stopDispatcher()
			return
		case <-ch:
		case <-tick.C:
		}
	}
}

func (n *Node) startDispatcher(ctx context.Context) {
	// The FSM must have applied everything a previous leader committed
	// before the heap is built from it.
	if err := n.raft.Barrier(n.cfg.ApplyTimeout).Error(); err != nil {
		n.log.Warn("barrier after election failed", "err", err)
		return
	}
	lease := newLeadershipLease(n)
	n.lease.Store(lease)
	lease.start(ctx)
	d := dispatch.New(dispatchReplica{n}, dispatch.Config{
		Clock: n.clock, Logger: n.log,
		ExpireGrace: n.cfg.ExpireGrace, Preload: n.cfg.Preload, ApplyTimeout: n.cfg.ApplyTimeout,
		RedeliveryBackoff: n.cfg.RedeliveryBackoff, MaxLeaseBatch: n.cfg.MaxLeaseBatch,
		Lateness: n.met.lateness.Observe,
		Streamed: func(topic string, k int) { n.met.streamed.WithLabelValues(topic).Add(float64(k)) },
	})
	if err := d.Start(ctx); err != nil {
		n.lease.CompareAndSwap(lease, nil)
		lease.stop()
		n.log.Error("starting dispatcher", "err", err)
		return
	}
	n.mu.Lock()
	n.disp = d
	n.mu.Unlock()
	n.startWebhooks(d, n.storedWebhooks)
	n.log.Info("leading: dispatcher started", "cursor", n.store().Cursor())
	n.startScheduler(ctx)
	go n.registerSelf(ctx)
}

func (n *Node) stopDispatcher() {
	n.stopScheduler()
	n.mu.Lock()
	d := n.disp
	n.disp = nil
	hooks := n.hooks
	n.hooks = nil
	n.mu.Unlock()
	if hooks != nil {
		hooks.Stop()
	}
	if d != nil {
		d.Stop()
		n.log.Info("dispatcher stopped")
	}
	if l := n.lease.Swap(nil); l != nil {
		l.stop()
	}
}

// registerSelf records the leader's own addresses (HTTP, gRPC) in the
// replicated node metadata, so followers can forward to it.
func (n *Node) registerSelf(ctx context.Context) {
	self := n.cfg.Self()
	if m, ok := n.store().Node(self.ID); ok && m == self {
		return
	}
	if _, err := n.propose(ctx, command.SetNode{Node: self}); err != nil {
		n.log.Warn("recording own address", "err", err)
	}
}

func (n *Node) onRestore(st *wheel.Store) {
	n.mu.Lock()
	d := n.disp
	n.mu.Unlock()
	if d != nil {
		d.Reattach(st)
		n.reconcileWebhooks()
	}
}

// StepDown hands leadership to a follower (when there is one) and stops
// the dispatcher, so waiting long-polls answer empty. Shutdown calls it
// before closing the HTTP server.
func (n *Node) StepDown() {
	// The follower taking over is elected at once, so hand-offs from here
	// on are answered only once their Lease commits.
	n.beforeTransfer(n.lease.Load())
	if n.raft.State() == raft.Leader && n.multiVoter() {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			n.log.Warn("leadership transfer failed", "err", err)
		} else {
			n.log.Info("leadership transferred")
		}
	}
	n.stopDispatcher()
}

// beforeTransfer readies the leader for a transfer of its leadership, as
// l's holder: it revokes l, so that hand-offs from here on are answered
// only once their Lease commits, and hands the Leases of those answered
// before to Raft now, while this node leads (riders).
func (n *Node) beforeTransfer(l *leadershipLease) {
	l.revoke()
	n.flushRiders()
}

// dispatchReplica is the node as its dispatcher sees it (dispatch.Replica).
type dispatchReplica struct{ n *Node }

var _ dispatch.Replica = dispatchReplica{}

func (a dispatchReplica) Store() *wheel.Store { return a.n.store() }

func (a dispatchReplica) Propose(ctx context.Context, cmds ...command.Command) ([]command.Result, error) {
	return a.n.propose(ctx, cmds...)
}

func (a dispatchReplica) Submit(ctx context.Context, cmds ...command.Command) (func() ([]command.Result, error), error) {
	p, err := a.n.submit(ctx, false, cmds...)
	if err != nil {
		return nil, err
	}
	return p.result, nil
}

func (a dispatchReplica) SubmitRider(ctx context.Context, cmds ...command.Command) (func() ([]command.Result, error), func(), error) {
	// Refused now, as Submit refuses it, not after its hand-off is
	// answered.
	n := a.n
	if n.raft.State() != raft.Leader {
		return nil, nil, model.ErrNotLeader
	}
	if err := n.reservePending(); err != nil {
		return nil, nil, err
	}
	wait, flush := n.submitRider(ctx, cmds...)
	return wait, flush, nil
}

func (a dispatchReplica) LeaseHeld() bool { return a.n.lease.Load().held() }

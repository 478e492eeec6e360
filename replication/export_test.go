package replication

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaywheel/delaywheel/replication/dispatch"
	"github.com/delaywheel/delaywheel/replication/webhook"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
)

// This file, compiled only with the tests, exports to package
// replication_test the internals its tests check on the nodes that
// replication/repltest starts: the kit imports this package, so the tests
// that use it cannot be in it. Each name is the internal one, capitalised.

// The backup archive's and the data dir's names.
const (
	GroupsFile         = groupsFile
	GroupsManifestName = groupsManifestName
	TarBlock           = tarBlock
)

// The backup archive's and the data dir's functions.
var (
	GroupEntryName   = groupEntryName
	IsGroupsArchive  = isGroupsArchive
	StoredGroupCount = storedGroupCount
)

// SetBeforeApply sets cfg's hook run on Raft's FSM goroutine before each
// batch of committed entries is applied.
func SetBeforeApply(cfg *Config, f func([]*raft.Log)) { cfg.beforeApply = f }

// Cfg is n's configuration, defaults set.
func (n *Node) Cfg() Config { return n.cfg }

// Clock is n's clock.
func (n *Node) Clock() wheel.Clock { return n.clock }

// Trans is n's Raft transport.
func (n *Node) Trans() *raft.NetworkTransport { return n.trans }

// Ents is n's log as Raft sees it.
func (n *Node) Ents() raft.LogStore { return n.ents }

// Pending is n's count of proposals in flight.
func (n *Node) Pending() *atomic.Int64 { return &n.pending }

// Solo reports whether n's log store knows n to be the only voter.
func (n *Node) Solo() bool { return n.solo.solo() }

// Answered is n's histogram of the enqueues answered at commit.
func (n *Node) Answered() prometheus.Histogram { return n.met.answered }

// SubmitWait proposes cmds, not watched, and waits for their results.
func (n *Node) SubmitWait(ctx context.Context, cmds ...command.Command) ([]command.Result, error) {
	p, err := n.submit(ctx, false, cmds...)
	if err != nil {
		return nil, err
	}
	return p.wait(ctx)
}

// TakeWebhooks takes the leader n's webhook sender away (n has none after)
// and returns it with n's dispatcher.
func (n *Node) TakeWebhooks() (*dispatch.Dispatcher, *webhook.Sender) {
	n.mu.Lock()
	defer n.mu.Unlock()
	d, old := n.disp, n.hooks
	n.hooks = nil
	return d, old
}

// StartWebhooks is startWebhooks.
func (n *Node) StartWebhooks(d *dispatch.Dispatcher, current func() []command.Webhook) {
	n.startWebhooks(d, current)
}

// StoredWebhooks is storedWebhooks.
func (n *Node) StoredWebhooks() []command.Webhook { return n.storedWebhooks() }

// Result is result.
func (n *Node) Result(ctx context.Context, cmd command.Command) (any, error) {
	return n.result(ctx, cmd)
}

// Sender is sender.
func (n *Node) Sender() *webhook.Sender { return n.sender() }

// LeadershipLease is n's leadership lease, never started.
type LeadershipLease struct{ l *leadershipLease }

// NewLeadershipLease is newLeadershipLease.
func NewLeadershipLease(n *Node) LeadershipLease { return LeadershipLease{newLeadershipLease(n)} }

// Held is held.
func (l LeadershipLease) Held() bool { return l.l.held() }

// Revoke is revoke.
func (l LeadershipLease) Revoke() { l.l.revoke() }

// Confirmed is confirmed.
func (l LeadershipLease) Confirmed(start time.Time) { l.l.confirmed(start) }

// SoloVoter is a soloVoter.
type SoloVoter struct{ s *soloVoter }

// NewSoloVoter returns the soloVoter of the node named self.
func NewSoloVoter(self string) SoloVoter { return SoloVoter{&soloVoter{self: raft.ServerID(self)}} }

// Refresh is refresh.
func (s SoloVoter) Refresh(ctx context.Context, r *raft.Raft) { s.s.refresh(ctx, r) }

// Solo is solo.
func (s SoloVoter) Solo() bool { return s.s.solo() }

// Stored is stored.
func (s SoloVoter) Stored(l *raft.Log) { s.s.stored(l) }

// Test helpers of this package's own tests.
var (
	ConfigLog           = configLog
	StoreOccurrenceKeys = storeOccurrenceKeys
)

// FirstCommit is the leader's commit index n first heard of since it
// started, 0 before it does.
func (n *Node) FirstCommit() uint64 { return n.watch.first.Load() }

// NoLeader is noLeader.
func (n *Node) NoLeader() error { return n.noLeader() }

// TransferLeadership is transferLeadership to the voter id at addr.
func (n *Node) TransferLeadership(ctx context.Context, id, addr string) error {
	return n.transferLeadership(ctx, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr)})
}

// CurrentLease is n's leadership lease of this term (nil inside when n
// does not lead).
func (n *Node) CurrentLease() LeadershipLease { return LeadershipLease{n.lease.Load()} }

// Same reports whether l and o are the same lease.
func (l LeadershipLease) Same(o LeadershipLease) bool { return l.l == o.l }

// Ended returns a channel closed once the lease's confirmation loop ended.
func (l LeadershipLease) Ended() <-chan struct{} {
	ch := make(chan struct{})
	go func() { l.l.wg.Wait(); close(ch) }()
	return ch
}

// SubmitRider is submitRider.
func (n *Node) SubmitRider(ctx context.Context, cmds ...command.Command) (wait func() ([]command.Result, error), flush func()) {
	return n.submitRider(ctx, cmds...)
}

// DispatchReplica is n as its dispatcher sees it.
func (n *Node) DispatchReplica() dispatch.Replica { return dispatchReplica{n} }

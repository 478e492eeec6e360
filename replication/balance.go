package replication

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/wheel"
)

// The leadership balancer spreads the leaderships of a node's groups over
// the voters: group g's preferred leader is the voter at g modulo their
// count in the configuration sorted by id, so with N groups and V voters
// each voter is preferred by N/V of them. Every node runs it for the groups
// it leads and hands a group's leadership to its preferred voter once that
// voter's heartbeats have been answered for a settle window: a voter that
// just returned has had time to catch up, and Raft's transfer replicates
// whatever is missing before the hand-over (or gives up after an election
// timeout). Nothing else chooses leaders: elections pick any voter, and
// the balancer moves leaderships back once their preferred voters answer.

// BalanceTiming is the leadership balancer's timing; a zero field takes
// defaultBalanceTiming's.
type BalanceTiming struct {
	// Every is how often the balancer looks at the groups it leads.
	Every time.Duration
	// Settle is how long a preferred voter must have answered every
	// heartbeat before leadership moves to it: longer than an RPC timeout,
	// so that a voter that does not answer is seen failing first.
	Settle time.Duration
	// Retry is the least time between two transfers of one group, so a
	// transfer that fails (a voter that cannot catch up) is not retried
	// at once, and a group's leadership never flaps.
	Retry time.Duration
}

func defaultBalanceTiming() BalanceTiming {
	return BalanceTiming{Every: time.Second, Settle: rpcTimeout + time.Second, Retry: 5 * time.Second}
}

// withDefaults fills the fields left zero.
func (b BalanceTiming) withDefaults() BalanceTiming {
	d := defaultBalanceTiming()
	b.Every = cmp.Or(b.Every, d.Every)
	b.Settle = cmp.Or(b.Settle, d.Settle)
	b.Retry = cmp.Or(b.Retry, d.Retry)
	return b
}

// balancer runs the balancing loop over one node's groups.
type balancer struct {
	nodes  []*Node
	timing BalanceTiming
	clock  wheel.Clock
	log    *slog.Logger

	mu       sync.Mutex
	inFlight []bool      // by group: a transfer is under way
	last     []time.Time // by group: when the last transfer started
	wg       sync.WaitGroup
}

func newBalancer(nodes []*Node, timing BalanceTiming, clock wheel.Clock, log *slog.Logger) *balancer {
	return &balancer{nodes: nodes, timing: timing.withDefaults(), clock: clock, log: log,
		inFlight: make([]bool, len(nodes)), last: make([]time.Time, len(nodes))}
}

// run balances every timing.Every until ctx is done, then waits for the
// transfers under way.
func (b *balancer) run(ctx context.Context) {
	defer b.wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.clock.After(b.timing.Every):
		}
		b.step(ctx)
	}
}

// step starts a transfer for each group this node leads whose preferred
// voter is another one, answering, and not moved too recently.
func (b *balancer) step(ctx context.Context) {
	now := b.clock.Now()
	for g, n := range b.nodes {
		if n.raft.State() != raft.Leader {
			continue
		}
		b.mu.Lock()
		busy := b.inFlight[g] || (!b.last[g].IsZero() && now.Sub(b.last[g]) < b.timing.Retry)
		b.mu.Unlock()
		if busy {
			continue
		}
		f := n.raft.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		to, ok := preferredLeader(f.Configuration(), g)
		if !ok || string(to.ID) == n.cfg.ID {
			continue
		}
		since, answering := n.peers.answeringSince(to.ID)
		if !answering || now.Sub(since) < b.timing.Settle {
			continue
		}
		b.mu.Lock()
		b.inFlight[g], b.last[g] = true, now
		b.mu.Unlock()
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer func() {
				b.mu.Lock()
				b.inFlight[g] = false
				b.mu.Unlock()
			}()
			b.log.Info("moving a group's leadership to its preferred voter", "group", g, "to", string(to.ID))
			if err := n.transferLeadership(ctx, to); err != nil && ctx.Err() == nil {
				b.log.Warn("moving a group's leadership failed; it stays here for now", "group", g, "to", string(to.ID), "err", err)
			}
		}()
	}
}

// preferredLeader is the voter that leads group g when every voter
// answers: the one at g modulo the voters' count, sorted by id.
func preferredLeader(c raft.Configuration, g int) (raft.Server, bool) {
	var voters []raft.Server
	for _, s := range c.Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, s)
		}
	}
	if len(voters) == 0 {
		return raft.Server{}, false
	}
	slices.SortFunc(voters, func(a, b raft.Server) int { return cmp.Compare(a.ID, b.ID) })
	return voters[g%len(voters)], true
}

// transferLeadership hands this node's leadership to voter to. The
// leadership lease is revoked first: the voters elect the target at once,
// without waiting for this leader's heartbeats to stop. When the transfer
// fails, a fresh lease starts only once the target can no longer win the
// election it may have been told to start (the request, bounded by an RPC
// timeout, and that election, by an election timeout), and only if this
// node still leads the same term.
func (n *Node) transferLeadership(ctx context.Context, to raft.Server) error {
	n.mu.Lock()
	closed := n.closed
	n.mu.Unlock()
	if closed || n.raft.State() != raft.Leader {
		return nil
	}
	term := n.raft.CurrentTerm()
	old := n.lease.Load()
	n.beforeTransfer(old)
	err := n.raft.LeadershipTransferToServer(to.ID, to.Address).Error()
	if err == nil || old == nil {
		return err
	}
	select {
	case <-ctx.Done():
		return err
	case <-n.clock.After(rpcTimeout + n.cfg.ElectionTimeout):
	}
	if n.raft.State() != raft.Leader || n.raft.CurrentTerm() != term {
		return err
	}
	fresh := newLeadershipLease(n)
	fresh.start(ctx)
	if n.lease.CompareAndSwap(old, fresh) {
		old.stop() // revoked for good: its confirmation loop would run until the node closes
	} else {
		fresh.stop() // leadership ended meanwhile, or a new term started its own
	}
	return err
}

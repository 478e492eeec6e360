package replication_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

// heldCluster starts three nodes on a fake clock (so that no leader
// proposes expiries of its own) whose state machines a test can hold,
// with the given ReadyMaxLag, and waits until every member's addresses
// are recorded.
func heldCluster(t *testing.T, maxLag uint64) (*repltest.Cluster, map[string]*applyHold) {
	t.Helper()
	holds := map[string]*applyHold{}
	clock := wheeltest.NewFakeClock(time.Now())
	c := repltest.NewCluster(t, 3, func(cfg *Config) {
		cfg.Clock = clock
		cfg.ReadyMaxLag = maxLag
		if holds[cfg.ID] == nil {
			holds[cfg.ID] = &applyHold{}
		}
		SetBeforeApply(cfg, holds[cfg.ID].wait)
	})
	nettest.WaitFor(t, nettest.Patience, "every node's address to be recorded", func() bool {
		for _, tn := range c.Nodes {
			if tn.Node != nil && !tn.Node.HasSelf() {
				return false
			}
		}
		return true
	})
	return c, holds
}

// enqueueOne proposes one entry on the leader.
func enqueueOne(t *testing.T, leader *Node) {
	t.Helper()
	if _, err := leader.Enqueue(context.Background(), []command.NewMessage{{Topic: "t", Body: []byte("x"), DeliverAtMs: -5}}); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
}

// wantNotReady fails unless err is a refusal that says want.
func wantNotReady(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Ready() = %v, want an error saying %q", err, want)
	}
}

// A follower that has caught up stays ready while entries are in flight
// to its state machine, up to ReadyMaxLag of them; past that it is not
// ready, and it is again once it catches up.
func TestReadyToleratesLagUpToBound(t *testing.T) {
	const maxLag = 3
	c, holds := heldCluster(t, maxLag)
	leader, f := c.Leader().Node, c.Follower().Node
	nettest.WaitFor(t, nettest.Patience, "the follower to be ready", func() bool { return f.Ready() == nil })

	mark := f.Raft().LastIndex()
	release := holds[f.Cfg().ID].after(mark)
	defer release()
	nettest.WaitFor(t, nettest.Patience, "the entries logged before the hold to apply", func() bool {
		a, _ := f.Indexes()
		return a >= mark
	})
	applied, _ := f.Indexes()
	enqueueOne(t, leader)
	nettest.WaitFor(t, nettest.Patience, "the follower to learn a commit index past what it applied", func() bool {
		return f.LeaderCommit() > applied
	})
	if err := f.Ready(); err != nil {
		t.Fatalf("one entry in flight: Ready() = %v, want ready", err)
	}
	for range maxLag {
		enqueueOne(t, leader)
	}
	nettest.WaitFor(t, nettest.Patience, "the follower to learn it trails by more than the bound", func() bool {
		return f.LeaderCommit() > applied+maxLag
	})
	if a, _ := f.Indexes(); a != applied {
		t.Fatalf("the held follower applied %d, was %d: the test holds nothing", a, applied)
	}
	wantNotReady(t, f.Ready(), "entries behind the commit index")
	release()
	nettest.WaitFor(t, nettest.Patience, "the follower to be ready once caught up", func() bool { return f.Ready() == nil })
}

// A follower restarted behind a backlog is not ready until it has applied
// the commit index the leader first sent it, even when the backlog is
// well within ReadyMaxLag; nor is a node shutting down.
func TestReadyAfterRestartWaitsForCatchUp(t *testing.T) {
	c, holds := heldCluster(t, 1000)
	i := slices.IndexFunc(c.Nodes, func(tn *repltest.Member) bool { return !tn.Node.IsLeader() })
	c.Stop(i)
	leader := c.Leader().Node
	for range 5 {
		enqueueOne(t, leader)
	}
	hold := holds[c.Nodes[i].Cfg.ID]
	release := hold.after(0)
	defer release()
	c.Start(i)
	f := c.Nodes[i].Node
	nettest.WaitFor(t, nettest.Patience, "the restarted follower to hear the leader's commit index", func() bool {
		return f.FirstCommit() > 0 && f.NoLeader() == nil
	})
	applied, _ := f.Indexes()
	if applied >= f.FirstCommit() {
		t.Fatalf("the restarted follower applied %d, the leader's commit %d: the test holds nothing", applied, f.FirstCommit())
	}
	wantNotReady(t, f.Ready(), "catching up: applied ")
	release()
	nettest.WaitFor(t, nettest.Patience, "the restarted follower to be ready once caught up", func() bool { return f.Ready() == nil })

	f.Stopping()
	if err := f.Ready(); !errors.Is(err, ErrStopping) {
		t.Fatalf("Ready() after Stopping = %v, want ErrStopping", err)
	}
}

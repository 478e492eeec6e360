package replication

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/raft"
)

// ErrRemoved is what a node removed from its cluster answers: it serves
// nothing until a member adds it back.
var ErrRemoved = errors.New("this node was removed from the cluster; start it with --join <a member's HTTP address> to be added back (its data dir may stay)")

// Removed returns ErrRemoved while the latest configuration this node
// knows of lacks it, nil otherwise.
func (n *Node) Removed() error {
	if n.removed.Load() {
		return ErrRemoved
	}
	return nil
}

// configChanged tells watchMembership to read the configuration again.
func (n *Node) configChanged() {
	select {
	case n.reconf <- struct{}{}:
	default:
	}
}

// isRemoved reads the latest configuration (committed or not): a node is
// removed when the configuration names members and not this node. A node
// waiting to join knows no configuration yet.
func (n *Node) isRemoved(ctx context.Context) (removed, ok bool) {
	f := n.raft.GetConfiguration()
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case <-ctx.Done():
		return false, false
	case err := <-done:
		if err != nil {
			return false, false
		}
	}
	servers := f.Configuration().Servers
	for _, s := range servers {
		if s.ID == raft.ServerID(n.cfg.ID) {
			return false, true
		}
	}
	return len(servers) > 0, true
}

// startMembership reads whether this node is still a member as it starts
// and says what it does about it.
func (n *Node) startMembership(ctx context.Context, existing bool, join string) {
	cctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	removed, _ := n.isRemoved(cctx)
	n.removed.Store(removed)
	switch {
	case removed && join != "":
		n.log.Warn("this node was removed from its cluster; asking to be added back", "join", join)
	case removed:
		n.log.Error("this node was removed from its cluster and serves nothing; restart it with --join <a member's HTTP address> to be added back")
	case existing && join != "":
		n.log.Info("already a member: --join is not used", "join", join)
	}
}

// watchMembership keeps n.removed up to date: at every configuration entry
// the log stores, and every second in case one was missed.
func (n *Node) watchMembership(ctx context.Context) {
	defer n.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.reconf:
		case <-tick.C:
		}
		removed, ok := n.isRemoved(ctx)
		if !ok || n.removed.Swap(removed) == removed {
			continue
		}
		if removed {
			n.log.Warn("this node was removed from the cluster: it refuses every request from now on; restart it with --join <a member's HTTP address> to be added back")
		} else {
			n.log.Info("this node is a member of the cluster again")
		}
	}
}

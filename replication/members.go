package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/replication/view"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// peerContacts is what the leader's heartbeats say of each peer: which
// ones fail, and when each failing one last answered. It is reset at
// every change of leader, since Raft reports only changes (a heartbeat
// that fails, one that resumes) within one leadership.
type peerContacts struct {
	mu      sync.Mutex
	failing map[raft.ServerID]time.Time // last contact of each peer whose heartbeats fail
	// since is when this node began to follow the observations of the
	// current leadership (the node's clock), and resumed when each peer's
	// heartbeats resumed within it: a peer not failing has answered every
	// heartbeat since the later of the two.
	since   time.Time
	resumed map[raft.ServerID]time.Time
}

// answeringSince returns since when the leader's heartbeats have reached
// peer without a failure, and false while they fail.
func (p *peerContacts) answeringSince(peer raft.ServerID) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, failing := p.failing[peer]; failing {
		return time.Time{}, false
	}
	t := p.since
	if r, ok := p.resumed[peer]; ok && r.After(t) {
		t = r
	}
	return t, true
}

// watchPeers keeps n.peers up to date from Raft's observations.
func (n *Node) watchPeers(ctx context.Context) {
	defer n.wg.Done()
	ch := make(chan raft.Observation, 64)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.LeaderObservation:
			return true
		}
		return false
	})
	n.raft.RegisterObserver(obs)
	defer n.raft.DeregisterObserver(obs)
	n.peers.mu.Lock()
	n.peers.since = n.clock.Now()
	n.peers.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return
		case o := <-ch:
			n.peers.mu.Lock()
			switch d := o.Data.(type) {
			case raft.FailedHeartbeatObservation:
				if _, known := n.peers.failing[d.PeerID]; !known {
					n.log.Warn("a member does not answer the leader's heartbeats", "peer", d.PeerID, "last_contact", d.LastContact)
				}
				n.peers.failing[d.PeerID] = d.LastContact
			case raft.ResumedHeartbeatObservation:
				if _, known := n.peers.failing[d.PeerID]; known {
					n.log.Info("a member answers the leader's heartbeats again", "peer", d.PeerID)
				}
				delete(n.peers.failing, d.PeerID)
				n.peers.resumed[d.PeerID] = n.clock.Now()
			case raft.LeaderObservation:
				clear(n.peers.failing)
				clear(n.peers.resumed)
				n.peers.since = n.clock.Now()
			}
			n.peers.mu.Unlock()
		}
	}
}

// Cluster returns this node's own view of the membership: its own state
// and indexes, and, on the leader, which members its heartbeats reach.
// What other members say of themselves is added by whoever asks them
// (the HTTP server, on the leader).
func (n *Node) Cluster(context.Context) (view.Cluster, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return view.Cluster{}, fmt.Errorf("%w: %w", model.ErrUnavailable, err)
	}
	meta := map[string]model.Member{}
	for _, m := range n.store().Nodes() {
		meta[m.ID] = m
	}
	_, leader := n.raft.LeaderWithID()
	isLeader := n.raft.State() == raft.Leader
	info := view.Cluster{Leader: string(leader), Term: n.raft.CurrentTerm(), Self: n.cfg.ID, ViewOf: n.cfg.ID}
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	for _, s := range f.Configuration().Servers {
		m := meta[string(s.ID)]
		ns := view.NodeStatus{Node: view.Node{ID: string(s.ID), RaftAddr: string(s.Address), HTTPAddr: m.HTTPAddr, GRPCAddr: m.GRPCAddr}, Suffrage: "voter", State: "unknown"}
		if s.Suffrage != raft.Voter {
			ns.Suffrage = "nonvoter"
		}
		switch {
		case string(s.ID) == n.cfg.ID:
			ns.State = stateName(n.raft.State())
			ns.AppliedIndex, ns.CommitIndex = n.Indexes()
			ns.Reachable = ptr(true) // to itself, leader or not, elected or not
			if !isLeader && leader != "" {
				ns.LastContactMs = ptr(time.Since(n.raft.LastContact()).Milliseconds())
			}
			if isLeader {
				ns.LastContactMs = ptr(int64(0))
			}
		case isLeader:
			last, failing := n.peers.failing[s.ID]
			ns.Reachable = ptr(!failing)
			if failing && !last.IsZero() {
				ns.LastContactMs = ptr(time.Since(last).Milliseconds())
			}
		case s.ID == leader:
			ns.State = "leader"
		}
		info.Nodes = append(info.Nodes, ns)
	}
	return info, nil
}

func ptr[T any](v T) *T { return &v }

func stateName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Candidate:
		return "candidate"
	case raft.Follower:
		return "follower"
	default:
		return "unknown"
	}
}

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
// removed when the configuration names members and not this node, or names
// it as a nonvoter, which it is only while being removed (RemoveNode). A
// node waiting to join knows no configuration yet.
func (n *Node) isRemoved(ctx context.Context) (removed, ok bool) {
	f := n.raft.GetConfiguration()
	if waitFuture(ctx, f) != nil {
		return false, false
	}
	servers := f.Configuration().Servers
	for _, s := range servers {
		if s.ID == raft.ServerID(n.cfg.ID) {
			return s.Suffrage != raft.Voter, true
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

// waitFuture waits for a Raft future until ctx is done. A membership
// change's future ends only when its entry commits or Raft shuts down, so
// without a quorum it would hold its caller, an HTTP handler, for as long
// as the quorum stays lost; the future still completes on its own.
func waitFuture(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case err := <-done:
		return err
	}
}

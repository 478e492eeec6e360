package repltest

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/raftlog"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Member is one node of a Cluster.
type Member struct {
	// Cfg is the node's configuration before Cluster.Configure runs.
	Cfg replication.Config
	// Node is the running node, nil while it is stopped.
	Node *replication.Node

	loops testLoops // its registration loop
}

// Cluster is a set of in-process nodes.
type Cluster struct {
	t testing.TB
	// Nodes are the cluster's members, in the order of their configs.
	Nodes []*Member
	// Configure, when set, adjusts each node's config before it starts.
	Configure func(*replication.Config)

	running running[*replication.Node]
}

// NewCluster starts n nodes as one new cluster and waits for a leader
// and for every member's addresses to be recorded.
// Each node's HTTPAddr is a free loopback address, recorded in the
// replicated metadata; nothing listens on it unless the caller serves it.
func NewCluster(t testing.TB, n int, configure func(*replication.Config)) *Cluster {
	t.Helper()
	return startCluster(t, configure, newTestConfigs(t, n))
}

// newTestConfigs returns the configs of n new members of one new cluster:
// free loopback addresses, data dirs under a test directory, quick expiry,
// no redelivery backoff and small log segments, so that each node writes
// less ahead and the log moves to a new segment, made from a spare, more
// often.
func newTestConfigs(t testing.TB, n int) []replication.Config {
	var members []model.Member
	addrs := nettest.FreeAddrs(t, 2*n) // distinct: a repeat fails the bootstrap
	for i := range n {
		members = append(members, model.Member{ID: fmt.Sprintf("n%d", i+1), RaftAddr: addrs[2*i], HTTPAddr: addrs[2*i+1]})
	}
	base := t.TempDir()
	var cfgs []replication.Config
	for _, m := range members {
		cfg := replication.Config{
			ID: m.ID, DataDir: filepath.Join(base, m.ID), RaftAddr: m.RaftAddr, HTTPAddr: m.HTTPAddr,
			RedeliveryBackoff: -1,
			ExpireGrace:       200 * time.Millisecond,
			LogSegmentBytes:   raftlog.MinSegmentBytes,
		}
		if n > 1 {
			cfg.InitialCluster = members
		}
		cfgs = append(cfgs, cfg)
	}
	return cfgs
}

// StartCluster starts nodes with the given configs (data dirs and
// addresses set by the caller, e.g. a restored directory) and waits for a leader.
func StartCluster(t testing.TB, cfgs ...replication.Config) *Cluster {
	t.Helper()
	return startCluster(t, nil, cfgs)
}

func startCluster(t testing.TB, configure func(*replication.Config), cfgs []replication.Config) *Cluster {
	t.Helper()
	c := &Cluster{t: t, Configure: configure}
	for _, cfg := range cfgs {
		c.Nodes = append(c.Nodes, &Member{Cfg: withTestLogger(t, cfg)})
	}
	for i := range c.Nodes {
		c.Start(i)
	}
	t.Cleanup(c.Shutdown)
	c.Leader()
	// A member whose HTTP address is not yet recorded cannot be asked
	// anything (a removal's confirmation, the cluster view): the cluster
	// is formed once every member's addresses are replicated.
	nettest.WaitFor(t, nettest.Patience, "every member's addresses to be recorded", func() bool {
		for _, tn := range c.Nodes {
			if !tn.Node.HasSelf() {
				return false
			}
		}
		return true
	})
	return c
}

// withTestLogger returns cfg logging to t unless it has a logger of its own.
func withTestLogger(t testing.TB, cfg replication.Config) replication.Config {
	if cfg.Logger == nil {
		cfg.Logger = nettest.Logger(t)
	}
	return cfg
}

// configured returns cfg as configure, when set, adjusts it.
func configured(cfg replication.Config, configure func(*replication.Config)) replication.Config {
	if configure != nil {
		configure(&cfg)
	}
	return cfg
}

// Start (re)starts node i with its data directory. Until the replicated
// metadata holds the node's addresses, it asks the leader to record them,
// as the server command does through the leader's API.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	tn := c.Nodes[i]
	cfg := configured(tn.Cfg, c.Configure)
	node, err := replication.Open(cfg)
	if err != nil {
		c.t.Fatalf("open node %s: %v", cfg.ID, err)
	}
	tn.Node = node
	c.running.set(cfg.ID, node)
	ctx := tn.loops.start()
	tn.loops.done.Go(func() { c.register(ctx, node, cfg) })
}

// register asks the leader to record node's addresses until they are.
func (c *Cluster) register(ctx context.Context, node *replication.Node, cfg replication.Config) {
	recordAddresses(ctx, node, cfg, c.running.get)
}

// recordAddresses asks node's leader, found by leaderNode, to record node's
// addresses until the replicated metadata holds them or ctx is done.
func recordAddresses(ctx context.Context, node *replication.Node, cfg replication.Config, leaderNode func(id string) *replication.Node) {
	self := cfg.Self()
	for !node.HasSelf() && ctx.Err() == nil {
		if _, id := node.Raft().LeaderWithID(); id != "" && string(id) != cfg.ID {
			if leader := leaderNode(string(id)); leader != nil {
				rctx, rc := context.WithTimeout(ctx, 2*time.Second)
				leader.AddNode(rctx, self)
				rc()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop shuts node i down cleanly: it steps down, then closes.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	tn := c.Nodes[i]
	if tn.Node == nil {
		return
	}
	tn.Node.StepDown()
	c.running.stop(c.t, tn.Cfg.ID, &tn.loops)
	tn.Node = nil
}

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	for i := range c.Nodes {
		c.Stop(i)
	}
}

// Leader waits for a leader whose dispatcher runs and returns it.
func (c *Cluster) Leader() *Member {
	c.t.Helper()
	return waitFirst(c.t, "a leader", c.Nodes, func(tn *Member) bool { return tn.Node != nil && readyLeader(tn.Node) })
}

// readyLeader reports whether n leads and its dispatcher runs.
func readyLeader(n *replication.Node) bool { return n.IsLeader() && n.Ready() == nil }

// waitFirst waits, as what, until one of nodes is ok and returns the
// first that is.
func waitFirst[T any](t testing.TB, what string, nodes []T, ok func(T) bool) T {
	t.Helper()
	var found T
	nettest.WaitFor(t, nettest.Patience, what, func() bool {
		for _, n := range nodes {
			if ok(n) {
				found = n
				return true
			}
		}
		return false
	})
	return found
}

// running is a test cluster's running nodes (a *replication.Node each,
// or a node's *replication.Groups) by id, which the registration loops ask for their leader.
type running[N interface{ Close(context.Context) error }] struct {
	mu   sync.Mutex
	byID map[string]N
}

// set records n as node id.
func (r *running[N]) set(id string, n N) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = map[string]N{}
	}
	r.byID[id] = n
}

// get returns node id, the zero N when it is not running.
func (r *running[N]) get(id string) N {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// stop ends node id's registration loops, forgets it and closes it.
func (r *running[N]) stop(t testing.TB, id string, loops *testLoops) {
	loops.stop()
	r.mu.Lock()
	n := r.byID[id]
	delete(r.byID, id)
	r.mu.Unlock()
	if err := n.Close(context.Background()); err != nil {
		t.Errorf("close %s: %v", id, err)
	}
}

// testLoops are a running test node's registration loops.
type testLoops struct {
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// start returns the context of the loops, which run on done, until stop.
func (l *testLoops) start() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	return ctx
}

// stop ends the loops and waits for them.
func (l *testLoops) stop() {
	l.cancel()
	l.done.Wait()
}

// Follower returns a running node that is not the leader.
func (c *Cluster) Follower() *Member {
	c.t.Helper()
	for _, tn := range c.Nodes {
		if tn.Node != nil && !tn.Node.IsLeader() {
			return tn
		}
	}
	c.t.Fatal("no follower")
	return nil
}

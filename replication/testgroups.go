package replication

import (
	"fmt"
	"testing"
	"time"
)

// This file extends the test kit to clusters of many Raft groups: every
// node is an OpenGroups, its groups over one Raft address.

// TestGroupsNode is one node of a TestGroupsCluster.
type TestGroupsNode struct {
	// Cfg is the node's configuration before TestGroupsCluster.Configure
	// runs; OpenGroups derives each group's from it.
	Cfg Config
	// Groups is the running node's groups, nil while it is stopped.
	Groups *Groups

	loops testLoops // its registration loops, a group each
}

// TestGroupsCluster is a set of in-process nodes, each running Count groups.
type TestGroupsCluster struct {
	t testing.TB
	// Count is the number of groups every node runs.
	Count int
	Nodes []*TestGroupsNode
	// Configure, when set, adjusts each node's config before it starts.
	Configure func(*Config)

	running running[*Groups]
}

// NewTestGroupsCluster starts n nodes of groups groups each as one new
// cluster, with a leadership balancer quick enough for tests, and waits
// for a leader of every group and for every member's addresses to be
// recorded in every group.
func NewTestGroupsCluster(t testing.TB, n, groups int, configure func(*Config)) *TestGroupsCluster {
	t.Helper()
	cfgs := newTestConfigs(t, n)
	for i := range cfgs {
		cfgs[i].balance = balanceTiming{every: 100 * time.Millisecond, settle: 500 * time.Millisecond, retry: time.Second}
	}
	return startGroupsCluster(t, groups, configure, cfgs)
}

// StartTestGroupsCluster starts nodes of groups groups each with the given
// configs (data dirs and addresses set by the caller, e.g. a restored
// directory) and waits as NewTestGroupsCluster does.
func StartTestGroupsCluster(t testing.TB, groups int, cfgs ...Config) *TestGroupsCluster {
	t.Helper()
	return startGroupsCluster(t, groups, nil, cfgs)
}

func startGroupsCluster(t testing.TB, groups int, configure func(*Config), cfgs []Config) *TestGroupsCluster {
	t.Helper()
	c := &TestGroupsCluster{t: t, Count: groups, Configure: configure}
	for _, cfg := range cfgs {
		if cfg.Logger == nil {
			cfg.Logger = testLogger(t)
		}
		c.Nodes = append(c.Nodes, &TestGroupsNode{Cfg: cfg})
	}
	for i := range c.Nodes {
		c.Start(i)
	}
	t.Cleanup(c.Shutdown)
	for g := range groups {
		c.Leader(g)
	}
	WaitFor(t, 20*time.Second, "every member's addresses to be recorded in every group", func() bool {
		for _, tn := range c.Nodes {
			for g := range groups {
				if !tn.Groups.Node(g).HasSelf() {
					return false
				}
			}
		}
		return true
	})
	return c
}

// Start (re)starts node i with its data directory. Until each group's
// replicated metadata holds the node's addresses, it asks that group's
// leader to record them.
func (c *TestGroupsCluster) Start(i int) {
	c.t.Helper()
	tn := c.Nodes[i]
	cfg := tn.Cfg
	if c.Configure != nil {
		c.Configure(&cfg)
	}
	gs, err := OpenGroups(cfg, c.Count)
	if err != nil {
		c.t.Fatalf("open node %s with %d groups: %v", cfg.ID, c.Count, err)
	}
	tn.Groups = gs
	c.running.set(cfg.ID, gs)
	ctx := tn.loops.start()
	for g := range gs.Count() {
		tn.loops.done.Go(func() {
			recordAddresses(ctx, gs.Node(g), cfg, func(id string) *Node {
				if o := c.running.get(id); o != nil {
					return o.Node(g)
				}
				return nil
			})
		})
	}
}

// Stop closes node i: each group it leads hands its leadership over.
func (c *TestGroupsCluster) Stop(i int) {
	c.t.Helper()
	tn := c.Nodes[i]
	if tn.Groups == nil {
		return
	}
	c.running.stop(c.t, tn.Cfg.ID, &tn.loops)
	tn.Groups = nil
}

// Shutdown stops every node.
func (c *TestGroupsCluster) Shutdown() {
	for i := range c.Nodes {
		c.Stop(i)
	}
}

// Leader waits for a leader of group g whose dispatcher runs and returns
// its node.
func (c *TestGroupsCluster) Leader(g int) *TestGroupsNode {
	c.t.Helper()
	return waitFirst(c.t, fmt.Sprintf("a leader of group %d", g), c.Nodes, func(tn *TestGroupsNode) bool {
		return tn.Groups != nil && readyLeader(tn.Groups.Node(g))
	})
}

// Leaders returns, for each group, the id of the running node that leads
// it, "" where none does.
func (c *TestGroupsCluster) Leaders() []string {
	out := make([]string, c.Count)
	for g := range out {
		for _, tn := range c.Nodes {
			if tn.Groups != nil && tn.Groups.Node(g).IsLeader() {
				out[g] = tn.Cfg.ID
			}
		}
	}
	return out
}

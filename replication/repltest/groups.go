package repltest

import (
	"fmt"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
)

// GroupsMember is one node of a GroupsCluster: its groups over one Raft
// address, as replication.OpenGroups opens them.
type GroupsMember struct {
	// Cfg is the node's configuration before GroupsCluster.Configure
	// runs; OpenGroups derives each group's from it.
	Cfg replication.Config
	// Groups is the running node's groups, nil while it is stopped.
	Groups *replication.Groups

	loops testLoops // its registration loops, a group each
}

// GroupsCluster is a set of in-process nodes, each running Count groups.
type GroupsCluster struct {
	t testing.TB
	// Count is the number of groups every node runs.
	Count int
	// Nodes are the cluster's members, in the order of their configs.
	Nodes []*GroupsMember
	// Configure, when set, adjusts each node's config before it starts.
	Configure func(*replication.Config)

	running running[*replication.Groups]
}

// NewGroupsCluster starts n nodes of groups groups each as one new
// cluster, with a leadership balancer quick enough for tests, and waits
// for a leader of every group and for every member's addresses to be
// recorded in every group.
func NewGroupsCluster(t testing.TB, n, groups int, configure func(*replication.Config)) *GroupsCluster {
	t.Helper()
	cfgs := newTestConfigs(t, n)
	for i := range cfgs {
		cfgs[i].Balance = replication.BalanceTiming{Every: 100 * time.Millisecond, Settle: 500 * time.Millisecond, Retry: time.Second}
	}
	return startGroupsCluster(t, groups, configure, cfgs)
}

// StartGroupsCluster starts nodes of groups groups each with the given
// configs (data dirs and addresses set by the caller, e.g. a restored
// directory) and waits as NewGroupsCluster does.
func StartGroupsCluster(t testing.TB, groups int, cfgs ...replication.Config) *GroupsCluster {
	t.Helper()
	return startGroupsCluster(t, groups, nil, cfgs)
}

func startGroupsCluster(t testing.TB, groups int, configure func(*replication.Config), cfgs []replication.Config) *GroupsCluster {
	t.Helper()
	c := &GroupsCluster{t: t, Count: groups, Configure: configure}
	for _, cfg := range cfgs {
		c.Nodes = append(c.Nodes, &GroupsMember{Cfg: withTestLogger(t, cfg)})
	}
	for i := range c.Nodes {
		c.Start(i)
	}
	t.Cleanup(c.Shutdown)
	for g := range groups {
		c.Leader(g)
	}
	nettest.WaitFor(t, nettest.Patience, "every member's addresses to be recorded in every group", func() bool {
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
func (c *GroupsCluster) Start(i int) {
	c.t.Helper()
	tn := c.Nodes[i]
	cfg := configured(tn.Cfg, c.Configure)
	gs, err := replication.OpenGroups(cfg, c.Count)
	if err != nil {
		c.t.Fatalf("open node %s with %d groups: %v", cfg.ID, c.Count, err)
	}
	tn.Groups = gs
	c.running.set(cfg.ID, gs)
	ctx := tn.loops.start()
	for g := range gs.Count() {
		tn.loops.done.Go(func() {
			recordAddresses(ctx, gs.Node(g), cfg, func(id string) *replication.Node {
				if o := c.running.get(id); o != nil {
					return o.Node(g)
				}
				return nil
			})
		})
	}
}

// Stop closes node i: each group it leads hands its leadership over.
func (c *GroupsCluster) Stop(i int) {
	c.t.Helper()
	tn := c.Nodes[i]
	if tn.Groups == nil {
		return
	}
	c.running.stop(c.t, tn.Cfg.ID, &tn.loops)
	tn.Groups = nil
}

// Shutdown stops every node.
func (c *GroupsCluster) Shutdown() {
	for i := range c.Nodes {
		c.Stop(i)
	}
}

// Leader waits for a leader of group g whose dispatcher runs and returns
// its node.
func (c *GroupsCluster) Leader(g int) *GroupsMember {
	c.t.Helper()
	return waitFirst(c.t, fmt.Sprintf("a leader of group %d", g), c.Nodes, func(tn *GroupsMember) bool {
		return tn.Groups != nil && readyLeader(tn.Groups.Node(g))
	})
}

// Leaders returns, for each group, the id of the running node that leads
// it, "" where none does.
func (c *GroupsCluster) Leaders() []string {
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

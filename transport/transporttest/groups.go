package transporttest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/transport"
)

// GroupsCluster is a set of nodes that run the same Raft groups, each
// node behind its own HTTP server at the HTTP address its groups record.
type GroupsCluster struct {
	Nodes []*Node
	tc    *repltest.GroupsCluster
	o     Options
	t     testing.TB
}

// StartGroups starts n nodes of groups Raft groups each as one new cluster
// (repltest.NewGroupsCluster) and returns once every group has a
// ready leader and every node knows each group's leader's HTTP address.
// Each Node's Node is its group 0, and Groups all of them.
func StartGroups(t testing.TB, n, groups int, o Options) *GroupsCluster {
	t.Helper()
	o = o.withClock()
	// The servers listen before the nodes start, on the addresses the
	// nodes record, as StartCluster's do.
	c := &GroupsCluster{o: o, t: t}
	var configure func(*replication.Config)
	c.Nodes, configure = listening(n, o, nil)
	c.tc = repltest.NewGroupsCluster(t, n, groups, configure)
	for i, tn := range c.tc.Nodes {
		c.serve(c.Nodes[i], tn.Groups)
	}
	nettest.WaitFor(t, nettest.Patience, "every node to know each group's leader's address", func() bool {
		for g := range groups {
			leader := c.Leader(g)
			for _, kn := range c.Nodes {
				if addr, _, known := kn.Groups.Node(g).LeaderHTTP(); !known || addr != leader.Addr {
					return false
				}
			}
		}
		return true
	})
	return c
}

// serve puts kn's groups behind its server.
func (c *GroupsCluster) serve(kn *Node, gs *replication.Groups) {
	kn.Node, kn.Groups = gs.Node(0), gs
	serve(c.t, kn, c.o, transport.GroupBackends(gs)...)
}

// Leader waits for a ready leader of group g and returns its node.
func (c *GroupsCluster) Leader(g int) *Node {
	c.t.Helper()
	tn := c.tc.Leader(g)
	for _, kn := range c.Nodes {
		if kn.ID == tn.Cfg.ID {
			return kn
		}
	}
	panic(fmt.Sprintf("transporttest: a leader %s the kit did not start", tn.Cfg.ID))
}

// Leaders returns, for each group, the id of the running node that leads
// it, "" where none does.
func (c *GroupsCluster) Leaders() []string { return c.tc.Leaders() }

// Stop shuts node i down cleanly (each group it leads hands its
// leadership over); its HTTP address keeps listening and answers 503
// until Restart.
func (c *GroupsCluster) Stop(i int) {
	c.t.Helper()
	c.Nodes[i].serveDown()
	c.tc.Stop(i)
	c.Nodes[i].Node, c.Nodes[i].Groups = nil, nil
}

// Restart starts node i again on its data dir, behind a new server at the
// same HTTP address.
func (c *GroupsCluster) Restart(i int) {
	c.t.Helper()
	c.tc.Start(i)
	c.serve(c.Nodes[i], c.tc.Nodes[i].Groups)
}

// Spread waits until each group is led by its preferred voter (group g by
// the g-th node in id order, where the leadership balancer puts it) and
// every node knows every group's leader, each leader ready to serve, moving
// the kit's clock, on which
// the balancer runs. Waiting for any spread would not do: a spread reached
// by elections alone may still be moved by the balancer afterwards.
func (c *GroupsCluster) Spread(t testing.TB) {
	t.Helper()
	byID := map[string]*Node{}
	var ids []string
	for _, n := range c.Nodes {
		byID[n.ID] = n
		ids = append(ids, n.ID)
	}
	slices.Sort(ids)
	groups := c.Nodes[0].Groups.Count()
	c.Nodes[0].AdvanceUntil(t, 100*time.Millisecond, "each group to be led by its preferred voter, ready and known to every node", func() bool {
		leaders := c.Leaders()
		for g := range groups {
			want := ids[g%len(ids)]
			// Ready: the new leader's dispatcher runs, so what the test
			// asks of it next (a reserve, a stream) is served, not
			// refused as by a leader still taking office.
			if leaders[g] != want || byID[want].Groups.Node(g).Ready() != nil {
				return false
			}
			for _, n := range c.Nodes {
				addr, _, known := n.Groups.Node(g).LeaderHTTP()
				if !known || addr != byID[want].Addr {
					return false
				}
			}
		}
		return true
	})
}

package replication_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// topicsOfGroups returns a topic of each of n groups.
func topicsOfGroups(n int) []string {
	out := make([]string, n)
	left := n
	for i := 0; left > 0; i++ {
		topic := fmt.Sprintf("topic-%d", i)
		if g := model.GroupOf(topic, n); out[g] == "" {
			out[g] = topic
			left--
		}
	}
	return out
}

// TestGroupsRouting: a topic's messages live in its group, their ids name
// it, and the node of the group (ForTopic, ForID) enqueues, hands out and
// acks them.
func TestGroupsRouting(t *testing.T) {
	const groups = 3
	c := repltest.NewGroupsCluster(t, 1, groups, nil)
	gs := c.Nodes[0].Groups
	if gs.Count() != groups {
		t.Fatalf("Count() = %d", gs.Count())
	}
	ctx := context.Background()
	for g, topic := range topicsOfGroups(groups) {
		n := gs.ForTopic(topic)
		if n != gs.Node(g) {
			t.Fatalf("ForTopic(%s) is not group %d's node", topic, g)
		}
		keyed := msg(topic, "keyed", 0)
		keyed.Key = "k"
		res := enqueue(t, n, msg(topic, "plain", 0), keyed)
		for _, r := range res {
			if r.ID.Group() != g {
				t.Fatalf("topic %s of group %d: id %s names group %d", topic, g, r.ID, r.ID.Group())
			}
			if by, err := gs.ForID(r.ID); err != nil || by != n {
				t.Fatalf("ForID(%s) = %p, %v; want group %d's node", r.ID, by, err, g)
			}
		}
		for other := range groups {
			if other != g && gs.Node(other).Store().HasTopic(topic) {
				t.Fatalf("topic %s of group %d is in group %d's store", topic, g, other)
			}
		}
		ds := reserve(t, n, topic, 10, 5*time.Second)
		if len(ds) != 2 {
			t.Fatalf("reserved %d messages of %s, want 2", len(ds), topic)
		}
		for _, d := range ds {
			by, err := gs.ForID(d.Receipt.ID)
			if err != nil {
				t.Fatal(err)
			}
			if cnt, err := by.Ack(ctx, []model.Receipt{d.Receipt}); err != nil || cnt.Done != 1 {
				t.Fatalf("ack %s: %+v, %v", d.Receipt, cnt, err)
			}
			if _, err := by.Get(ctx, d.ID); !errors.Is(err, model.ErrNotFound) {
				t.Fatalf("get %s after its ack: %v", d.ID, err)
			}
		}
	}
	bad := model.ID{Index: 5, Seq: 7 << 24}
	if _, err := gs.ForID(bad); !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), "group 7") {
		t.Fatalf("ForID of group 7 in a cluster of %d: %v", groups, err)
	}

	// Each group keeps its data in a directory of its own, and the count
	// is recorded.
	dir := c.Nodes[0].Cfg.DataDir
	for g := range groups {
		if _, err := os.Stat(filepath.Join(GroupDir(dir, g), "raft")); err != nil {
			t.Fatalf("group %d's raft dir: %v", g, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, GroupsFile)); err != nil || string(b) != "3\n" {
		t.Fatalf("groups file: %q, %v", b, err)
	}
}

// TestGroupsOneIsOpen: one group is the node Open starts, in the data dir
// itself, with nothing added to it.
func TestGroupsOneIsOpen(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{ID: "n1", DataDir: dir, RaftAddr: nettest.FreeAddr(t)}
	gs, err := OpenGroups(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close(context.Background())
	n := gs.Node(0)
	nettest.WaitFor(t, nettest.Patience, "the single node to lead", func() bool { return n.IsLeader() && n.Ready() == nil })
	if gs.Count() != 1 || gs.ForTopic("anything") != n {
		t.Fatal("one group routes elsewhere than its node")
	}
	res := enqueue(t, n, msg("t", "x", time.Hour))
	if res[0].ID.Group() != 0 {
		t.Fatalf("id %s of a single group names group %d", res[0].ID, res[0].ID.Group())
	}
	if _, err := os.Stat(filepath.Join(dir, "raft")); err != nil {
		t.Fatalf("the single group's data is not in the data dir: %v", err)
	}
	for _, name := range []string{GroupsFile, GroupDir(dir, 0)} {
		if _, err := os.Stat(filepath.Join(dir, filepath.Base(name))); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("one group wrote %s: %v", name, err)
		}
	}
}

// TestGroupsCountIsFixed: a data dir keeps the group count it was created
// with, one for the single-group layout.
func TestGroupsCountIsFixed(t *testing.T) {
	c := repltest.NewGroupsCluster(t, 1, 3, nil)
	cfg := c.Nodes[0].Cfg
	c.Stop(0)
	for _, n := range []int{1, 2, 4} {
		_, err := OpenGroups(cfg, n)
		want := fmt.Sprintf("created with --groups 3 and is started with --groups %d", n)
		if !errors.Is(err, ErrGroupCount) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), cfg.DataDir) {
			t.Fatalf("restart of a 3-group data dir with %d groups: %v", n, err)
		}
	}
	c.Start(0) // the right count still opens
	c.Leader(2)

	single := repltest.NewCluster(t, 1, nil)
	scfg := single.Nodes[0].Cfg
	single.Stop(0)
	_, err := OpenGroups(scfg, 3)
	if !errors.Is(err, ErrGroupCount) || !strings.Contains(err.Error(), "created with --groups 1 and is started with --groups 3") {
		t.Fatalf("a single-group data dir started with 3 groups: %v", err)
	}
	gs, err := OpenGroups(scfg, 1)
	if err != nil {
		t.Fatalf("a single-group data dir started with one group: %v", err)
	}
	gs.Close(context.Background())
}

// TestGroupsLeadershipSpread: each of three nodes ends up leading one of
// three groups, its preferred one; when a node stops only the group it led
// elects another leader, and once it is back the leadership returns.
func TestGroupsLeadershipSpread(t *testing.T) {
	c := repltest.NewGroupsCluster(t, 3, 3, nil)
	preferred := []string{"n1", "n2", "n3"} // group g's: the g-th voter by id
	nettest.WaitFor(t, 30*time.Second, "every node to lead its preferred group", func() bool {
		return slices.Equal(c.Leaders(), preferred)
	})

	// Each group's term as its leader, node g, has it; a follower may
	// not have heard of the last election yet, so wait until all agree.
	leaderTerm := func(g int) uint64 { return c.Nodes[g].Groups.Node(g).Raft().CurrentTerm() }
	var before []uint64
	nettest.WaitFor(t, nettest.Patience, "every node at each group leader's term", func() bool {
		before = before[:0]
		for g := range c.Count {
			before = append(before, leaderTerm(g))
			for _, tn := range c.Nodes {
				if tn.Groups.Node(g).Raft().CurrentTerm() != before[g] {
					return false
				}
			}
		}
		return slices.Equal(c.Leaders(), preferred)
	})
	c.Stop(2)
	nettest.WaitFor(t, nettest.Patience, "group 2 to elect another leader", func() bool {
		l := c.Leaders()[2]
		return l == "n1" || l == "n2"
	})
	c.Leader(2)
	after := []uint64{leaderTerm(0), leaderTerm(1)}
	if l := c.Leaders(); l[0] != "n1" || l[1] != "n2" || after[0] != before[0] || after[1] != before[1] {
		t.Fatalf("after n3 stopped: leaders %v, terms %v (before %v); groups 0 and 1 must keep theirs", l, after, before)
	}

	c.Start(2)
	nettest.WaitFor(t, 30*time.Second, "the returned node to lead its group again", func() bool {
		return slices.Equal(c.Leaders(), preferred)
	})
	n3 := c.Leader(2)
	res := enqueue(t, n3.Groups.Node(2), msg("after", "x", 0))
	if res[0].ID.Group() != 2 {
		t.Fatalf("id %s of group 2", res[0].ID)
	}
}

// TestGroupsTLSAndOneGroupClosed: every group's traffic is mutual TLS over
// the one address, and closing one group's node leaves the listener, and
// the other group's replication to that node, as they were.
func TestGroupsTLSAndOneGroupClosed(t *testing.T) {
	cert, key, ca := nettest.WriteCA(t, t.TempDir(), "groups")
	srv, cli, err := PeerTLS(cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	c := repltest.NewGroupsCluster(t, 3, 2, func(cfg *Config) { cfg.RaftServerTLS, cfg.RaftClientTLS = srv, cli })
	topics := topicsOfGroups(2)
	for g := range 2 {
		enqueue(t, c.Leader(g).Groups.Node(g), msg(topics[g], "x", time.Hour))
	}
	nettest.WaitFor(t, nettest.Patience, "every node to apply both groups' enqueues", func() bool {
		for _, tn := range c.Nodes {
			for g := range 2 {
				if !tn.Groups.Node(g).Store().HasTopic(topics[g]) {
					return false
				}
			}
		}
		return true
	})

	// Close group 0's node on a node that does not lead group 1.
	var victim *repltest.GroupsMember
	for _, tn := range c.Nodes {
		if !tn.Groups.Node(1).IsLeader() {
			victim = tn
			break
		}
	}
	if err := victim.Groups.Node(0).Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Leader(0)
	leader := c.Leader(1).Groups.Node(1)
	res := enqueue(t, leader, msg(topics[1], "after", time.Hour))
	nettest.WaitFor(t, nettest.Patience, "group 1 to replicate to the node whose group 0 closed", func() bool {
		_, err := victim.Groups.Node(1).Store().Get(res[0].ID)
		return err == nil
	})
}

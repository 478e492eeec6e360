package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

// The cluster view is the leader's, whichever member answers: every
// reachable member with its state and indexes, and a stopped one as
// unreachable rather than as a healthy follower.
func TestClusterViewTellsTheTruth(t *testing.T) {
	c, leader := clusterWithMessage(t)
	ctx := t.Context()
	var err error
	var followers []int
	for i, n := range c.Nodes {
		if n != leader {
			followers = append(followers, i)
		}
	}
	stopped, asked := followers[0], followers[1]

	member := func(v api.Cluster, id string) api.NodeStatus {
		for _, m := range v.Nodes {
			if m.ID == id {
				return m
			}
		}
		t.Fatalf("no member %s in %+v", id, v)
		return api.NodeStatus{}
	}
	healthy := func(v api.Cluster) bool {
		for _, m := range v.Nodes {
			if m.Reachable == nil || !*m.Reachable || m.AppliedIndex == 0 || m.Lag == nil || *m.Lag != 0 {
				return false
			}
		}
		return true
	}
	f := c.Nodes[asked]
	var v api.Cluster
	f.Eventually(t, "every member to be reachable and caught up", func() bool {
		v, err = f.Client.Cluster(ctx)
		return err == nil && healthy(v)
	})
	equal(t, "self", v.Self, f.ID)
	equal(t, "view of", v.ViewOf, leader.ID)
	equal(t, "leader", v.Leader, leader.ID)
	equal(t, "the leader's state", member(v, leader.ID).State, "leader")
	equal(t, "a follower's state", member(v, f.ID).State, "follower")

	gone := c.Nodes[stopped].ID
	c.Stop(stopped)
	f.Eventually(t, "the stopped member to be reported unreachable", func() bool {
		v, err = f.Client.Cluster(ctx)
		if err != nil {
			return false
		}
		m := member(v, gone)
		return m.Reachable != nil && !*m.Reachable
	})
	equal(t, "the stopped member's state", member(v, gone).State, "unknown")
	if m := member(v, f.ID); m.Reachable == nil || !*m.Reachable || m.State != "follower" {
		t.Fatalf("the running follower: %+v", m)
	}
}

// A removed member stops serving at once and says why, and still does
// after a restart on its data dir; added back, it serves again.
func TestRemovedMemberRefusesThenRejoins(t *testing.T) {
	c := startCluster(t, 3, transporttest.Options{})
	ctx := t.Context()
	leader := c.Leader()
	i := c.FollowerIndex()
	f := c.Nodes[i]
	check(t, "remove", leader.Client.RemoveNode(ctx, f.ID))
	f.Eventually(t, "the removed member to refuse", func() bool { return f.Node.Removed() != nil })
	wantUnavailable(t, f.Client.Readyz(ctx), "removed from the cluster", "--join")
	_, err := f.Client.Enqueue(ctx, []api.Message{{Topic: "t", Payload: api.TextBody("x")}})
	wantUnavailable(t, err, "removed from the cluster")
	_, err = f.Client.Topics(ctx)
	wantUnavailable(t, err, "removed from the cluster")

	c.Stop(i)
	c.Restart(i)
	wantUnavailable(t, f.Client.Readyz(ctx), "removed from the cluster")

	check(t, "add back", leader.Client.AddNode(ctx, api.Node{ID: f.ID, RaftAddr: f.RaftAddr, HTTPAddr: f.Addr}))
	f.Eventually(t, "the member added back to be ready", func() bool { return f.Client.Readyz(ctx) == nil })
	_, err = f.Client.Enqueue(ctx, []api.Message{{Topic: "t", Payload: api.TextBody("y")}})
	check(t, "enqueue through the member added back", err)
}

// addressLater is node self's backend. For as many calls as hideCalls
// says, its cluster view leaves out the other members' HTTP addresses, as a
// leader's does before members of an initial cluster have recorded theirs;
// it keeps what the removal's confirmation of a member's demotion returned.
type addressLater struct {
	transport.Backend
	self      string
	hideCalls atomic.Int32 // views still to leave the addresses out of
	confirmed atomic.Pointer[error]
}

func (b *addressLater) Cluster(ctx context.Context) (api.Cluster, error) {
	v, err := b.Backend.Cluster(ctx)
	if b.hideCalls.Add(-1) >= 0 {
		for i := range v.Nodes {
			if v.Nodes[i].ID != b.self {
				v.Nodes[i].HTTPAddr = ""
			}
		}
	}
	return v, err
}

func (b *addressLater) RemoveNode(ctx context.Context, id string, confirm func(context.Context, uint64) error) error {
	return b.Backend.RemoveNode(ctx, id, func(ctx context.Context, index uint64) error {
		err := confirm(ctx, index)
		b.confirmed.Store(&err)
		return err
	})
}

// A member removed before the leader knows its HTTP address (one of an
// initial cluster, just started) is waited for: the leader hears it
// confirm its demotion once the address is recorded, and the member
// learns of its removal.
func TestRemoveWaitsForMemberAddress(t *testing.T) {
	backends := map[string]*addressLater{}
	var n atomic.Int32
	c := startCluster(t, 3, transporttest.Options{Backend: func(b transport.Backend) transport.Backend {
		id := []string{"n1", "n2", "n3"}[n.Add(1)-1] // the kit serves its nodes in order
		backends[id] = &addressLater{Backend: b, self: id}
		return backends[id]
	}})
	ctx := t.Context()
	leader := c.Leader()
	f := c.Follower()
	lb := backends[leader.ID]
	lb.hideCalls.Store(3)
	check(t, "remove", leader.Client.RemoveNode(ctx, f.ID))
	got := lb.confirmed.Load()
	if got == nil {
		t.Fatal("the removal did not ask the member to confirm its demotion")
	}
	check(t, "the member's confirmation", *got)
	if lb.hideCalls.Load() >= 0 {
		t.Fatalf("the leader's view was read %d times fewer than the address was hidden for", lb.hideCalls.Load()+1)
	}
	f.Eventually(t, "the removed member to refuse", func() bool { return f.Node.Removed() != nil })
}

// The cluster view names each Raft group (today group 0) with its leader,
// term and the leader's indexes, and the answering node's lag behind the
// leader, at the leader and at a follower alike; the field names are the
// contract's.
func TestClusterViewGroups(t *testing.T) {
	c, leader := clusterWithMessage(t)
	ctx := t.Context()
	var err error
	for _, n := range []*transporttest.Node{leader, c.Follower()} {
		var v api.Cluster
		n.Eventually(t, "group 0 to be reported caught up at "+n.ID, func() bool {
			v, err = n.Client.Cluster(ctx)
			return err == nil && len(v.Groups) == 1 && v.Groups[0].Lag != nil && *v.Groups[0].Lag == 0
		})
		g := v.Groups[0]
		equal(t, "group", g.Group, 0)
		equal(t, "group leader", g.Leader, leader.ID)
		equal(t, "group leader is the view's", g.Leader, v.Leader)
		equal(t, "group term", g.Term, v.Term)
		if g.AppliedIndex == 0 || g.CommitIndex < g.AppliedIndex {
			t.Fatalf("at %s: group 0 %+v: want the leader's non-zero applied index, at most its commit index", n.ID, g)
		}
		equal(t, "self", v.Self, n.ID)
	}

	a := doURL(t, http.MethodGet, c.Nodes[c.FollowerIndex()].URL+"/v1/cluster", "")
	equal(t, "status", a.status, http.StatusOK)
	var raw struct {
		Leader string                       `json:"leader"`
		Groups []map[string]json.RawMessage `json:"groups"`
	}
	check(t, "decode", json.Unmarshal(a.body, &raw))
	if len(raw.Groups) != 1 {
		t.Fatalf("groups in %s", a.body)
	}
	for _, f := range []string{"group", "leader", "term", "applied_index", "commit_index", "lag"} {
		if _, ok := raw.Groups[0][f]; !ok {
			t.Fatalf("group 0 has no %q: %s", f, a.body)
		}
	}
	equal(t, "leader in the JSON", string(raw.Groups[0]["leader"]), `"`+raw.Leader+`"`)
}

// A node left alone, with no leader (here restarted alone), answers its
// own view: itself as reachable, with its own indexes, and the members it
// cannot ask as unreachable, not unknown.
func TestClusterViewOfALoneNode(t *testing.T) {
	c, leader := clusterWithMessage(t)
	ctx := t.Context()
	var err error
	lone := c.Follower()
	lone.Eventually(t, "the follower to apply the enqueue", func() bool {
		applied, _ := lone.Node.Indexes()
		_, lc := leader.Node.Indexes()
		return applied >= lc
	})
	var gone []string
	li := 0
	for i, n := range c.Nodes {
		if n != lone {
			gone = append(gone, n.ID)
			c.Stop(i)
		} else {
			li = i
		}
	}
	// Restarted alone, it hears from no leader: its commit index is what
	// it applied, not Raft's 0.
	c.Stop(li)
	c.Restart(li)
	lone = c.Nodes[li]
	var v api.Cluster
	lone.Eventually(t, "the lone node to know no leader", func() bool {
		v, err = lone.Client.Cluster(ctx)
		return err == nil && v.Leader == ""
	})
	for _, m := range v.Nodes {
		switch {
		case m.ID == lone.ID:
			if m.Reachable == nil || !*m.Reachable || m.CommitIndex == 0 || m.AppliedIndex == 0 {
				t.Fatalf("the lone node in its own view: %+v; want reachable with its indexes", m)
			}
		case m.Reachable == nil || *m.Reachable || m.State != "unknown":
			t.Fatalf("stopped member %s: %+v; want unreachable, state unknown (stopped: %v)", m.ID, m, gone)
		}
	}
	equal(t, "members", len(v.Nodes), 3)
}

// clusterWithMessage starts three nodes and enqueues one message through
// the leader, which it returns.
func clusterWithMessage(t *testing.T) (*transporttest.Cluster, *transporttest.Node) {
	t.Helper()
	c := startCluster(t, 3, transporttest.Options{})
	leader := c.Leader()
	_, err := leader.Client.Enqueue(t.Context(), []api.Message{{Topic: "t", Payload: api.TextBody("x")}})
	check(t, "enqueue", err)
	return c, leader
}

// A removal that left the Raft configuration but not the member record
// (its last step did not answer) is finished by a retry, which does not
// answer that the node is no member.
func TestRemoveRetryFinishesRecord(t *testing.T) {
	c := startCluster(t, 3, transporttest.Options{})
	ctx := t.Context()
	leader := c.Leader()
	f := c.Nodes[c.FollowerIndex()]
	check(t, "the Raft removal alone", leader.Node.Raft().RemoveServer(raft.ServerID(f.ID), 0, 0).Error())
	listed := func() bool {
		for _, m := range leader.Node.Store().Nodes() {
			if m.ID == f.ID {
				return true
			}
		}
		return false
	}
	if !listed() {
		t.Fatalf("the member record of %s went with the Raft removal alone", f.ID)
	}
	check(t, "the retried removal", leader.Client.RemoveNode(ctx, f.ID))
	if listed() {
		t.Fatalf("the member record of %s stays after the retried removal", f.ID)
	}
	var ce *client.Error
	if err := leader.Client.RemoveNode(ctx, f.ID); !asClientError(err, &ce) || ce.Status != http.StatusNotFound {
		t.Fatalf("removing a node twice = %v, want a 404", err)
	}
}

// A leader asked to remove itself hands its leadership on, and the same
// request, asked again of the next leader, removes it (Raft
// configuration and member record) and answers 200.
func TestRemoveLeaderThroughItself(t *testing.T) {
	c := startCluster(t, 3, transporttest.Options{})
	ctx := t.Context()
	leader := c.Leader()
	check(t, "removing the leader through itself", leader.Client.RemoveNode(ctx, leader.ID))
	for _, n := range c.Nodes {
		if n == leader {
			continue
		}
		n.Eventually(t, "the removed leader to leave the configuration and the member records", func() bool {
			f := n.Node.Raft().GetConfiguration()
			if f.Error() != nil {
				return false
			}
			for _, s := range f.Configuration().Servers {
				if string(s.ID) == leader.ID {
					return false
				}
			}
			for _, m := range n.Node.Store().Nodes() {
				if m.ID == leader.ID {
					return false
				}
			}
			return true
		})
	}
}

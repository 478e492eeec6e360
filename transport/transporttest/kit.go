package transporttest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

// StartMs is where a kit's clock starts when the test gives none:
// 2024-11-22T03:20:00Z, on a second boundary.
const StartMs = int64(1_732_245_600_000)

// Options shape the nodes a kit starts. The zero value is fine.
type Options struct {
	// Clock is the clock of every node and server; nil: a new FakeClock at StartMs.
	Clock *wheeltest.FakeClock
	// Server edits each node's server config (token, limits, metrics).
	Server func(*transport.Config)
	// Backend, when set, stands between a node (each of its groups) and
	// its server, for a test that fails one method of the real node.
	Backend func(transport.Backend) transport.Backend
	// Handler, when set, wraps the handler of the server of node id.
	Handler func(id string, h http.Handler) http.Handler
	// Replication edits each node's config after the kit's own settings.
	// A one-node cluster runs on short Raft timeouts, so that it elects
	// itself at once; a test that adds a member to it restores the
	// defaults here (zero timeouts), which a catching-up member needs.
	Replication func(*replication.Config)
}

// Node is one node behind its own HTTP server.
type Node struct {
	ID       string
	RaftAddr string
	Addr     string         // host:port of the HTTP API
	URL      string         // http://Addr
	Client   *client.Client // sends the server's token, if it has one
	Clock    *wheeltest.FakeClock
	// Node is the node itself, for a test that reads or drives it directly.
	// Cluster.Restart replaces it. In a GroupsCluster it is group 0's.
	Node *replication.Node
	// Groups is the node's Raft groups in a GroupsCluster, else nil.
	Groups *replication.Groups

	srv     *httptest.Server
	handler atomic.Pointer[http.Handler] // what srv serves
}

// CloseHTTP stops the node's HTTP server (the node keeps running), so its
// address refuses connections.
func (n *Node) CloseHTTP() { n.srv.Close() }

// AdvanceUntil moves the clock on by step until cond holds, so the node's
// timed work (slot expiry, lease ends) runs without waiting on the wall clock.
func (n *Node) AdvanceUntil(t testing.TB, step time.Duration, what string, cond func() bool) {
	t.Helper()
	n.Eventually(t, what, func() bool {
		if cond() {
			return true
		}
		n.Clock.Advance(step)
		return false
	})
}

// Eventually waits until cond holds, for what the node does in the
// background (applying a lease, catching up) without time passing.
func (n *Node) Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	nettest.WaitFor(t, nettest.Patience, what, cond)
}

// Cluster is a set of nodes that form one Raft cluster.
type Cluster struct {
	Nodes []*Node
	tc    *repltest.Cluster
	o     Options
	t     testing.TB
}

// Stop shuts node i down cleanly; its HTTP address keeps listening and
// answers 503 until Restart.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	c.Nodes[i].serveDown()
	c.tc.Stop(i)
	c.Nodes[i].Node = nil
}

// serveDown makes n's server answer 503 to everything, for a stopped node.
func (n *Node) serveDown() {
	var down http.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "node stopped", http.StatusServiceUnavailable)
	})
	n.handler.Store(&down)
}

// Restart starts node i again on its data dir, behind a new server at
// the same HTTP address.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.tc.Start(i)
	kn := c.Nodes[i]
	kn.Node = c.tc.Nodes[i].Node
	serve(c.t, kn, c.o, kn.Node)
}

// Start starts a one-node cluster and returns its node once it leads and
// is ready.
func Start(t testing.TB, o Options) *Node {
	t.Helper()
	return StartCluster(t, 1, o).Nodes[0]
}

// StartCluster starts n nodes as one new cluster and returns once a
// leader is ready and every node knows the leader's HTTP address.
func StartCluster(t testing.TB, n int, o Options) *Cluster {
	t.Helper()
	o = o.withClock()
	c := &Cluster{o: o, t: t}
	var configure func(*replication.Config)
	c.Nodes, configure = listening(n, o, func(cfg *replication.Config) {
		if n == 1 {
			cfg.HeartbeatTimeout, cfg.ElectionTimeout = 10*time.Millisecond, 10*time.Millisecond
		}
	})
	c.tc = repltest.NewCluster(t, n, configure)
	// The test cluster names its nodes n1, n2… in order. Were the match
	// wrong, no node would find the leader at the leader's address below.
	for i, tn := range c.tc.Nodes {
		kn := c.Nodes[i]
		kn.Node = tn.Node
		serve(t, kn, o, tn.Node)
	}
	leader := c.Leader()
	nettest.WaitFor(t, nettest.Patience, "every node to know the leader's address", func() bool {
		for _, kn := range c.Nodes {
			if addr, _, known := kn.Node.LeaderHTTP(); !known || addr != leader.Addr {
				return false
			}
		}
		return true
	})
	return c
}

// listening returns nodes n1…nN (the names the test clusters give their
// nodes, in order), each with a server that listens but does not serve
// yet, so that the nodes record addresses no other test can take; and the
// edit of a node's config that gives it the kit's clock and its server's
// address, then tune's edits (when set) and o.Replication's.
func listening(n int, o Options, tune func(*replication.Config)) (nodes []*Node, configure func(*replication.Config)) {
	byID := map[string]*Node{}
	for i := range n {
		kn := &Node{ID: fmt.Sprintf("n%d", i+1), Clock: o.Clock, srv: httptest.NewUnstartedServer(nil)}
		kn.Addr = kn.srv.Listener.Addr().String()
		nodes = append(nodes, kn)
		byID[kn.ID] = kn
	}
	return nodes, func(cfg *replication.Config) {
		cfg.Clock = o.Clock
		cfg.HTTPAddr = byID[cfg.ID].Addr
		byID[cfg.ID].RaftAddr = cfg.RaftAddr
		if tune != nil {
			tune(cfg)
		}
		if o.Replication != nil {
			o.Replication(cfg)
		}
	}
}

// withClock is o with a clock: a new FakeClock at StartMs when it has none.
func (o Options) withClock() Options {
	if o.Clock == nil {
		o.Clock = wheeltest.NewFakeClock(time.UnixMilli(StartMs))
	}
	return o
}

// StartJoiner starts a node that is to join a cluster (as `server --join`
// does) and has not been added: it knows no leader and is not ready. Add
// it with the leader's AddNode and its ID, RaftAddr and Addr.
func StartJoiner(t testing.TB, id string, o Options) *Node {
	t.Helper()
	o = o.withClock()
	kn := &Node{ID: id, RaftAddr: nettest.FreeAddr(t), Clock: o.Clock, srv: httptest.NewUnstartedServer(nil)}
	kn.Addr = kn.srv.Listener.Addr().String()
	cfg := replication.Config{
		ID: id, DataDir: t.TempDir(), RaftAddr: kn.RaftAddr, HTTPAddr: kn.Addr, Join: "unused:1",
		Logger: nettest.Logger(t), Clock: o.Clock, RedeliveryBackoff: -1,
	}
	if o.Replication != nil {
		o.Replication(&cfg)
	}
	node, err := replication.Open(cfg)
	if err != nil {
		t.Fatalf("open %s: %v", id, err)
	}
	t.Cleanup(func() {
		if err := node.Close(context.Background()); err != nil {
			t.Errorf("close %s: %v", id, err)
		}
	})
	kn.Node = node
	serve(t, kn, o, node)
	return kn
}

// serve starts kn's HTTP server in front of its groups, group g's backend
// at groups[g].
func serve(t testing.TB, kn *Node, o Options, groups ...transport.Backend) {
	cfg := transport.Config{Clock: o.Clock.Now, Logger: nettest.Logger(t)}
	if o.Server != nil {
		o.Server(&cfg)
	}
	if o.Backend != nil {
		groups = slices.Clone(groups)
		for g, b := range groups {
			groups[g] = o.Backend(b)
		}
	}
	h := transport.NewServer(cfg, groups...).Handler()
	if o.Handler != nil {
		h = o.Handler(kn.ID, h)
	}
	if kn.handler.Swap(&h) == nil {
		kn.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			(*kn.handler.Load()).ServeHTTP(w, r)
		})
		kn.srv.Start()
		t.Cleanup(kn.srv.Close)
		kn.URL = kn.srv.URL
	}
	kn.Client = client.New(kn.URL, client.WithToken(cfg.AuthToken))
}

// Leader waits for a leader that is ready and returns it.
func (c *Cluster) Leader() *Node { return c.node(c.tc.Leader().Node) }

// Follower returns a node that is not the leader.
func (c *Cluster) Follower() *Node { return c.node(c.tc.Follower().Node) }

// FollowerIndex returns the index in Nodes of a node that is not the
// leader, for Stop and Restart.
func (c *Cluster) FollowerIndex() int {
	f := c.Follower()
	for i, kn := range c.Nodes {
		if kn == f {
			return i
		}
	}
	panic("transporttest: a node the kit did not start")
}

func (c *Cluster) node(rn *replication.Node) *Node {
	for _, kn := range c.Nodes {
		if kn.Node == rn {
			return kn
		}
	}
	panic("transporttest: a node the kit did not start")
}

// Subscriber is what Receive reads: a subscription of the Go client, over
// HTTP or gRPC.
type Subscriber interface {
	Deliveries() <-chan api.Delivery
	Ack(d api.Delivery)
	Err() error
}

// Receive takes n deliveries from sub, acking each, and returns their ids.
func Receive(t testing.TB, sub Subscriber, n int) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	for len(got) < n {
		select {
		case d, ok := <-sub.Deliveries():
			if !ok {
				t.Fatalf("subscription ended after %d deliveries: %v", len(got), sub.Err())
			}
			got[d.ID] = true
			sub.Ack(d)
		case <-time.After(nettest.Patience):
			t.Fatalf("only %d of %d deliveries", len(got), n)
		}
	}
	return got
}

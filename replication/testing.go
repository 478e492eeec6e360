package replication

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication/raftlog"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// This file is the replication test kit: an in-process cluster of real
// nodes (Raft over loopback TCP, stores on disk in t.TempDir()), as
// hashicorp/raft ships its own in testing.go. Tests call each node's
// methods directly (the transport.Backend methods of *Node); the kit
// imports nothing above this package, so the transport's own kit can put
// the nodes behind HTTP.

// TestNode is one node of a TestCluster.
type TestNode struct {
	// Cfg is the node's configuration before TestCluster.Configure runs.
	Cfg Config
	// Node is the running node, nil while it is stopped.
	Node *Node

	loops testLoops // its registration loop
}

// TestCluster is a set of in-process nodes.
type TestCluster struct {
	t     testing.TB
	Nodes []*TestNode
	// Configure, when set, adjusts each node's config before it starts.
	Configure func(*Config)

	running running[*Node]
}

// FreeAddr returns a loopback address with a port free at the time of the
// call, chosen as FreePorts chooses it.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ports, err := FreePorts("127.0.0.1", 1)
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
}

// FreePorts returns n distinct TCP ports free on ip at the time of the
// call. They are taken below the system's ephemeral range where there is
// one: a port of that range may be handed, between this call and the
// node binding it, to an outgoing connection of the test itself (the nodes
// dial each other all the time) or to a listener on port 0 of any process,
// which on the wildcard address takes the port on every address. All n
// are held open until all are found, so that they differ.
func FreePorts(ip string, n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	const lowest = 10000
	hi := ephemeralLow()
	ports := make([]int, 0, n)
	for range n {
		var ln net.Listener
		for try := 0; ln == nil && hi > lowest && try < 100; try++ {
			ln, _ = net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(lowest+rand.IntN(hi-lowest))))
		}
		if ln == nil {
			var err error
			if ln, err = net.Listen("tcp", net.JoinHostPort(ip, "0")); err != nil {
				return nil, err
			}
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ephemeralLow is the lowest port the system hands to outgoing
// connections, 0 where it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	lo, _ := strconv.Atoi(f[0])
	return lo
}

// NewTestCluster starts n nodes as one new cluster and waits for a leader
// and for every member's addresses to be recorded.
// Each node's HTTPAddr is a free loopback address, recorded in the
// replicated metadata; nothing listens on it unless the caller serves it.
func NewTestCluster(t testing.TB, n int, configure func(*Config)) *TestCluster {
	t.Helper()
	return startCluster(t, configure, newTestConfigs(t, n))
}

// newTestConfigs returns the configs of n new members of one new cluster:
// free loopback addresses, data dirs under a test directory, quick expiry,
// no redelivery backoff and small log segments, so that each node writes
// less ahead and the log moves to a new segment, made from a spare, more
// often.
func newTestConfigs(t testing.TB, n int) []Config {
	var members []model.Member
	for i := range n {
		members = append(members, model.Member{ID: fmt.Sprintf("n%d", i+1), RaftAddr: FreeAddr(t), HTTPAddr: FreeAddr(t)})
	}
	base := t.TempDir()
	var cfgs []Config
	for _, m := range members {
		cfg := Config{
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

// StartTestCluster starts nodes with the given configs (data dirs and
// addresses set by the caller, e.g. a restored directory) and waits for a leader.
func StartTestCluster(t testing.TB, cfgs ...Config) *TestCluster {
	t.Helper()
	return startCluster(t, nil, cfgs)
}

func startCluster(t testing.TB, configure func(*Config), cfgs []Config) *TestCluster {
	t.Helper()
	c := &TestCluster{t: t, Configure: configure}
	for _, cfg := range cfgs {
		if cfg.Logger == nil {
			cfg.Logger = testLogger(t)
		}
		c.Nodes = append(c.Nodes, &TestNode{Cfg: cfg})
	}
	for i := range c.Nodes {
		c.Start(i)
	}
	t.Cleanup(c.Shutdown)
	c.Leader()
	// A member whose HTTP address is not yet recorded cannot be asked
	// anything (a removal's confirmation, the cluster view): the cluster
	// is formed once every member's addresses are replicated.
	WaitFor(t, 20*time.Second, "every member's addresses to be recorded", func() bool {
		for _, tn := range c.Nodes {
			if !tn.Node.HasSelf() {
				return false
			}
		}
		return true
	})
	return c
}

// testLogger is a test node's logger: its warnings and errors, in the
// test's log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", p)
	return len(p), nil
}

// Start (re)starts node i with its data directory. Until the replicated
// metadata holds the node's addresses, it asks the leader to record them,
// as the server command does through the leader's API.
func (c *TestCluster) Start(i int) {
	c.t.Helper()
	tn := c.Nodes[i]
	cfg := tn.Cfg
	if c.Configure != nil {
		c.Configure(&cfg)
	}
	node, err := Open(cfg)
	if err != nil {
		c.t.Fatalf("open node %s: %v", cfg.ID, err)
	}
	tn.Node = node
	c.running.set(cfg.ID, node)
	ctx := tn.loops.start()
	tn.loops.done.Go(func() { c.register(ctx, node, cfg) })
}

// register asks the leader to record node's addresses until they are.
func (c *TestCluster) register(ctx context.Context, node *Node, cfg Config) {
	recordAddresses(ctx, node, cfg, c.running.get)
}

// recordAddresses asks node's leader, found by leaderNode, to record node's
// addresses until the replicated metadata holds them or ctx is done.
func recordAddresses(ctx context.Context, node *Node, cfg Config, leaderNode func(id string) *Node) {
	self := cfg.self()
	for !node.HasSelf() && ctx.Err() == nil {
		if _, id := node.raft.LeaderWithID(); id != "" && string(id) != cfg.ID {
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
func (c *TestCluster) Stop(i int) {
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
func (c *TestCluster) Shutdown() {
	for i := range c.Nodes {
		c.Stop(i)
	}
}

// Leader waits for a leader whose dispatcher runs and returns it.
func (c *TestCluster) Leader() *TestNode {
	c.t.Helper()
	return waitFirst(c.t, "a leader", c.Nodes, func(tn *TestNode) bool { return tn.Node != nil && readyLeader(tn.Node) })
}

// readyLeader reports whether n leads and its dispatcher runs.
func readyLeader(n *Node) bool { return n.IsLeader() && n.Ready() == nil }

// waitFirst waits, as what, until one of nodes is ok and returns the
// first that is.
func waitFirst[T any](t testing.TB, what string, nodes []T, ok func(T) bool) T {
	t.Helper()
	var found T
	WaitFor(t, 20*time.Second, what, func() bool {
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

// running is a test cluster's running nodes (a *Node each, or a node's
// *Groups) by id, which the registration loops ask for their leader.
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
func (c *TestCluster) Follower() *TestNode {
	c.t.Helper()
	for _, tn := range c.Nodes {
		if tn.Node != nil && !tn.Node.IsLeader() {
			return tn
		}
	}
	c.t.Fatal("no follower")
	return nil
}

// WaitFor polls cond until it holds or timeout passes.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// SyncBuffer is a bytes.Buffer that one goroutine may write (a logger, a
// running command) while a test reads it from another.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TempDirFor returns a directory under the test's temp dir (helper for
// tests that manage data dirs themselves).
func TempDirFor(t testing.TB, name string) string {
	d := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

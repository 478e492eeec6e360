package replication

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/wheel"
)

// This file is the replication test kit: an in-process cluster of real
// nodes (Raft over loopback TCP, stores on disk in t.TempDir()), each behind
// the real HTTP API, as hashicorp/raft ships its own in testing.go.

// TestNode is one node of a TestCluster.
type TestNode struct {
	Cfg    Config
	Node   *Node
	URL    string // http://host:port of its API
	Client *client.Client

	ln     net.Listener
	cancel context.CancelFunc
	served chan error
}

// TestCluster is a set of in-process nodes.
type TestCluster struct {
	t     testing.TB
	Nodes []*TestNode
	// Configure, when set, adjusts each node's config before it starts.
	Configure func(*Config)
}

// FreeAddr returns a loopback address with a port free at the time of the call.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// NewTestCluster starts n nodes as one new cluster and waits for a leader.
func NewTestCluster(t testing.TB, n int, configure func(*Config)) *TestCluster {
	t.Helper()
	c := &TestCluster{t: t, Configure: configure}
	var members []wheel.Node
	for i := 0; i < n; i++ {
		members = append(members, wheel.Node{ID: fmt.Sprintf("n%d", i+1), RaftAddr: FreeAddr(t)})
	}
	base := t.TempDir()
	for _, m := range members {
		cfg := Config{
			ID: m.ID, DataDir: filepath.Join(base, m.ID), RaftAddr: m.RaftAddr,
			Logger:            slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
			RedeliveryBackoff: -1,
			ExpireGrace:       200 * time.Millisecond,
			// Small segments: each node writes less ahead, and the log
			// moves to a new segment, made from a spare, more often.
			LogSegmentBytes: MinLogSegmentBytes,
		}
		if n > 1 {
			cfg.InitialCluster = members
		}
		c.Nodes = append(c.Nodes, &TestNode{Cfg: cfg})
	}
	for i := range c.Nodes {
		c.Start(i)
	}
	t.Cleanup(c.Shutdown)
	c.Leader()
	return c
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", p)
	return len(p), nil
}

// Start (re)starts node i with its data directory.
func (c *TestCluster) Start(i int) {
	c.t.Helper()
	tn := c.Nodes[i]
	if tn.ln == nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			c.t.Fatalf("listen: %v", err)
		}
		tn.ln = ln
		tn.Cfg.HTTPAddr = ln.Addr().String()
		tn.URL = "http://" + tn.Cfg.HTTPAddr
		tn.Client = client.New(tn.URL)
	}
	cfg := tn.Cfg
	if c.Configure != nil {
		c.Configure(&cfg)
	}
	node, err := Open(cfg)
	if err != nil {
		c.t.Fatalf("open node %s: %v", cfg.ID, err)
	}
	tn.Node = node
	srv := transport.NewServer(transport.Config{Logger: cfg.Logger}, node)
	ctx, cancel := context.WithCancel(context.Background())
	tn.cancel = cancel
	tn.served = make(chan error, 1)
	ln := tn.ln
	go func() { tn.served <- srv.Serve(ctx, ln) }()
	go func() {
		for !node.HasSelf() && ctx.Err() == nil {
			if addr, isLeader, known := node.LeaderHTTP(); known && !isLeader {
				cl := client.New("http://" + addr)
				rctx, rc := context.WithTimeout(ctx, 2*time.Second)
				cl.AddNode(rctx, apiNode(cfg))
				rc()
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
}

// Stop shuts node i down cleanly (its HTTP listener is kept for a restart).
func (c *TestCluster) Stop(i int) {
	c.t.Helper()
	tn := c.Nodes[i]
	if tn.Node == nil {
		return
	}
	tn.Node.StepDown()
	tn.cancel()
	<-tn.served
	ln, err := net.Listen("tcp", tn.Cfg.HTTPAddr) // Serve closed it; hold the port
	if err == nil {
		tn.ln = ln
	}
	if err := tn.Node.Close(context.Background()); err != nil {
		c.t.Errorf("close %s: %v", tn.Cfg.ID, err)
	}
	tn.Node = nil
}

// Shutdown stops every node.
func (c *TestCluster) Shutdown() {
	for i, tn := range c.Nodes {
		c.Stop(i)
		if tn.ln != nil {
			tn.ln.Close()
		}
	}
}

// Leader waits for a leader whose dispatcher runs and returns it.
func (c *TestCluster) Leader() *TestNode {
	c.t.Helper()
	var found *TestNode
	WaitFor(c.t, 20*time.Second, "a leader", func() bool {
		for _, tn := range c.Nodes {
			if tn.Node != nil && tn.Node.IsLeader() && tn.Node.Ready() {
				found = tn
				return true
			}
		}
		return false
	})
	return found
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

// TempDirFor returns a directory under the test's temp dir (helper for
// tests that manage data dirs themselves).
func TempDirFor(t testing.TB, name string) string {
	d := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func apiNode(cfg Config) api.Node {
	return api.Node{ID: cfg.ID, RaftAddr: cfg.RaftAddr, HTTPAddr: cfg.HTTPAddr}
}

// StartTestCluster starts nodes with the given configs (data dirs and
// addresses set by the caller, e.g. a restored directory) and waits for a leader.
func StartTestCluster(t testing.TB, cfgs ...Config) *TestCluster {
	t.Helper()
	c := &TestCluster{t: t}
	for _, cfg := range cfgs {
		if cfg.Logger == nil {
			cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
		c.Nodes = append(c.Nodes, &TestNode{Cfg: cfg})
	}
	for i := range c.Nodes {
		c.Start(i)
	}
	t.Cleanup(c.Shutdown)
	c.Leader()
	return c
}

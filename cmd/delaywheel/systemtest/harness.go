package systemtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/transport/client"
)

// Build compiles ./cmd/delaywheel of the module that holds the working
// directory into dir and returns the binary's path. The binary is static
// (CGO_ENABLED=0), as the Docker image needs, so one build serves both.
func Build(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	bin := filepath.Join(dir, "delaywheel")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/delaywheel")
	cmd.Dir = filepath.Dir(gomod)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/delaywheel: %w\n%s", err, out)
	}
	return bin, nil
}

// ipSeq hands out loopback addresses; Linux routes all of 127/8 to lo.
var ipSeq atomic.Uint32

// NextIP returns a loopback address no other node of this process uses:
// 127.0.0.11, 127.0.0.12, …
func NextIP() string {
	n := 11 + ipSeq.Add(1) - 1
	// Keep the last octet in 1…254.
	hi, lo := n/254, n%254+1
	return fmt.Sprintf("127.0.%d.%d", hi, lo)
}

// DefaultFlags are the server flags every node of a test cluster gets
// unless Options.Flags replaces them: no redelivery backoff, so an expired
// lease comes back at once.
var DefaultFlags = []string{"--redelivery-backoff", "0", "--log-level", "info"}

// SnapshotFlags make snapshots happen often, so catch-up by snapshot and
// log truncation are exercised.
var SnapshotFlags = []string{"--snapshot-threshold", "64", "--trailing-logs", "32"}

// Options configure NewCluster.
type Options struct {
	// Nodes is the number of nodes (default 1). One node starts with no
	// cluster flags (it bootstraps itself); more start with --initial-cluster.
	Nodes int
	// Flags are extra server flags for every node, after DefaultFlags.
	Flags []string
	// NoWait returns without waiting for a leader and ready nodes.
	NoWait bool
	// Groups is the number of Raft groups every node runs (--groups);
	// 0 or 1 passes no flag: one group.
	Groups int

	// freePorts, when set, picks the ports of a node instead of
	// nettest.FreePorts (the harness's own tests take one).
	freePorts func(ip string, n int) ([]int, error)
}

// Cluster is a set of delaywheel processes started by a test.
type Cluster struct {
	t      testing.TB
	bin    string
	base   string
	flags  []string
	groups int // Raft groups per node, at least 1
	// freePorts picks a node's ports (nettest.FreePorts).
	freePorts func(ip string, n int) ([]int, error)

	mu    sync.Mutex
	nodes []*Server
	seq   int
}

// NewCluster starts opts.Nodes nodes of the binary bin, each once it has
// bound its listen addresses (Cluster.start: one whose port another process
// took meanwhile is started again on fresh ports), and, unless opts.NoWait,
// waits until they agree on a leader and all answer /readyz.
// Every process is killed when the test ends; on failure the tail of each
// node's log is printed.
func NewCluster(t testing.TB, bin string, opts Options) *Cluster {
	t.Helper()
	if opts.Nodes == 0 {
		opts.Nodes = 1
	}
	c := newCluster(t, bin, opts)
	var members []string
	for i := 0; i < opts.Nodes; i++ {
		n, err := c.newServer()
		if err != nil {
			t.Fatalf("new node: %v", err)
		}
		c.add(n)
		members = append(members, n.ID+"="+n.Advertise)
	}
	if opts.Nodes > 1 {
		for _, n := range c.Servers() {
			n.clusterArgs = []string{"--initial-cluster", strings.Join(members, ",")}
		}
	}
	for _, n := range c.Servers() {
		if err := c.start(n); err != nil {
			t.Fatalf("start %s: %v", n.ID, err)
		}
	}
	if !opts.NoWait {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := c.WaitLeader(ctx); err != nil {
			t.Fatalf("cluster did not come up: %v", err)
		}
		if err := c.WaitReady(ctx); err != nil {
			t.Fatalf("cluster did not become ready: %v", err)
		}
		// A majority elects a leader without the others; a test meant
		// for all of them must not go on with fewer.
		for _, n := range c.Servers() {
			if !n.Running() {
				t.Fatalf("%s exited at start:\n%s", n.ID, n.LogTail(20))
			}
		}
	}
	return c
}

// newCluster returns a cluster of no node yet, whose processes are killed
// when the test ends.
func newCluster(t testing.TB, bin string, opts Options) *Cluster {
	c := &Cluster{t: t, bin: bin, base: t.TempDir(), flags: append(append([]string{}, DefaultFlags...), opts.Flags...),
		groups: max(opts.Groups, 1), freePorts: opts.freePorts}
	if c.freePorts == nil {
		c.freePorts = nettest.FreePorts
	}
	if c.groups > 1 {
		c.flags = append(c.flags, "--groups", strconv.Itoa(c.groups))
	}
	t.Cleanup(c.cleanup)
	return c
}

// newServer allocates an IP, ports, a data dir and a Raft proxy for a node,
// which the cluster does not list until add.
func (c *Cluster) newServer() (*Server, error) {
	c.mu.Lock()
	c.seq++
	id := "n" + strconv.Itoa(c.seq)
	c.mu.Unlock()
	n := &Server{
		ID:      id,
		IP:      NextIP(),
		DataDir: filepath.Join(c.base, id, "data"),
		LogPath: filepath.Join(c.base, id, "node.log"),
		bin:     c.bin,
		flags:   c.flags,
	}
	if err := c.pickPorts(n); err != nil {
		return nil, err
	}
	// The proxy listens on port 0 and never lets go, so no other process
	// can take its port between a pick and a bind; port 0 gives a port of
	// the ephemeral range, which the node's three, taken below it, never
	// share.
	var err error
	n.Proxy, err = NewProxy(net.JoinHostPort(n.IP, "0"), n.RaftAddr)
	if err != nil {
		return nil, fmt.Errorf("raft proxy of %s: %w", id, err)
	}
	n.Advertise = n.Proxy.Addr()
	if err := os.MkdirAll(filepath.Dir(n.DataDir), 0o755); err != nil {
		n.Proxy.Close()
		return nil, err
	}
	return n, nil
}

// pickPorts gives n new HTTP, Raft and gRPC ports on its IP and points its
// client and, once it has one, its proxy at them. Every port is fixed
// here, taken together so that they differ: one left to port 0 when the
// node starts could be handed a port another listener of this node was
// given and has yet to bind.
func (c *Cluster) pickPorts(n *Server) error {
	ports, err := c.freePorts(n.IP, 3)
	if err != nil {
		return fmt.Errorf("ports of %s on %s: %w (is 127.0.0.0/8 routed to lo?)", n.ID, n.IP, err)
	}
	at := func(i int) string { return net.JoinHostPort(n.IP, strconv.Itoa(ports[i])) }
	n.HTTPAddr, n.RaftAddr, n.GRPCAddr = at(0), at(1), at(2)
	n.Client = client.New("http://"+n.HTTPAddr, client.WithHTTPClient(newHTTPClient()))
	if n.Proxy != nil {
		n.Proxy.Retarget(n.RaftAddr)
	}
	return nil
}

// add lists n among the cluster's nodes.
func (c *Cluster) add(n *Server) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes = append(c.nodes, n)
}

// maxPortRetries is how many times start starts a node again on new ports.
const maxPortRetries = 3

// start starts n, a node that has never run, and waits until it serves
// HTTP, which it does only once it holds all its listen addresses. Between
// the pick of a port and the node's bind another process may take it: a
// node that exits at start because a listen on one of its own addresses
// found the port in use (portInUse) gets new ports for its HTTP, Raft and
// gRPC listeners and starts again, up to maxPortRetries times. Its peers
// do not notice: they know it by its proxy's address (--raft-advertise,
// --initial-cluster), whose port the proxy holds and which now forwards to
// the new Raft port, and its HTTP address is recorded in the cluster only
// once it runs. Any other exit fails at once, with the node's log.
// A node started again later (Server.Start, Server.Restart) keeps the ports
// it ended up with.
func (c *Cluster) start(n *Server) error {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for attempt := 1; ; attempt++ {
		if err := n.Start(); err != nil {
			return err
		}
		err := n.waitServing(ctx)
		if err == nil {
			return nil
		}
		line, taken := portInUse(n.lastRun(), n.HTTPAddr, n.RaftAddr, n.GRPCAddr)
		if !taken {
			return err
		}
		if attempt > maxPortRetries {
			return fmt.Errorf("a port taken at each of %d starts: %w", attempt, err)
		}
		if err := c.pickPorts(n); err != nil {
			return err
		}
		c.t.Logf("%s exited at start, a port taken (%s): retry %d of %d on http %s, raft %s, grpc %s",
			n.ID, line, attempt, maxPortRetries, n.HTTPAddr, n.RaftAddr, n.GRPCAddr)
	}
}

// portInUse returns the line of run, the log of one run of a node, where
// the server exited because a listen on one of addrs found its port
// already in use ("error: …listen tcp ADDR: bind: address already in
// use"), and whether there is one.
func portInUse(run string, addrs ...string) (string, bool) {
	for _, line := range strings.Split(run, "\n") {
		if !strings.HasPrefix(line, "error: ") {
			continue
		}
		for _, a := range addrs {
			if strings.Contains(line, "listen tcp "+a+": bind: address already in use") {
				return line, true
			}
		}
	}
	return "", false
}

// AddJoiner creates a node with an empty data dir that joins the cluster
// through the member at joinHTTP (--join) and starts it (Cluster.start).
// It does not wait for it to be ready.
func (c *Cluster) AddJoiner(joinHTTP string) (*Server, error) {
	n, err := c.newServer()
	if err != nil {
		return nil, err
	}
	n.clusterArgs = []string{"--join", joinHTTP}
	// Listed only once started: start may change its addresses, which
	// the cluster's users read.
	err = c.start(n)
	c.add(n)
	return n, err
}

func (c *Cluster) cleanup() {
	for _, n := range c.Servers() {
		n.Kill()
		n.Proxy.Close()
	}
	if c.t.Failed() {
		for _, n := range c.Servers() {
			c.t.Logf("---- last lines of %s (%s, http %s, raft %s via %s) ----\n%s",
				n.ID, n.IP, n.HTTPAddr, n.RaftAddr, n.Advertise, n.LogTail(60))
		}
	}
}

// Servers returns every server the cluster has created, dead or alive.
func (c *Cluster) Servers() []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Server(nil), c.nodes...)
}

// Server returns the server with the given id, or nil.
func (c *Cluster) Server(id string) *Server {
	for _, n := range c.Servers() {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Live returns the nodes that are running and not paused.
func (c *Cluster) Live() []*Server {
	var out []*Server
	for _, n := range c.Servers() {
		if n.Running() && !n.Paused() {
			out = append(out, n)
		}
	}
	return out
}

// Others returns the live nodes other than the given ones.
func (c *Cluster) Others(not ...*Server) []*Server {
	var out []*Server
	for _, n := range c.Live() {
		skip := false
		for _, x := range not {
			skip = skip || x == n
		}
		if !skip {
			out = append(out, n)
		}
	}
	return out
}

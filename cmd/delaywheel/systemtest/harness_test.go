package systemtest

import (
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication/nettest"
)

// holdingPicker returns a port picker that, at the picks hold says, puts
// in the place of port i (of FreePorts' n) a port of ip it holds open until
// the test ends, as another process would that took the port before the
// node bound it, and counts the picks by IP. It holds its port before it
// picks the others, which so cannot be the same.
func holdingPicker(t *testing.T, hold func(ip string, pick int) (i int, ok bool)) (pick func(ip string, n int) ([]int, error), picks func(ip string) int, held func(ip string) []string) {
	var mu sync.Mutex
	count := map[string]int{}
	holds := map[string][]string{}
	pick = func(ip string, n int) ([]int, error) {
		mu.Lock()
		defer mu.Unlock()
		count[ip]++
		i, ok := hold(ip, count[ip])
		if !ok {
			return nettest.FreePorts(ip, n)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { ln.Close() })
		ports, err := nettest.FreePorts(ip, n)
		if err != nil {
			return nil, err
		}
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		holds[ip] = append(holds[ip], ln.Addr().String())
		return ports, nil
	}
	picks = func(ip string) int {
		mu.Lock()
		defer mu.Unlock()
		return count[ip]
	}
	held = func(ip string) []string {
		mu.Lock()
		defer mu.Unlock()
		return holds[ip]
	}
	return pick, picks, held
}

// TestStartRetriesTakenPort holds one of each node's first ports open (n1's
// HTTP port, n2's Raft port, n3's gRPC port): every node must exit at start
// with that port in use, get new ports and start again, and the three must
// form a cluster and all be ready, which the followers are only once their
// leader reaches them through their proxies at their new Raft ports. A
// follower restarted then keeps its new ports and is ready again.
func TestStartRetriesTakenPort(t *testing.T) {
	if testing.Short() {
		t.Skip("not with -short")
	}
	t.Parallel()
	nodes := 0
	pick, picks, held := holdingPicker(t, func(_ string, pick int) (int, bool) {
		if pick > 1 {
			return 0, false
		}
		nodes++
		return (nodes - 1) % 3, true // HTTP, Raft, gRPC
	})
	c := NewCluster(t, binary(t), Options{Nodes: 3, freePorts: pick})
	ctx := ctxFor(t, 60*time.Second)
	for _, n := range c.Servers() {
		h := held(n.IP)
		if len(h) != 1 {
			t.Fatalf("%s: %d ports held, want 1", n.ID, len(h))
		}
		if got := picks(n.IP); got != 2 {
			t.Errorf("%s: ports picked %d times, want 2", n.ID, got)
		}
		if got := n.LogCount(" start #"); got != 2 {
			t.Errorf("%s: started %d times, want 2", n.ID, got)
		}
		if !n.LogContains("listen tcp " + h[0] + ": bind: address already in use") {
			t.Errorf("%s: no exit on the held port %s in its log:\n%s", n.ID, h[0], n.LogTail(20))
		}
		for _, a := range []string{n.HTTPAddr, n.RaftAddr, n.GRPCAddr} {
			if a == h[0] {
				t.Errorf("%s still has the held address %s", n.ID, a)
			}
		}
	}

	l, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := c.Others(l)[0]
	addrs := []string{f.HTTPAddr, f.RaftAddr, f.GRPCAddr}
	if err := f.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := f.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if got := []string{f.HTTPAddr, f.RaftAddr, f.GRPCAddr}; !slices.Equal(got, addrs) || picks(f.IP) != 2 {
		t.Errorf("%s restarted on %v after %d picks, want %v after 2", f.ID, got, picks(f.IP), addrs)
	}
}

// TestStartGivesUp checks where the retry of a node's start stops: a node
// whose port is taken at every start is started maxPortRetries times more,
// then fails with its log; one that exits at start for another reason
// fails at once.
func TestStartGivesUp(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	start := func(t *testing.T, opts Options) (*Server, error) {
		c := newCluster(t, bin, opts)
		n, err := c.newServer()
		if err != nil {
			t.Fatal(err)
		}
		c.add(n)
		return n, c.start(n)
	}

	t.Run("port always taken", func(t *testing.T) {
		pick, picks, _ := holdingPicker(t, func(string, int) (int, bool) { return 2, true }) // gRPC
		n, err := start(t, Options{freePorts: pick})
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("start: %v, want the port in use", err)
		}
		if got, want := picks(n.IP), 1+maxPortRetries; got != want {
			t.Errorf("ports picked %d times, want %d", got, want)
		}
		if got, want := n.LogCount(" start #"), 1+maxPortRetries; got != want {
			t.Errorf("started %d times, want %d", got, want)
		}
	})

	t.Run("other exit", func(t *testing.T) {
		pick, picks, _ := holdingPicker(t, func(string, int) (int, bool) { return 0, false })
		n, err := start(t, Options{freePorts: pick, Flags: []string{"--raft-segment-bytes", "1"}})
		if err == nil || !strings.Contains(err.Error(), "error: --raft-segment-bytes 1") {
			t.Fatalf("start: %v, want the node's error in its log", err)
		}
		if got := picks(n.IP); got != 1 {
			t.Errorf("ports picked %d times, want 1", got)
		}
		if got := n.LogCount(" start #"); got != 1 {
			t.Errorf("started %d times, want 1", got)
		}
	})
}

// TestPortInUse checks that only the server's exit on one of the node's
// own addresses counts.
func TestPortInUse(t *testing.T) {
	addrs := []string{"127.0.0.30:4306", "127.0.0.30:4307"}
	for _, tc := range []struct {
		line string
		want bool
	}{
		{"error: --http-addr: listen tcp 127.0.0.30:4306: bind: address already in use", true},
		{`error: raft listen "127.0.0.30:4307": listen tcp 127.0.0.30:4307: bind: address already in use`, true},
		{"error: --http-addr: listen tcp 127.0.0.30:43061: bind: address already in use", false},
		{"error: --debug-addr: listen tcp 127.0.0.30:9000: bind: address already in use", false},
		{`time=… level=WARN msg="listen tcp 127.0.0.30:4306: bind: address already in use"`, false},
		{"error: --groups 0: want 1 to 255 Raft groups", false},
	} {
		run := "==== t start #1: delaywheel server\n" + tc.line + "\n==== t exit: exit status 1\n"
		if line, got := portInUse(run, addrs...); got != tc.want || got && line != tc.line {
			t.Errorf("portInUse(%q) = %q, %v; want %v", tc.line, line, got, tc.want)
		}
	}
}

package nettest

import (
	"bytes"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// FreeAddr returns a loopback address with a port free at the time of the
// call, chosen as FreePorts chooses it.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return FreeAddrs(t, 1)[0]
}

// FreeAddrs returns n distinct loopback addresses with ports free at the
// time of the call (FreePorts): the addresses of one cluster's members,
// which separate calls of FreeAddr could repeat.
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	ports, err := FreePorts("127.0.0.1", n)
	if err != nil {
		t.Fatalf("free ports: %v", err)
	}
	addrs := make([]string, n)
	for i, p := range ports {
		addrs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return addrs
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

// Logger is a test node's logger: its warnings and errors, in the test's
// log.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// Patience is how long the test kits wait for a cluster to reach a state
// (a leader elected, a node caught up, an entry applied): long enough for a
// machine busy with other tests, where a step that takes milliseconds alone
// can take seconds, and a wait on a condition costs nothing once it holds.
const Patience = time.Minute

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

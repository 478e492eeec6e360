package beanstalkd

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// Connections waiting on one tube reserve through one Backend.Reserve for
// all of them, and each gets a job of its own.
func TestWaitingReservesAreOneReserve(t *testing.T) {
	f := newFake()
	s, addr, _ := startServer(t, f, Config{})
	const n = 3
	cs := make([]*client, n)
	for i := range cs {
		cs[i] = dial(t, addr)
		cs[i].send("reserve")
	}
	until(t, "every connection waiting", func() bool {
		r := s.reserves(defaultTube)
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.waiters) == n
	})
	f.readyJobs(n)
	seen := map[string]bool{}
	for _, c := range cs {
		l := c.line()
		if !strings.HasPrefix(l, "RESERVED ") {
			t.Fatalf("reserve: %q", l)
		}
		seen[strings.Fields(l)[1]] = true
		c.line() // the body
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// The Reserve in flight when they all waited may ask for one job
	// only; the next asks for the others.
	if len(seen) != n || !slices.ContainsFunc(f.reserves, func(k int) bool { return k > 1 }) {
		t.Fatalf("jobs %v, handed out per Reserve %v", seen, f.reserves)
	}
}

// until polls cond until it holds (the test's deadline ends a hang).
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if t.Context().Err() != nil {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

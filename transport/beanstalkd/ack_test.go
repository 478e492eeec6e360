package beanstalkd

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// holding dials n connections that each reserve one of n ready jobs, and
// returns them with the job each holds.
func holding(t *testing.T, f *fakeBackend, addr string, n int) ([]*client, []string) {
	t.Helper()
	f.readyJobs(n)
	cs := make([]*client, n)
	jobs := make([]string, n)
	for i := range cs {
		cs[i] = dial(t, addr)
		fs, _ := cs[i].data("reserve-with-timeout 0", "RESERVED ")
		jobs[i] = fs[1]
	}
	return cs, jobs
}

// deleteBehindCalls sends the delete of each connection's job: the first
// maxAckCalls go each as its own call, held at f's ackGate, and the rest
// wait behind them, to go as one call once the gate opens. It then opens
// the gate and checks each delete's answer: DELETED but for the
// connections odd names.
func deleteBehindCalls(t *testing.T, s *Server, f *fakeBackend, gate chan struct{}, cs []*client, jobs []string, odd map[int]string) {
	t.Helper()
	for i, c := range cs[:maxAckCalls] {
		c.send("delete " + jobs[i])
		until(t, "the delete's own call in flight", func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.ackWait == i+1
		})
	}
	for i, c := range cs[maxAckCalls:] {
		c.send("delete " + jobs[maxAckCalls+i])
	}
	until(t, "the other deletes waiting", func() bool {
		a := s.acksOf(0)
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.pending) == len(cs)-maxAckCalls
	})
	close(gate)
	for i, c := range cs {
		want := cmp.Or(odd[i], "DELETED")
		if got := c.line(); got != want {
			t.Fatalf("delete %s: got %q, want %q", jobs[i], got, want)
		}
	}
}

// The deletes that arrive while the acks before them are in flight go
// together as one AckEach, and each is answered by its own part.
func TestDeletesInFlightAreOneAck(t *testing.T) {
	f := newFake()
	gate := make(chan struct{})
	f.ackGate = gate
	s, addr, _ := startServer(t, f, Config{})
	const n = maxAckCalls + 5
	cs, jobs := holding(t, f, addr, n)
	// The job of the last connection times out and goes back: its delete
	// is NOT_FOUND, the others' DELETED.
	f.mu.Lock()
	f.msgs[model.ID{Index: 100 + n - 1}].LeaseExpiresMs = f.now.UnixMilli()
	f.mu.Unlock()
	deleteBehindCalls(t, s, f, gate, cs, jobs, map[int]string{n - 1: "NOT_FOUND"})
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := append(slices.Repeat([]int{1}, maxAckCalls), n-maxAckCalls); !slices.Equal(f.acks, want) {
		t.Fatalf("receipts per AckEach %v; want %d calls of one and one of %d", f.acks, maxAckCalls, n-maxAckCalls)
	}
	for i := range n - 1 {
		if _, ok := f.msgs[model.ID{Index: uint64(100 + i)}]; ok {
			t.Fatalf("job %s answered DELETED is still there", jobs[i])
		}
	}
}

// A failed ack answers every delete of its call with the failure, never
// DELETED, and the jobs stay.
func TestFailedAckAnswersEachDelete(t *testing.T) {
	f := newFake()
	addr, _ := start(t, f, Config{})
	cs, jobs := holding(t, f, addr, 3)
	f.mu.Lock()
	f.err = fmt.Errorf("%w: the disk", model.ErrUnavailable)
	f.mu.Unlock()
	for i, c := range cs {
		c.do("delete "+jobs[i], "INTERNAL_ERROR")
	}
	f.mu.Lock()
	f.err = nil
	f.mu.Unlock()
	for i := range cs {
		if _, ok := f.msgs[model.ID{Index: uint64(100 + i)}]; !ok {
			t.Fatalf("job %s answered INTERNAL_ERROR is gone", jobs[i])
		}
	}
}

// An ack that surely reached no leader is made again.
func TestUnsentAckIsMadeAgain(t *testing.T) {
	f := newFake()
	gate := make(chan struct{}, 2)
	f.ackGate = gate
	addr, _ := start(t, f, Config{})
	cs, jobs := holding(t, f, addr, 1)
	f.mu.Lock()
	f.err = fmt.Errorf("%w: %w: no leader", ErrNotSent, model.ErrUnavailable)
	f.mu.Unlock()
	cs[0].send("delete " + jobs[0])
	gate <- struct{}{}
	until(t, "the ack asked twice", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.acks) >= 2 {
			f.err = nil
			return true
		}
		return false
	})
	gate <- struct{}{}
	if got := cs[0].line(); got != "DELETED" {
		t.Fatalf("delete after a leader change: %q", got)
	}
}

// Each delete of a call is answered by its own outcome, as when each is
// its own forwarded ack: the one whose ack failed with the failure (and
// its job stays), the others DELETED, and only the one that surely
// reached no leader is acked again.
func TestDeleteAnsweredByItsOwnAck(t *testing.T) {
	const n = maxAckCalls + 3
	failed, unsent := model.ID{Index: 100 + n - 2}, model.ID{Index: 100 + n - 1}
	sent := false
	f := newFake()
	f.ackFail = func(r model.Receipt) error {
		switch {
		case r.ID == failed:
			return fmt.Errorf("%w: the leader's answer was lost", model.ErrUnavailable)
		case r.ID == unsent && !sent:
			sent = true
			return fmt.Errorf("%w: %w: no leader", ErrNotSent, model.ErrUnavailable)
		}
		return nil
	}
	gate := make(chan struct{})
	f.ackGate = gate
	s, addr, _ := startServer(t, f, Config{})
	cs, jobs := holding(t, f, addr, n)
	deleteBehindCalls(t, s, f, gate, cs, jobs, map[int]string{n - 2: "INTERNAL_ERROR"})
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := append(slices.Repeat([]int{1}, maxAckCalls), 3, 1); !slices.Equal(f.acks, want) {
		t.Fatalf("receipts per AckEach %v; want %d calls of one, one of 3, then one of 1", f.acks, maxAckCalls)
	}
	if _, ok := f.msgs[failed]; !ok {
		t.Fatalf("job %s answered INTERNAL_ERROR is gone", jobs[n-2])
	}
}

// A delete pipelined with the next reserve is answered before the reserve
// is, whether a job is there for it or the reserve waits for one.
func TestDeletePipelinedWithReserve(t *testing.T) {
	f := newFake()
	addr, _ := start(t, f, Config{})
	cs, jobs := holding(t, f, addr, 2)
	c := cs[0]
	c.raw("delete " + jobs[0] + "\r\nreserve\r\n")
	if got := c.line(); got != "DELETED" {
		t.Fatalf("pipelined delete: %q", got)
	}
	// The reserve waits: its delete's answer came all the same.
	cs[1].do("delete "+jobs[1], "DELETED")
	id := cs[1].put(1024, 0, 60, "next")
	if got := c.line(); got != "RESERVED "+id+" 4" {
		t.Fatalf("pipelined reserve: %q", got)
	}
	c.line() // the body
	cs[1].put(1024, 0, 60, "ready")
	c.raw("delete " + id + "\r\nreserve\r\n")
	if got := c.line(); got != "DELETED" {
		t.Fatalf("pipelined delete with a job ready: %q", got)
	}
	if got := c.line(); !strings.HasPrefix(got, "RESERVED ") {
		t.Fatalf("pipelined reserve with a job ready: %q", got)
	}
}

// The reserve pipelined after a delete takes its job while the delete's
// ack is in flight, and is answered after the delete.
func TestReserveRunsWhileItsDeleteCommits(t *testing.T) {
	f := newFake()
	gate := make(chan struct{})
	addr, _ := start(t, f, Config{})
	cs, jobs := holding(t, f, addr, 1)
	c := cs[0]
	id := c.put(1024, 0, 60, "next")
	f.mu.Lock()
	f.ackGate = gate
	reserves := len(f.reserves)
	f.mu.Unlock()
	c.raw("delete " + jobs[0] + "\r\nreserve\r\n")
	until(t, "the reserve handed out a job while the ack waits", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.ackWait == 1 && len(f.reserves) > reserves && f.reserves[len(f.reserves)-1] == 1
	})
	close(gate)
	if got := c.line(); got != "DELETED" {
		t.Fatalf("pipelined delete: %q", got)
	}
	if got := c.line(); got != "RESERVED "+id+" 4" {
		t.Fatalf("pipelined reserve: %q", got)
	}
}

// A delete whose ack failed leaves its job held by the connection, its
// lease running: the delete asked again acks it (DELETED), not NOT_FOUND,
// whether the failed delete was answered alone, with the answer of the
// reserve pipelined after it, or while that reserve waits.
func TestDeleteAgainAfterFailedAck(t *testing.T) {
	f := newFake()
	addr, _ := start(t, f, Config{})
	cs, jobs := holding(t, f, addr, 3)
	fail := func(on bool) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.ackFail = nil
		if on {
			f.ackFail = func(model.Receipt) error { return fmt.Errorf("%w: the leader's answer was lost", model.ErrUnavailable) }
		}
	}
	fail(true)
	cs[0].do("delete "+jobs[0], "INTERNAL_ERROR")
	cs[1].raw("delete " + jobs[1] + "\r\nreserve-with-timeout 0\r\n")
	for _, want := range []string{"INTERNAL_ERROR", "TIMED_OUT"} {
		if got := cs[1].line(); got != want {
			t.Fatalf("delete pipelined with a reserve, its ack failing: %q, want %q", got, want)
		}
	}
	// No job is ready: the reserve waits, and the delete is answered
	// meanwhile.
	cs[2].raw("delete " + jobs[2] + "\r\nreserve\r\n")
	if got := cs[2].line(); got != "INTERNAL_ERROR" {
		t.Fatalf("delete pipelined with a waiting reserve, its ack failing: %q", got)
	}
	fail(false)
	id := cs[0].put(1024, 0, 60, "next")
	if got := cs[2].line(); got != "RESERVED "+id+" 4" {
		t.Fatalf("pipelined reserve: %q", got)
	}
	cs[2].line() // the body
	for i, c := range cs {
		c.do("delete "+jobs[i], "DELETED")
	}
}

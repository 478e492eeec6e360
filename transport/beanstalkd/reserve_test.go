package beanstalkd

import (
	"strconv"
	"testing"
	"time"
)

// armedAt waits until the connection has armed its n-th timer and
// returns that timer's instant.
func armedAt(t *testing.T, f *fakeBackend, n int) time.Time {
	t.Helper()
	until(t, "timer "+strconv.Itoa(n)+" armed", func() bool { return len(f.timers()) >= n })
	ts := f.timers()
	if len(ts) != n {
		t.Fatalf("timers armed %v, want %d", ts, n)
	}
	return ts[n-1]
}

// A reserve-with-timeout answers TIMED_OUT once the clock reads its
// deadline, however unevenly the clock moves past the ends of its waits
// (each at most MaxWait), and a job due before the deadline is reserved.
// One with a timeout of 0 answers at once.
func TestReserveWithTimeoutKeepsItsDeadline(t *testing.T) {
	f := newFake()
	addr, _ := start(t, f, Config{MaxWait: 700 * time.Millisecond, At: f.At})
	c := dial(t, addr)
	ms := time.Millisecond

	c.do("reserve-with-timeout 0", "TIMED_OUT") // the clock never moves
	if ts := f.timers(); len(ts) != 0 {
		t.Fatalf("reserve-with-timeout 0 waited: timers %v", ts)
	}

	start := f.Now()
	c.send("reserve-with-timeout 2")
	if at := armedAt(t, f, 1); !at.Equal(start.Add(700 * ms)) {
		t.Fatalf("first wait until %v, want start+700ms", at.Sub(start))
	}
	f.advance(500 * ms)
	f.advance(400 * ms) // past the first wait's end, by 200ms
	if at := armedAt(t, f, 2); !at.Equal(start.Add(1600 * ms)) {
		t.Fatalf("second wait until start+%v, want start+1.6s", at.Sub(start))
	}
	f.advance(800 * ms) // past the second wait's end, by 100ms
	if at := armedAt(t, f, 3); !at.Equal(start.Add(2 * time.Second)) {
		t.Fatalf("last wait until start+%v, want the deadline, start+2s", at.Sub(start))
	}
	f.advance(299 * ms)
	f.advance(ms)
	if l := c.line(); l != "TIMED_OUT" {
		t.Fatalf("reserve-with-timeout 2 at its deadline: %q", l)
	}
	if ts := f.timers(); len(ts) != 3 {
		t.Fatalf("timers %v, want 3: a wait armed at or past the deadline", ts)
	}

	id := c.put(1, 1, 60, "x") // due in a second
	start = f.Now()
	c.send("reserve-with-timeout 2")
	armedAt(t, f, 4)
	f.advance(300 * ms)
	f.advance(500 * ms) // past the first wait's end
	if at := armedAt(t, f, 5); !at.Equal(start.Add(1500 * ms)) {
		t.Fatalf("second wait until start+%v, want start+1.5s", at.Sub(start))
	}
	f.advance(400 * ms) // the job is due
	if l := c.line(); l != "RESERVED "+id+" 1" {
		t.Fatalf("reserve-with-timeout 2 of a job due within it: %q", l)
	}
	c.line() // the body
}

package raftlog

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

// waitClock is a fake clock that tells waiting of each wait it starts.
type waitClock struct {
	*wheeltest.FakeClock
	waiting chan time.Duration
}

func (c waitClock) After(d time.Duration) <-chan time.Time {
	ch := c.FakeClock.After(d)
	c.waiting <- d
	return ch
}

// At tells waiting of the wait until t, from the clock's reading.
func (c waitClock) At(t time.Time) <-chan time.Time {
	d := t.Sub(c.Now())
	ch := c.FakeClock.At(t)
	c.waiting <- d
	return ch
}

// openLingerLog opens a log in a new directory with the commit window
// linger on a fake clock.
func openLingerLog(t *testing.T, linger time.Duration) (*Log, waitClock) {
	t.Helper()
	clock := waitClock{FakeClock: wheeltest.NewFakeClock(time.Unix(1e9, 0)), waiting: make(chan time.Duration, 1)}
	l, err := Open(t.TempDir(), Options{SegmentBytes: MinSegmentBytes, CommitLinger: linger, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

// store starts StoreLogs of entry i and returns the channel its result
// comes on.
func store(l *Log, i uint64) <-chan error {
	done := make(chan error, 1)
	go func() { done <- l.StoreLogs([]*raft.Log{{Index: i, Term: 1, Data: []byte{byte(i)}}}) }()
	return done
}

// storeNow stores entry i and fails if the write waited.
func storeNow(t *testing.T, l *Log, c waitClock, i uint64) {
	t.Helper()
	done := store(l, i)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	case d := <-c.waiting:
		t.Fatalf("entry %d waited %v, want no wait", i, d)
	}
}

func TestCommitWindow(t *testing.T) {
	const linger = time.Millisecond
	l, clock := openLingerLog(t, linger)
	defer l.Close()

	storeNow(t, l, clock, 1) // the first write does not wait

	// A write within the window waits for its end, and only for it.
	clock.Advance(400 * time.Microsecond)
	done := store(l, 2)
	if d := <-clock.waiting; d != 600*time.Microsecond {
		t.Fatalf("second write waits %v, want 600µs", d)
	}
	clock.Advance(599 * time.Microsecond)
	select {
	case err := <-done:
		t.Fatalf("second write done before the window ended (%v)", err)
	default:
	}
	clock.Advance(time.Microsecond)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if last, err := l.LastIndex(); err != nil || last != 2 {
		t.Fatalf("last index %d (%v), want 2", last, err)
	}

	// A write after a quiet spell longer than the window does not wait.
	clock.Advance(linger + time.Microsecond)
	storeNow(t, l, clock, 3)
}

func TestCommitWindowClose(t *testing.T) {
	l, clock := openLingerLog(t, time.Hour)
	storeNow(t, l, clock, 1)
	done := store(l, 2)
	<-clock.waiting
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	<-done // closing ends the wait; the write then meets a closed log or lands
}

func TestCommitWindowOff(t *testing.T) {
	l, clock := openLingerLog(t, 0)
	defer l.Close()
	for i := uint64(1); i <= 3; i++ {
		storeNow(t, l, clock, i)
	}
}

// A write held back by the window starts once the clock reads the window's
// end, even when the clock reached it while the write armed its wait:
// nothing need move the clock again.
func TestCommitWindowEndsWhenClockMovesWhileArming(t *testing.T) {
	const linger = time.Millisecond
	clock := wheeltest.NewMovingClock(time.Unix(1e9, 0)) // its first timer is the second write's
	l, err := Open(t.TempDir(), Options{SegmentBytes: MinSegmentBytes, CommitLinger: linger, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := <-store(l, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-store(l, 2):
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the second write still waits with the clock at %v, the window ending at %v", clock.Now(), time.Unix(1e9, 0).Add(linger))
	}
}

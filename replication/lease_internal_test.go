package replication

import (
	"context"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

// armingClock is a fake clock that tells, on armed, the instant of each
// timer armed on it.
type armingClock struct {
	*wheeltest.FakeClock
	armed chan time.Time
}

func (c armingClock) After(d time.Duration) <-chan time.Time {
	c.armed <- c.Now().Add(d)
	return c.FakeClock.After(d)
}

func (c armingClock) At(t time.Time) <-chan time.Time {
	c.armed <- t
	return c.FakeClock.At(t)
}

// Confirmation rounds start at multiples of the period from the loop's
// start, however long each round takes: a round slower than expected does
// not push the later ones back, and one that outlasts the period skips the
// instant it ran past.
func TestConfirmRoundsKeepTheirPace(t *testing.T) {
	origin := time.Unix(1_700_000_000, 0)
	clk := armingClock{wheeltest.NewFakeClock(origin), make(chan time.Time, 1)}
	rounds := make(chan time.Time)
	release := make(chan struct{})
	quit := make(chan struct{})
	l := &leadershipLease{
		n:     &Node{cfg: Config{HeartbeatTimeout: 500 * time.Millisecond}}, // a period of 100 ms
		clock: clk,
		verify: func() error {
			select {
			case rounds <- clk.Now():
			case <-quit:
				return context.Canceled
			}
			select {
			case <-release:
			case <-quit:
			}
			return nil
		},
	}
	l.start(context.Background())
	defer l.stop()
	defer close(quit)

	recv := func(ch <-chan time.Time, what string) time.Time {
		t.Helper()
		select {
		case at := <-ch:
			return at
		case <-time.After(nettest.Patience):
			t.Fatalf("no %s", what)
			return time.Time{}
		}
	}
	ms := func(n int) time.Time { return origin.Add(time.Duration(n) * time.Millisecond) }
	for i, r := range []struct {
		start time.Time     // when the round starts
		takes time.Duration // how long it takes
		next  time.Time     // when the next round is due
	}{
		{ms(0), 10 * time.Millisecond, ms(100)},
		{ms(100), 70 * time.Millisecond, ms(200)},  // slower than expected
		{ms(200), 150 * time.Millisecond, ms(400)}, // past the period: 300 is skipped
		{ms(400), 20 * time.Millisecond, ms(500)},
		{ms(500), 100 * time.Millisecond, ms(600)}, // ends just at the next instant
		{ms(600), 0, ms(700)},
	} {
		if got := recv(rounds, "round"); !got.Equal(r.start) {
			t.Fatalf("round %d started at +%v, want +%v", i, got.Sub(origin), r.start.Sub(origin))
		}
		clk.Advance(r.takes)
		release <- struct{}{}
		next := recv(clk.armed, "timer armed for the next round")
		if !next.Equal(r.next) {
			t.Fatalf("after round %d (from +%v, taking %v), the next is due at +%v, want +%v",
				i, r.start.Sub(origin), r.takes, next.Sub(origin), r.next.Sub(origin))
		}
		if c := time.Unix(0, l.confirmedNs.Load()); !c.Equal(r.start) {
			t.Fatalf("round %d confirmed the lease at +%v, want its start +%v", i, c.Sub(origin), r.start.Sub(origin))
		}
		clk.Set(next)
	}
}

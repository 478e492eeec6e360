package wheel

import "time"

// Clocks. The store never reads a clock: time reaches it inside commands.
// What waits (the loader's Next, the layers above) takes a Clock, so that
// tests can drive it with a fake clock (wheeltest.FakeClock).

// Clock is the source of time for everything that waits. Production uses
// SystemClock; tests inject a wheeltest.FakeClock.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
	// At returns a channel that receives once the clock reads t or later.
	// A wait for an instant uses At, not After(t.Sub(Now())): the clock
	// may move between the read and the arming, and a fake clock's timer
	// armed late would then wait past t for a move that never comes.
	At(t time.Time) <-chan time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// After is time.After.
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// At is time.After(time.Until(t)).
func (SystemClock) At(t time.Time) <-chan time.Time { return time.After(time.Until(t)) }

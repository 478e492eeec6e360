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
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// After is time.After.
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

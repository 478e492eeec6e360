package wheeltest

import (
	"sync"
	"time"
)

// FakeClock is a wheel.Clock that moves only when told to.
type FakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

// NewFakeClock returns a fake clock reading start.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// Now returns the fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives once the clock has been advanced by d.
func (c *FakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.atLocked(c.now.Add(d))
}

// At returns a channel that receives once the clock reads t or later.
func (c *FakeClock) At(t time.Time) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.atLocked(t)
}

func (c *FakeClock) atLocked(t time.Time) <-chan time.Time {
	ch := make(chan time.Time, 1)
	if !t.After(c.now) {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: t, ch: ch})
	return ch
}

// Advance moves the clock forward and fires the timers that came due.
func (c *FakeClock) Advance(d time.Duration) {
	c.Set(c.Now().Add(d))
}

// Set moves the clock to t (never backwards) and fires due timers.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// MovingClock is a FakeClock that moves, once, to the instant of the first
// timer armed on it just before arming it: as if a test's Advance ran
// between a waiter's read of the clock and its arming. A waiter that arms
// a timer for a span it computed from its read waits past the instant.
type MovingClock struct {
	*FakeClock
	once sync.Once
}

// NewMovingClock returns a MovingClock reading start.
func NewMovingClock(start time.Time) *MovingClock {
	return &MovingClock{FakeClock: NewFakeClock(start)}
}

// After moves the clock by d if it has not moved yet, then arms a timer
// for d from the clock's reading.
func (c *MovingClock) After(d time.Duration) <-chan time.Time {
	c.once.Do(func() { c.Advance(d) })
	return c.FakeClock.After(d)
}

// At moves the clock to t if it has not moved yet, then arms a timer for t.
func (c *MovingClock) At(t time.Time) <-chan time.Time {
	c.once.Do(func() { c.Set(t) })
	return c.FakeClock.At(t)
}

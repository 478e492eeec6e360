package wheel

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/vfs"
)

// This file is the wheel's test kit, used by this package's tests and by
// the layers above: a fake clock and crash simulation on a strict in-memory
// file system.

// FakeClock is a Clock that moves only when told to.
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
	ch := make(chan time.Time, 1)
	at := c.now.Add(d)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: at, ch: ch})
	return ch
}

// Waiters is the number of pending After calls, so tests can wait until a
// goroutine is blocked on the clock before advancing it.
func (c *FakeClock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
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

// CrashForTest simulates a power loss under the store: it closes the store
// without syncing and drops every write fs had not synced. fs must be the
// strict in-memory file system the store was opened on.
func (s *Store) CrashForTest(fs *vfs.MemFS) {
	fs.SetIgnoreSyncs(true)
	s.mu.Lock()
	if s.segs != nil {
		s.segs.Close()
		s.segs = nil
	}
	if s.db != nil {
		s.db.Close()
		s.db = nil
	}
	s.broken = ErrClosed
	s.mu.Unlock()
	fs.ResetToSyncedState()
	fs.SetIgnoreSyncs(false)
}

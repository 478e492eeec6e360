package raftlog

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/wheel"
)

// commitWindow spaces the log's writes: a write begins at least linger
// after the previous one began. Invariant: each write costs one fsync
// whatever it holds, and Raft hands the log every proposal queued while
// the previous write and this wait ran, so the log's writes per second
// are at most 1/linger however many proposals arrive; a write that
// follows a quiet spell longer than linger does not wait. The price is up
// to linger more latency on every entry written under load.
type commitWindow struct {
	linger time.Duration
	clock  wheel.Clock
	closed chan struct{} // closed by close: waits end at once

	mu        sync.Mutex
	last      time.Time // when the previous write began
	closeOnce sync.Once
}

// newCommitWindow returns the window of linger (none when linger <= 0).
func newCommitWindow(linger time.Duration, clock wheel.Clock) *commitWindow {
	if clock == nil {
		clock = wheel.SystemClock{}
	}
	return &commitWindow{linger: linger, clock: clock, closed: make(chan struct{})}
}

// wait returns once linger has passed since the previous write began, or
// at once when the window is closed, and notes that a write begins now.
func (w *commitWindow) wait() {
	if w.linger <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.clock.Now()
	if end := w.last.Add(w.linger); !w.last.IsZero() && end.After(now) {
		select {
		case <-w.clock.At(end):
		case <-w.closed:
		}
		now = w.clock.Now()
	}
	w.last = now
}

// close ends every wait, present and future.
func (w *commitWindow) close() { w.closeOnce.Do(func() { close(w.closed) }) }

// StoreLogs appends logs with one write and one fsync, once the commit
// window (Options.CommitLinger) since the previous write has passed.
func (l *Log) StoreLogs(logs []*raft.Log) error {
	l.window.wait()
	return l.WAL.StoreLogs(logs)
}

// StoreLog appends one entry (see StoreLogs).
func (l *Log) StoreLog(e *raft.Log) error { return l.StoreLogs([]*raft.Log{e}) }

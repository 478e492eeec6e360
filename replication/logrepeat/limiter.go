package logrepeat

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// RepeatedKey is the attribute that carries how many repeats of a line
// were left out since it was last logged.
const RepeatedKey = "repeated"

// maxCauses bounds the causes a Limiter remembers: past it, those not
// seen within the window are forgotten (with their counts).
const maxCauses = 4096

// Limiter lets a line keyed by its cause through at most once per window.
// It is safe for concurrent use.
type Limiter struct {
	window time.Duration
	now    func() time.Time

	mu   sync.Mutex
	last map[string]seen
}

type seen struct {
	at         time.Time
	suppressed int
}

// New returns a Limiter of the given window on the clock now.
func New(window time.Duration, now func() time.Time) *Limiter {
	return &Limiter{window: window, now: now, last: map[string]seen{}}
}

// Allow reports whether a line of cause key may be logged now, and how
// many were left out since it last was.
func (l *Limiter) Allow(key string) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	s, known := l.last[key]
	if known && now.Sub(s.at) < l.window {
		s.suppressed++
		l.last[key] = s
		return 0, false
	}
	if !known && len(l.last) >= maxCauses {
		for k, s := range l.last {
			if now.Sub(s.at) >= l.window {
				delete(l.last, k)
			}
		}
	}
	l.last[key] = seen{at: now}
	return s.suppressed, true
}

// Log logs msg at level on log unless a line of cause key was logged
// within the window, adding the count of those left out (RepeatedKey)
// when there were any.
func (l *Limiter) Log(log *slog.Logger, level slog.Level, key, msg string, args ...any) {
	n, ok := l.Allow(key)
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, RepeatedKey, n)
	}
	log.Log(context.Background(), level, msg, args...)
}

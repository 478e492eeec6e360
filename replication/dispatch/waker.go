package dispatch

import (
	"time"

	"github.com/delaywheel/delaywheel/wheel"
)

// waker wakes the fire loop at the next due instant. Go's timers may fire up
// to a millisecond late on an idle process (the runtime sleeps in whole
// milliseconds), which is as long as the precision the wheel promises. On
// Linux, with the system clock, the dispatcher arms an alarm on a timerfd
// instead: the kernel wakes the runtime's poller at the instant itself.
// Elsewhere, or with an injected clock, it uses the clock's timers.
//
// A wake-up is only a hint to look: the fire loop pops what the clock says
// is due, so a stale or early wake-up never hands a message out early.
type waker struct {
	clock wheel.Clock
	alarm *alarm // nil: use clock.After
}

func newWaker(clock wheel.Clock) (*waker, error) {
	w := &waker{clock: clock}
	if _, ok := clock.(wheel.SystemClock); ok {
		a, err := newAlarm()
		if err != nil {
			return w, err
		}
		w.alarm = a
	}
	return w, nil
}

// at returns a channel that receives at (or, rarely, before) t.
func (w *waker) at(t time.Time) <-chan time.Time {
	if w.alarm != nil {
		if c, ok := w.alarm.at(t); ok {
			return c
		}
	}
	return w.clock.After(t.Sub(w.clock.Now()))
}

// close releases the alarm.
func (w *waker) close() {
	if w.alarm != nil {
		w.alarm.close()
	}
}

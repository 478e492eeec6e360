package dispatch

import (
	"time"

	"github.com/delaywheel/delaywheel/wheel"
)

// waker wakes the fire loop at the next due instant. Go's timers may fire up
// to a millisecond late on an idle process (the runtime sleeps in whole
// milliseconds), which is as long as the precision the wheel promises. On
// Linux, with the system clock, the dispatcher also arms an alarm on a
// timerfd: the kernel wakes the runtime's poller at the instant itself.
//
// The alarm alone is not enough on a busy process: the runtime reads its
// poller, and so the timerfd, only when a processor runs out of goroutines
// to run, or else every 10 ms from its monitor, while it runs due timers at
// every scheduling point. So the fire loop waits for both, the alarm and
// a timer, and wakes on whichever comes first: the alarm is the precise
// one on an idle process, the timer the prompt one on a busy process.
//
// A wake-up is only a hint to look: the fire loop pops what the clock says
// is due, so a stale or early wake-up never hands a message out early.
type waker struct {
	clock wheel.Clock
	alarm *alarm // nil: the timer alone
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

// at returns two channels, one of which receives at (or, rarely, before)
// t, whichever is first: the clock's timer, and the alarm (nil when there
// is none; a nil channel never receives).
func (w *waker) at(t time.Time) (timer, alarm <-chan time.Time) {
	if w.alarm != nil {
		alarm, _ = w.alarm.at(t)
	}
	return w.clock.At(t), alarm
}

// close releases the alarm.
func (w *waker) close() {
	if w.alarm != nil {
		w.alarm.close()
	}
}

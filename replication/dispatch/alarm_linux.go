package dispatch

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// alarm is a timerfd on the wall clock, read through the runtime's poller
// by a goroutine that forwards each expiry to c.
type alarm struct {
	f      *os.File
	fd     int
	c      chan time.Time
	broken atomic.Bool // the timerfd failed: callers fall back to timers
	done   sync.WaitGroup
}

func newAlarm() (*alarm, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_REALTIME, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	a := &alarm{f: os.NewFile(uintptr(fd), "timerfd"), fd: fd, c: make(chan time.Time, 1)}
	a.done.Add(1)
	go a.read()
	return a, nil
}

func (a *alarm) read() {
	defer a.done.Done()
	var buf [8]byte // the number of expiries since the last read
	for {
		if _, err := a.f.Read(buf[:]); err != nil {
			a.broken.Store(true)
			return // closed
		}
		select {
		case a.c <- time.Now():
		default: // a wake-up is pending already
		}
	}
}

// at arms the alarm for t, replacing the previous setting, and returns the
// channel it fires on; ok is false when the alarm cannot be used.
func (a *alarm) at(t time.Time) (<-chan time.Time, bool) {
	if a.broken.Load() {
		return nil, false
	}
	select {
	case <-a.c: // drop a wake-up for an earlier setting
	default:
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(t.UnixNano())}
	if err := unix.TimerfdSettime(a.fd, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
		return nil, false
	}
	return a.c, true
}

// close stops the alarm and waits for its reader.
func (a *alarm) close() {
	a.broken.Store(true)
	a.f.Close()
	a.done.Wait()
}

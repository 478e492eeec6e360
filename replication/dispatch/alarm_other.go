//go:build !linux

package dispatch

import "time"

// alarm is only available on Linux; elsewhere the waker uses timers.
type alarm struct{}

// newAlarm returns no alarm and no error: timers are what this system has.
func newAlarm() (*alarm, error) { return nil, nil }

func (*alarm) at(time.Time) (<-chan time.Time, bool) { return nil, false }

func (*alarm) close() {}

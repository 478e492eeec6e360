package service

import (
	"cmp"
	"strconv"
)

// Limits bound what a request may ask for. A zero field takes its default.
type Limits struct {
	MaxBodyBytes       int   // per message body; default 1 MiB
	MaxBatch           int   // messages per enqueue, receipts per ack/nack/touch/bury, ids per redrive; default 10000
	MaxRequestBytes    int64 // whole request body; default 32 MiB
	MaxDelayMs         int64 // furthest delay or deliver_at ahead; default 10 years
	MaxTopicLen        int   // default 200
	MaxKeyLen          int   // default 256
	MaxHeaders         int   // default 64
	MaxHeaderKeyLen    int   // default 256
	MaxHeaderValueLen  int   // default 4096
	MinTTRMs           int64 // default 1 ms
	MaxTTRMs           int64 // default 24 h
	DefaultTTRMs       int64 // default 30 s
	MaxAttempts        int32 // upper bound of max_attempts; default 1000
	DefaultMaxAttempts int32 // default 10
	MaxReserve         int   // upper bound of a reserve's max; default 1000
	MaxWaitMs          int64 // upper bound of wait_ms; default 300000 (5 min)
	MaxWaiters         int   // concurrent long-polls (wait_ms > 0) per node; default 10000
	DefaultDeadLimit   int   // default 100
	MaxDeadLimit       int   // default 1000
	DefaultInflight    int   // a stream's max_inflight when unset; default 1000
	MaxInflight        int   // upper bound of max_inflight; default 100000
	MaxStreams         int   // concurrent streams per node; default 1000
}

// Durations in milliseconds.
const (
	msSecond = int64(1000)
	msMinute = 60 * msSecond
	msHour   = 60 * msMinute
	msDay    = 24 * msHour
	msYear   = 365 * msDay
)

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{
		MaxBodyBytes:       1 << 20,
		MaxBatch:           10000,
		MaxRequestBytes:    32 << 20,
		MaxDelayMs:         10 * msYear,
		MaxTopicLen:        200,
		MaxKeyLen:          256,
		MaxHeaders:         64,
		MaxHeaderKeyLen:    256,
		MaxHeaderValueLen:  4096,
		MinTTRMs:           1,
		MaxTTRMs:           msDay,
		DefaultTTRMs:       30 * msSecond,
		MaxAttempts:        1000,
		DefaultMaxAttempts: 10,
		MaxReserve:         1000,
		MaxWaitMs:          5 * msMinute,
		MaxWaiters:         10000,
		DefaultDeadLimit:   100,
		MaxDeadLimit:       1000,
		DefaultInflight:    1000,
		MaxInflight:        100000,
		MaxStreams:         1000,
	}
}

// WithDefaults fills every zero field of l from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	l.MaxBodyBytes = cmp.Or(l.MaxBodyBytes, d.MaxBodyBytes)
	l.MaxBatch = cmp.Or(l.MaxBatch, d.MaxBatch)
	l.MaxRequestBytes = cmp.Or(l.MaxRequestBytes, d.MaxRequestBytes)
	l.MaxDelayMs = cmp.Or(l.MaxDelayMs, d.MaxDelayMs)
	l.MaxTopicLen = cmp.Or(l.MaxTopicLen, d.MaxTopicLen)
	l.MaxKeyLen = cmp.Or(l.MaxKeyLen, d.MaxKeyLen)
	l.MaxHeaders = cmp.Or(l.MaxHeaders, d.MaxHeaders)
	l.MaxHeaderKeyLen = cmp.Or(l.MaxHeaderKeyLen, d.MaxHeaderKeyLen)
	l.MaxHeaderValueLen = cmp.Or(l.MaxHeaderValueLen, d.MaxHeaderValueLen)
	l.MinTTRMs = cmp.Or(l.MinTTRMs, d.MinTTRMs)
	l.MaxTTRMs = cmp.Or(l.MaxTTRMs, d.MaxTTRMs)
	l.DefaultTTRMs = cmp.Or(l.DefaultTTRMs, d.DefaultTTRMs)
	l.MaxAttempts = cmp.Or(l.MaxAttempts, d.MaxAttempts)
	l.DefaultMaxAttempts = cmp.Or(l.DefaultMaxAttempts, d.DefaultMaxAttempts)
	l.MaxReserve = cmp.Or(l.MaxReserve, d.MaxReserve)
	l.MaxWaitMs = cmp.Or(l.MaxWaitMs, d.MaxWaitMs)
	l.MaxWaiters = cmp.Or(l.MaxWaiters, d.MaxWaiters)
	l.DefaultDeadLimit = cmp.Or(l.DefaultDeadLimit, d.DefaultDeadLimit)
	l.MaxDeadLimit = cmp.Or(l.MaxDeadLimit, d.MaxDeadLimit)
	l.DefaultInflight = cmp.Or(l.DefaultInflight, d.DefaultInflight)
	l.MaxInflight = cmp.Or(l.MaxInflight, d.MaxInflight)
	l.MaxStreams = cmp.Or(l.MaxStreams, d.MaxStreams)
	return l
}

// HumanMs renders a duration in milliseconds in the largest whole unit:
// "10 years", "24 hours", "1 MiB"-style messages use it to name limits.
func HumanMs(ms int64) string {
	units := []struct {
		ms   int64
		name string
	}{{msYear, "year"}, {msDay, "day"}, {msHour, "hour"}, {msMinute, "minute"}, {msSecond, "second"}}
	for _, u := range units {
		if ms >= u.ms && ms%u.ms == 0 {
			return plural(ms/u.ms, u.name)
		}
	}
	return plural(ms, "ms")
}

// HumanBytes renders a byte count in the largest whole binary unit.
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return itoa(n>>30) + " GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return itoa(n>>10) + " KiB"
	default:
		return plural(n, "byte")
	}
}

// LimitBytes names a limit of n bytes, in bytes and, when a larger unit
// says it in fewer digits, in that unit too: "10 bytes", "1048576 bytes
// (1 MiB)".
func LimitBytes(n int64) string {
	raw, human := plural(n, "byte"), HumanBytes(n)
	if human == raw {
		return raw
	}
	return raw + " (" + human + ")"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// plural renders "1 year", "2 years", or "5 ms" (units abbreviated stay as is).
func plural(n int64, unit string) string {
	if n == 1 || unit == "ms" {
		return itoa(n) + " " + unit
	}
	return itoa(n) + " " + unit + "s"
}

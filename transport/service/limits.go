package service

import "strconv"

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
	orInt(&l.MaxBodyBytes, d.MaxBodyBytes)
	orInt(&l.MaxBatch, d.MaxBatch)
	orInt(&l.MaxRequestBytes, d.MaxRequestBytes)
	orInt(&l.MaxDelayMs, d.MaxDelayMs)
	orInt(&l.MaxTopicLen, d.MaxTopicLen)
	orInt(&l.MaxKeyLen, d.MaxKeyLen)
	orInt(&l.MaxHeaders, d.MaxHeaders)
	orInt(&l.MaxHeaderKeyLen, d.MaxHeaderKeyLen)
	orInt(&l.MaxHeaderValueLen, d.MaxHeaderValueLen)
	orInt(&l.MinTTRMs, d.MinTTRMs)
	orInt(&l.MaxTTRMs, d.MaxTTRMs)
	orInt(&l.DefaultTTRMs, d.DefaultTTRMs)
	orInt(&l.MaxAttempts, d.MaxAttempts)
	orInt(&l.DefaultMaxAttempts, d.DefaultMaxAttempts)
	orInt(&l.MaxReserve, d.MaxReserve)
	orInt(&l.MaxWaitMs, d.MaxWaitMs)
	orInt(&l.MaxWaiters, d.MaxWaiters)
	orInt(&l.DefaultDeadLimit, d.DefaultDeadLimit)
	orInt(&l.MaxDeadLimit, d.MaxDeadLimit)
	orInt(&l.DefaultInflight, d.DefaultInflight)
	orInt(&l.MaxInflight, d.MaxInflight)
	orInt(&l.MaxStreams, d.MaxStreams)
	return l
}

func orInt[T int | int32 | int64](p *T, def T) {
	if *p == 0 {
		*p = def
	}
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

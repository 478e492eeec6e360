package wheel

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
	"github.com/delaywheel/delaywheel/wheel/tz"
)

// Limits of a recurring schedule.
const (
	// MinEveryMs is the shortest fixed interval a schedule may have: one
	// second, the granularity of a cron expression with seconds too.
	MinEveryMs = 1000
	// MaxScheduleName is the longest schedule name, in bytes.
	MaxScheduleName = 128
)

// ScheduleInfo is a stored schedule and where its calendar stands.
type ScheduleInfo struct {
	command.ScheduleSpec
	// CreatedMs is the leader's time when the schedule was last set. For
	// EveryMs without StartAtMs, StartAtMs is set to it.
	CreatedMs int64
	// LastMs is the last occurrence enqueued (0: none yet).
	LastMs int64
	// NextMs is the next occurrence, not enqueued yet (0: none, the
	// schedule has ended).
	NextMs int64
	// Fired counts the occurrences enqueued since the schedule was set.
	Fired int64
}

// OccurrenceKey is the message key of a schedule's occurrence at ms.
func OccurrenceKey(name string, ms int64) string {
	return fmt.Sprintf("schedule:%s:%d", name, ms)
}

// cronDescriptors are the shorthands the parser takes for a whole
// expression, written exactly so (lowercase, alone): each fires at the
// start of its period in the schedule's time zone, @weekly on Sundays.
// @every is refused: every_ms sets a fixed interval.
var cronDescriptors = [...]string{"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}

// cronParser takes five fields, or six with seconds first, and the
// descriptors (cronDescriptors) but not @every, which every_ms covers.
func cronParser() cron.Parser {
	return cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
}

// recurrence computes a schedule's occurrences.
type recurrence struct {
	spec  *cron.SpecSchedule // nil for every_ms
	loc   *time.Location
	every int64
	start int64
	end   int64
}

// zoneSource looks up time zones and parses cron expressions; the store
// caches both so that advancing many schedules does not parse each one.
type zoneSource interface {
	zone(name string) (*time.Location, error)
	cron(expr string) (*cron.SpecSchedule, error)
}

// plainZones looks up every time without caching.
type plainZones struct{}

func (plainZones) zone(name string) (*time.Location, error) { return tz.Load(name) }

func (plainZones) cron(expr string) (*cron.SpecSchedule, error) {
	e := strings.TrimSpace(expr)
	if strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ=") {
		return nil, fmt.Errorf("a time zone goes in the timezone field, not in the expression")
	}
	if strings.HasPrefix(e, "@every") {
		return nil, fmt.Errorf("@every is not supported; use every_ms")
	}
	s, err := cronParser().Parse(e)
	if err != nil {
		return nil, err
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("unsupported expression")
	}
	return spec, nil
}

// ValidateSchedule checks a spec as a client sent it at nowMs: the error
// wraps ErrInvalid and names the field and the limit. A schedule that
// would never fire, set at nowMs (an end already past, a cron expression
// that matches no date, such as February 30), is refused too.
func ValidateSchedule(sp *command.ScheduleSpec, nowMs int64) error {
	r, err := newRecurrence(plainZones{}, sp, nowMs)
	if err != nil {
		return err
	}
	if r.first(nowMs) != 0 {
		return nil
	}
	unbounded := *r
	unbounded.end = 0
	first := unbounded.first(nowMs)
	switch {
	case first == 0 && sp.Cron != "":
		return fmt.Errorf("%w: cron: %q never fires: it matches no date within five years of %d", model.ErrInvalid, sp.Cron, max(r.start, nowMs))
	case first == 0:
		return fmt.Errorf("%w: start_at_ms: the first occurrence would come after %d", model.ErrInvalid, int64(MaxDueMs))
	case sp.EndAtMs < nowMs:
		return fmt.Errorf("%w: end_at_ms: %d is already past (now %d): the schedule would never fire", model.ErrInvalid, sp.EndAtMs, nowMs)
	default:
		return fmt.Errorf("%w: end_at_ms: %d is before the first occurrence, %d: the schedule would never fire", model.ErrInvalid, sp.EndAtMs, first)
	}
}

// newRecurrence checks sp and returns its calendar; start stands for
// StartAtMs when that is 0.
func newRecurrence(zs zoneSource, sp *command.ScheduleSpec, start int64) (*recurrence, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{model.ErrInvalid}, args...)...)
	}
	if err := validScheduleName(sp.Name); err != nil {
		return nil, bad("name: %v", err)
	}
	if sp.Topic == "" {
		return nil, bad("topic: required")
	}
	switch {
	case sp.Cron != "" && sp.EveryMs != 0:
		return nil, bad("cron, every_ms: set one of them, not both")
	case sp.Cron == "" && sp.EveryMs == 0:
		return nil, bad("cron, every_ms: one of them is required (every_ms at least %d)", MinEveryMs)
	case sp.Cron == "" && (sp.EveryMs < MinEveryMs || sp.EveryMs > MaxDueMs):
		return nil, bad("every_ms: %d is outside [%d, %d]", sp.EveryMs, MinEveryMs, int64(MaxDueMs))
	case sp.Cron == "" && sp.Timezone != "":
		return nil, bad("timezone: applies to cron only")
	case sp.StartAtMs < 0 || sp.StartAtMs > MaxDueMs:
		return nil, bad("start_at_ms: %d is outside [0, %d]", sp.StartAtMs, int64(MaxDueMs))
	case sp.EndAtMs < 0 || sp.EndAtMs > MaxDueMs:
		return nil, bad("end_at_ms: %d is outside [0, %d]", sp.EndAtMs, int64(MaxDueMs))
	case sp.EndAtMs != 0 && sp.EndAtMs < sp.StartAtMs:
		return nil, bad("end_at_ms: %d is before start_at_ms %d", sp.EndAtMs, sp.StartAtMs)
	}
	r := &recurrence{every: sp.EveryMs, start: sp.StartAtMs, end: sp.EndAtMs}
	if r.start == 0 {
		r.start = start
	}
	if sp.Cron == "" {
		return r, nil
	}
	loc, err := zs.zone(sp.Timezone)
	if err != nil {
		return nil, bad("timezone: unknown zone %q", sp.Timezone)
	}
	spec, err := zs.cron(sp.Cron)
	if err != nil {
		return nil, bad("cron: %q: %v (want five fields, minute 0-59, hour 0-23, day of month 1-31, month 1-12 or JAN-DEC, day of week 0-6 or SUN-SAT; or six with seconds 0-59 first; or one of %s)", sp.Cron, err, strings.Join(cronDescriptors[:], ", "))
	}
	r.spec, r.loc = spec, loc
	return r, nil
}

func validScheduleName(name string) error {
	if name == "" || len(name) > MaxScheduleName {
		return fmt.Errorf("%d bytes; 1 to %d are allowed", len(name), MaxScheduleName)
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !ok {
			return fmt.Errorf("%q: only letters, digits, '-', '_' and '.' are allowed", name)
		}
	}
	return nil
}

// first returns the first occurrence of a schedule set at nowMs: its
// start, or the first after nowMs; 0 when there is none.
func (r *recurrence) first(nowMs int64) int64 { return r.after(max(r.start, nowMs) - 1) }

// after returns the first occurrence later than ms, or 0 when there is
// none (past end_at_ms, or a cron expression that never matches).
func (r *recurrence) after(ms int64) int64 {
	var next int64
	switch {
	case r.spec == nil && ms < r.start:
		next = r.start
	case r.spec == nil:
		next = r.start + ((ms-r.start)/r.every+1)*r.every
	default:
		next = r.cronAfter(max(ms, r.start-1))
	}
	if next <= 0 || next > MaxDueMs || (r.end != 0 && next > r.end) {
		return 0
	}
	return next
}

// cronAfter returns the cron occurrence after ms. The library skips a
// wall-clock time that does not exist (the hour clocks spring over) but
// matches one that happens twice (the hour clocks fall back) both times;
// the calendar fires it once, at the first, so an occurrence in the
// repeated period is passed over, and the search goes on from its end.
func (r *recurrence) cronAfter(ms int64) int64 {
	t := time.UnixMilli(ms).In(r.loc)
	for range 8 {
		c := r.spec.Next(t)
		if c.IsZero() {
			return 0
		}
		if c.UnixMilli() <= ms { // never so far; the calendar only moves on
			t = t.Add(time.Second)
			continue
		}
		if !specMatches(r.spec, c) {
			// Where the clocks spring forward by half an hour (Lord Howe
			// Island), the library's minute search can cross into the
			// next hour without checking the hour again.
			t = c
			continue
		}
		d := repeatedBy(c)
		if d == 0 {
			return c.UnixMilli()
		}
		// The clocks fell back by d when c's zone began: the wall-clock
		// times from then until d later happened before.
		start, _ := c.ZoneBounds()
		t = start.Add(d - time.Nanosecond)
	}
	return 0
}

// repeatedBy returns by how much the clocks were set back if the
// wall-clock time of t already happened earlier, or 0. Zones set them
// back by half an hour (Lord Howe Island), one hour or two hours.
func repeatedBy(t time.Time) time.Duration {
	for _, d := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		e := t.Add(-d)
		if e.Hour() == t.Hour() && e.Minute() == t.Minute() && e.Second() == t.Second() && e.Day() == t.Day() {
			return d
		}
	}
	return 0
}

// specMatches reports whether the wall clock of t matches every field of
// spec, as the library's own search means to (its dayMatches: with a
// wildcard day of month or day of week both must match, else either).
func specMatches(spec *cron.SpecSchedule, t time.Time) bool {
	const star = 1 << 63
	bit := func(field uint64, v int) bool { return field&(1<<uint(v)) != 0 }
	dom, dow := bit(spec.Dom, t.Day()), bit(spec.Dow, int(t.Weekday()))
	day := dom || dow
	if spec.Dom&star != 0 || spec.Dow&star != 0 {
		day = dom && dow
	}
	return day && bit(spec.Second, t.Second()) && bit(spec.Minute, t.Minute()) && bit(spec.Hour, t.Hour()) && bit(spec.Month, int(t.Month()))
}

package wheel

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
	"github.com/robfig/cron/v3"
)

// Recurring schedules in the index:
//
//	'u' name             → the schedule as set (scheduleTag, spec, created)
//	'q' name             → its calendar (calendarTag, last, next, fired)
//	'v' next_ms name     → empty: the schedules by next occurrence
//	"sschedules"         → how many schedules are stored
//
// A set writes the schedule and its calendar; an advance rewrites the
// calendar alone. The schedule carries the body its occurrences enqueue,
// and whatever an advance writes the index's memtables, flushes and
// compactions carry again: a calendar is a few bytes.
//
// The leader finds the schedules due for an advance by scanning 'v' up to
// an instant, so the number stored costs it no memory. The three prefixes
// sort after the metas (see keys.go): an advance rewrites two of them
// every occurrence.
//
// Every advance deletes the 'v' key of the occurrence it enqueued, and
// the deletions stay in the index until a compaction drops them, so a scan
// from the start of 'v' would pass over every occurrence of the last
// minutes: at 10,000 occurrences a second, hundreds of thousands of
// deleted keys a scan. A scan starts at the store's due floor instead
// (Store.dueFloor, memory of this process that Apply never reads). The
// invariant is that every 'v' key in the index sorts at or after the
// floor: a committed batch lowers it to the earliest 'v' key it wrote, and
// a scan, which holds the store's lock so that no batch commits while it
// reads, raises it to the first key it met, or to its upper bound when it
// met none. An advance deletes keys at or after the floor and writes later
// ones, so a scan passes over the deletions of the advances since the one
// before it only. The floor is 0 when the store opens.
const (
	pSchedule    = 'u'
	pCalendar    = 'q'
	pScheduleDue = 'v'
	scheduleTag  = 0xC7
	calendarTag  = 0xC6
)

var keySchedules = []byte("sschedules")

func scheduleKey(name string) []byte { return append([]byte{pSchedule}, name...) }

func calendarKey(name string) []byte { return append([]byte{pCalendar}, name...) }

func scheduleDueKey(nextMs int64, name string) []byte {
	k := binary.BigEndian.AppendUint64([]byte{pScheduleDue}, uint64(nextMs))
	return append(k, name...)
}

// dueItem is the schedule and occurrence a due key (scheduleDueKey) names.
func dueItem(key []byte) command.AdvanceItem {
	return command.AdvanceItem{Name: string(key[9:]), FromMs: int64(binary.BigEndian.Uint64(key[1:9]))}
}

// encodeSchedule is the stored value of a schedule as set: its spec and
// when it was set.
func encodeSchedule(info *ScheduleInfo) []byte {
	e := &command.Encoder{B: []byte{scheduleTag}}
	e.ScheduleSpec(&info.ScheduleSpec)
	e.Varint(info.CreatedMs)
	return e.B
}

// encodeCalendar is the stored value of where a schedule's calendar
// stands.
func encodeCalendar(info *ScheduleInfo) []byte {
	e := &command.Encoder{B: []byte{calendarTag}}
	e.Varint(info.LastMs)
	e.Varint(info.NextMs)
	e.Varint(info.Fired)
	return e.B
}

// decodeSchedule decodes a stored schedule (encodeSchedule) and its
// calendar (encodeCalendar).
func decodeSchedule(sched, cal []byte) (ScheduleInfo, error) {
	d := &command.Decoder{B: sched}
	if d.Byte() != scheduleTag {
		return ScheduleInfo{}, fmt.Errorf("%w: schedule of %d bytes", command.ErrCorruptCommand, len(sched))
	}
	info := ScheduleInfo{ScheduleSpec: d.ScheduleSpec(), CreatedMs: d.Varint()}
	if d.Err == nil && len(d.B) != 0 {
		d.Fail("schedule")
	}
	if d.Err != nil {
		return ScheduleInfo{}, fmt.Errorf("schedule of %d bytes: %w", len(sched), d.Err)
	}
	d = &command.Decoder{B: cal}
	if d.Byte() != calendarTag {
		return ScheduleInfo{}, fmt.Errorf("%w: calendar of schedule %q, %d bytes", command.ErrCorruptCommand, info.Name, len(cal))
	}
	info.LastMs, info.NextMs, info.Fired = d.Varint(), d.Varint(), d.Varint()
	if d.Err == nil && len(d.B) != 0 {
		d.Fail("calendar")
	}
	if d.Err != nil {
		return ScheduleInfo{}, fmt.Errorf("calendar of schedule %q, %d bytes: %w", info.Name, len(cal), d.Err)
	}
	return info, nil
}

// readSchedule reads a stored schedule and its calendar through get; ok
// is false when there is none.
func readSchedule(name string, get func([]byte) ([]byte, error)) (info ScheduleInfo, ok bool, err error) {
	sched, err := get(scheduleKey(name))
	if err != nil || sched == nil {
		return ScheduleInfo{}, false, err
	}
	cal, err := get(calendarKey(name))
	if err != nil {
		return ScheduleInfo{}, false, err
	}
	info, err = decodeSchedule(sched, cal)
	return info, err == nil, err
}

// withCalendar decodes the schedule a scan of 'u' met, under key with
// value, with the calendar it reads for it.
func (s *Store) withCalendar(key, value []byte) (ScheduleInfo, error) {
	cal, err := s.get(calendarKey(string(key[1:])))
	if err != nil {
		return ScheduleInfo{}, err
	}
	return decodeSchedule(value, cal)
}

// zoneCache keeps the time zones and cron expressions the store's
// schedules use, so advancing does not look them up each time. s.mu
// guards it; it is bounded and only ever caches what a lookup returns.
type zoneCache struct {
	zones lookupCache[*time.Location]
	crons lookupCache[*cron.SpecSchedule]
}

func (c *zoneCache) zone(name string) (*time.Location, error) {
	return c.zones.get(name, plainZones{}.zone)
}

func (c *zoneCache) cron(expr string) (*cron.SpecSchedule, error) {
	return c.crons.get(expr, plainZones{}.cron)
}

// lookupCache keeps up to lookupCacheMax successful lookups.
type lookupCache[V any] map[string]V

const lookupCacheMax = 4096

func (c *lookupCache[V]) get(key string, lookup func(string) (V, error)) (V, error) {
	if v, ok := (*c)[key]; ok {
		return v, nil
	}
	v, err := lookup(key)
	if err != nil {
		return v, err
	}
	if *c == nil || len(*c) >= lookupCacheMax {
		*c = lookupCache[V]{}
	}
	(*c)[key] = v
	return v, nil
}

// scheduleInfo reads a stored schedule as the batch sees it: as the batch
// wrote it, or else as a committed batch wrote it and the cache kept it, or
// else from the index.
func (t *tx) scheduleInfo(name string) (ScheduleInfo, bool) {
	if p, wrote := t.scheds[name]; wrote {
		if p == nil {
			return ScheduleInfo{}, false
		}
		return *p, true
	}
	if info, ok := t.s.scheds.get(name); ok {
		return info, true
	}
	info, ok, err := readSchedule(name, func(k []byte) ([]byte, error) { return t.get(k), t.err })
	if err != nil {
		t.fail(err)
		return ScheduleInfo{}, false
	}
	return info, ok
}

// putSchedule writes a schedule's calendar and its place in the due
// order, and with set the schedule itself: an advance moves the calendar
// only.
func (t *tx) putSchedule(info *ScheduleInfo, set bool) {
	if set {
		t.set(scheduleKey(info.Name), encodeSchedule(info))
	}
	t.set(calendarKey(info.Name), encodeCalendar(info))
	stored := *info
	setIn(&t.scheds, info.Name, &stored)
	if info.NextMs != 0 {
		t.set(scheduleDueKey(info.NextMs, info.Name), nil)
		t.dueLow = min(t.dueLow, info.NextMs)
	}
}

func (t *tx) setSchedule(c command.SetSchedule) command.Result {
	r, err := newRecurrence(&t.s.zoneCache, &c.Spec, c.NowMs)
	if err != nil {
		return command.Result{Err: err}
	}
	old, ok := t.scheduleInfo(c.Spec.Name)
	if ok && old.NextMs != 0 {
		t.del(scheduleDueKey(old.NextMs, old.Name))
	}
	if !ok {
		t.schedules++
	}
	info := ScheduleInfo{ScheduleSpec: c.Spec, CreatedMs: c.NowMs}
	info.StartAtMs = r.start
	info.NextMs = r.first(c.NowMs)
	t.putSchedule(&info, true)
	return command.Result{Value: info}
}

func (t *tx) deleteSchedule(c command.DeleteSchedule) command.Result {
	info, ok := t.scheduleInfo(c.Name)
	if !ok {
		return command.Result{Err: fmt.Errorf("%w: schedule %q", model.ErrNotFound, c.Name)}
	}
	if info.NextMs != 0 {
		t.del(scheduleDueKey(info.NextMs, info.Name))
	}
	t.del(scheduleKey(info.Name))
	t.del(calendarKey(info.Name))
	setIn(&t.scheds, info.Name, nil)
	t.schedules--
	return command.Result{}
}

func (t *tx) advanceSchedules(c command.AdvanceSchedules) command.Result {
	var res command.AdvanceResult
	var msgs []command.NewMessage
	// The occurrences are enqueued in this entry: those past what it may
	// still enqueue stay where they are, as stale, for a later Advance.
	room := model.MaxEntryMessages - int(t.seq)
	for _, it := range c.Items {
		info, ok := t.scheduleInfo(it.Name)
		if !ok || info.NextMs == 0 || info.NextMs != it.FromMs || len(msgs) >= room {
			res.Stale++
			continue
		}
		r, err := newRecurrence(&t.s.zoneCache, &info.ScheduleSpec, info.StartAtMs)
		if err != nil {
			res.Stale++ // set with zone data this binary lacks: it stays where it is
			continue
		}
		occ := info.NextMs
		msgs = append(msgs, command.NewMessage{Topic: info.Topic, Key: OccurrenceKey(info.Name, occ), Body: info.Body,
			Headers: info.Headers, Priority: info.Priority, DeliverAtMs: occ, TTRMs: info.TTRMs, MaxAttempts: info.MaxAttempts})
		t.del(scheduleDueKey(occ, info.Name))
		info.LastMs = occ
		info.Fired++
		info.NextMs = r.after(nextAfter(occ, c))
		t.putSchedule(&info, false)
	}
	if len(msgs) > 0 {
		enq, _ := t.schedule(command.Schedule{NowMs: c.NowMs, Messages: msgs}).Value.([]Enqueued)
		for _, e := range enq {
			if e.Duplicate {
				res.Duplicate++
			} else {
				res.Fired++
			}
		}
	}
	return command.Result{Value: res}
}

// nextAfter returns the instant after which the schedule that fired occ
// goes on, as AdvanceSchedules states: occ itself when occ is the
// leader's (at or after SinceMs), else the later of occ and NowMs.
func nextAfter(occ int64, c command.AdvanceSchedules) int64 {
	if occ >= c.SinceMs {
		return occ
	}
	return max(occ, c.NowMs)
}

// Schedule returns a stored schedule, or an error wrapping ErrNotFound.
func (s *Store) Schedule(name string) (ScheduleInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return ScheduleInfo{}, err
	}
	info, ok, err := readSchedule(name, s.get)
	if err != nil {
		return ScheduleInfo{}, err
	}
	if !ok {
		return ScheduleInfo{}, fmt.Errorf("%w: schedule %q", model.ErrNotFound, name)
	}
	return info, nil
}

// Schedules returns up to limit stored schedules whose names sort after
// after, in name order.
func (s *Store) Schedules(after string, limit int) ([]ScheduleInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	lo := scheduleKey(after)
	if after != "" {
		lo = append(lo, 0) // the first name after it
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd([]byte{pSchedule})})
	if err != nil {
		return nil, fmt.Errorf("index scan: %w", err)
	}
	var out []ScheduleInfo
	for it.First(); it.Valid() && len(out) < limit; it.Next() {
		info, err := s.withCalendar(it.Key(), it.Value())
		if err != nil {
			it.Close()
			return nil, err
		}
		out = append(out, info)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("index scan: %w", err)
	}
	return out, nil
}

// DueSchedules returns up to limit schedules whose next occurrence is at
// or before to, earliest first, as items of an AdvanceSchedules. It reads
// from the due floor (see the top of this file) and raises it.
func (s *Store) DueSchedules(to int64, limit int) ([]command.AdvanceItem, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	to = min(to, MaxDueMs) // no occurrence is later
	if to < s.dueFloor {
		return nil, nil // every due key is later
	}
	var out []command.AdvanceItem
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: scheduleDueKey(s.dueFloor, ""), UpperBound: scheduleDueKey(to+1, "")})
	if err != nil {
		return nil, fmt.Errorf("index scan: %w", err)
	}
	for it.First(); it.Valid() && len(out) < limit; it.Next() {
		out = append(out, dueItem(it.Key()))
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("index scan: %w", err)
	}
	if len(out) > 0 {
		s.dueFloor = out[0].FromMs
	} else {
		s.dueFloor = to + 1
	}
	return out, nil
}

// NumSchedules returns how many schedules are stored.
func (s *Store) NumSchedules() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.schedules
}

// dumpSchedules writes every schedule for Dump. s.mu is held.
func (s *Store) dumpSchedules(bw *bufio.Writer) error {
	fmt.Fprintf(bw, "schedules %d\n", s.schedules)
	return s.scan([]byte{pSchedule}, func(k, v []byte) error {
		info, err := s.withCalendar(k, v)
		if err != nil {
			return err
		}
		// The whole stored schedule is hashed, so that a difference in the
		// message an occurrence enqueues (body, headers, priority, ttr,
		// attempts) shows too.
		fmt.Fprintf(bw, "schedule %q topic %q cron %q tz %q every %d start %d end %d created %d last %d next %d fired %d record %x\n",
			info.Name, info.Topic, info.Cron, info.Timezone, info.EveryMs, info.StartAtMs, info.EndAtMs,
			info.CreatedMs, info.LastMs, info.NextMs, info.Fired, sha256.Sum256(v))
		return nil
	})
}

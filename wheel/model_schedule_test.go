package wheel

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// The reference model of recurring schedules (see model_test.go): the
// schedules by name, each occurrence enqueued through the model's own
// Schedule. The calendar itself (recurrence) is the store's: the model
// checks what is stored, enqueued and replicated, and recurring_test.go
// checks the calendar.

var modelSchedules = []string{"s1", "s2", "s3"}

func (md *refModel) setSchedule(c command.SetSchedule) command.Result {
	r, err := newRecurrence(plainZones{}, &c.Spec, c.NowMs)
	if err != nil {
		return command.Result{Err: model.ErrInvalid}
	}
	info := ScheduleInfo{ScheduleSpec: c.Spec, CreatedMs: c.NowMs}
	info.StartAtMs = r.start
	info.NextMs = r.after(max(r.start, c.NowMs) - 1)
	md.scheds[info.Name] = &info
	return command.Result{Value: info}
}

func (md *refModel) deleteSchedule(c command.DeleteSchedule) command.Result {
	if md.scheds[c.Name] == nil {
		return command.Result{Err: model.ErrNotFound}
	}
	delete(md.scheds, c.Name)
	return command.Result{}
}

func (md *refModel) advanceSchedules(c command.AdvanceSchedules) command.Result {
	var res command.AdvanceResult
	var msgs []command.NewMessage
	for _, it := range c.Items {
		info := md.scheds[it.Name]
		if info == nil || info.NextMs == 0 || info.NextMs != it.FromMs {
			res.Stale++
			continue
		}
		r, err := newRecurrence(plainZones{}, &info.ScheduleSpec, info.StartAtMs)
		if err != nil {
			panic(fmt.Sprintf("model: stored schedule %q: %v", it.Name, err))
		}
		occ := info.NextMs
		msgs = append(msgs, command.NewMessage{Topic: info.Topic, Key: OccurrenceKey(info.Name, occ), Body: info.Body, Headers: info.Headers,
			Priority: info.Priority, DeliverAtMs: occ, TTRMs: info.TTRMs, MaxAttempts: info.MaxAttempts})
		// The leader's own occurrence goes on from itself, however late;
		// one that came due before the leader took over, from NowMs.
		from := max(occ, c.NowMs)
		if occ >= c.SinceMs {
			from = occ
		}
		info.LastMs, info.Fired, info.NextMs = occ, info.Fired+1, r.after(from)
	}
	if len(msgs) > 0 {
		for _, e := range md.schedule(command.Schedule{NowMs: c.NowMs, Messages: msgs}).Value.([]Enqueued) {
			if e.Duplicate {
				res.Duplicate++
			} else {
				res.Fired++
			}
		}
	}
	return command.Result{Value: res}
}

// genRecurring sets (sometimes invalidly), deletes or advances schedules;
// an advance names those due within two seconds, as the leader does, and
// now and then one it has moved past, and is stamped by a leader that took
// over at one of several instants, so that a late occurrence is sometimes
// the leader's (caught up) and sometimes not (fired once).
func (h *modelHarness) genRecurring() command.Command {
	name := modelSchedules[h.rng.Intn(len(modelSchedules))]
	switch r := h.rng.Intn(100); {
	case r < 30:
		sp := command.ScheduleSpec{Name: name, Topic: modelTopics[h.rng.Intn(len(modelTopics))], MaxAttempts: int32(h.rng.Intn(3))}
		if h.rng.Intn(2) == 0 {
			sp.EveryMs = MinEveryMs + h.rng.Int63n(4000)
		} else {
			sp.Cron = []string{"*/3 * * * * *", "* * * * *", "0 0 * * *"}[h.rng.Intn(3)]
			sp.Timezone = []string{"", "Europe/Berlin", "America/New_York"}[h.rng.Intn(3)]
		}
		if h.rng.Intn(3) == 0 {
			sp.StartAtMs = h.now + h.rng.Int63n(20_000) - 10_000
		}
		if h.rng.Intn(4) == 0 {
			sp.EndAtMs = max(sp.StartAtMs, h.now) + h.rng.Int63n(30_000)
		}
		if h.rng.Intn(3) == 0 {
			sp.Body = []byte(fmt.Sprint("occurrence of ", name))
		}
		if h.rng.Intn(10) == 0 {
			sp.Timezone = "Nowhere/Special" // refused
		}
		return command.SetSchedule{NowMs: h.now, Spec: sp}
	case r < 40:
		return command.DeleteSchedule{Name: name}
	default:
		var items []command.AdvanceItem
		for _, n := range slices.Sorted(maps.Keys(h.md.scheds)) {
			if info := h.md.scheds[n]; info.NextMs != 0 && info.NextMs <= h.now+2000 {
				items = append(items, command.AdvanceItem{Name: n, FromMs: info.NextMs})
			}
		}
		if h.rng.Intn(5) == 0 {
			items = append(items, command.AdvanceItem{Name: name, FromMs: h.now}) // stale, or a retry
		}
		if len(items) == 0 {
			return nil
		}
		// The leader took over just now, a while ago, or long ago.
		since := []int64{h.now - 2000, h.now - h.rng.Int63n(120_000), 0}[h.rng.Intn(3)]
		return command.AdvanceSchedules{NowMs: h.now, SinceMs: since, Items: items}
	}
}

// checkSchedules compares the stored schedules, the count and the due
// order with the model's.
func (h *modelHarness) checkSchedules(md *refModel) {
	h.t.Helper()
	got, err := h.s.Schedules("", len(modelSchedules)+1)
	if err != nil {
		h.fatalf("schedules: %v", err)
	}
	var want []ScheduleInfo
	for _, n := range slices.Sorted(maps.Keys(md.scheds)) {
		want = append(want, *md.scheds[n])
	}
	if !reflect.DeepEqual(got, want) || h.s.NumSchedules() != int64(len(want)) {
		h.fatalf("schedules %+v (%d), model %+v", got, h.s.NumSchedules(), want)
	}
	due, err := h.s.DueSchedules(MaxDueMs, 10)
	if err != nil {
		h.fatalf("due schedules: %v", err)
	}
	for i, it := range due {
		info := md.scheds[it.Name]
		if info == nil || info.NextMs != it.FromMs || (i > 0 && due[i-1].FromMs > it.FromMs) {
			h.fatalf("due order %+v disagrees with the model", due)
		}
	}
	if _, err := h.s.Schedule("nosuch"); !errors.Is(err, model.ErrNotFound) {
		h.fatalf("unknown schedule: %v", err)
	}
}

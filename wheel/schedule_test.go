package wheel

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// keyed returns every message key in k's store and the message holding it.
func (k *storeKit) keyed() map[string]model.ID {
	k.t.Helper()
	var b bytes.Buffer
	if err := k.s.Dump(&b); err != nil {
		k.t.Fatal(err)
	}
	out := map[string]model.ID{}
	sc := bufio.NewScanner(&b)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 5 && f[0] == "key" {
			key, err := strconv.Unquote(f[3])
			if err != nil {
				k.t.Fatal(err)
			}
			id, err := model.ParseID(f[4])
			if err != nil {
				k.t.Fatal(err)
			}
			out[key] = id
		}
	}
	return out
}

// advance applies an AdvanceSchedules stamped at now by a leader that took
// over at now (its scheduler looks 2 s ahead).
func (k *storeKit) advance(now int64, items ...command.AdvanceItem) command.AdvanceResult {
	k.t.Helper()
	return k.one(command.AdvanceSchedules{NowMs: now, SinceMs: now - 2000, Items: items}).(command.AdvanceResult)
}

func (k *storeKit) scheduleInfo(name string) ScheduleInfo {
	k.t.Helper()
	info, err := k.s.Schedule(name)
	if err != nil {
		k.t.Fatalf("schedule %q: %v", name, err)
	}
	return info
}

func TestScheduleEveryThroughTheStore(t *testing.T) {
	k := newStoreKit(t, Options{})
	start := t0 + 5_000
	info := k.one(command.SetSchedule{NowMs: t0, Spec: command.ScheduleSpec{Name: "tick", Topic: "jobs", EveryMs: 1000, StartAtMs: start, Body: []byte("b")}}).(ScheduleInfo)
	if info.NextMs != start || info.LastMs != 0 || k.s.NumSchedules() != 1 {
		t.Fatalf("set: %+v, %d schedules", info, k.s.NumSchedules())
	}
	// Not yet due at start-1 when looked for up to start-1.
	if due, _ := k.s.DueSchedules(start-1, 10); len(due) != 0 {
		t.Fatalf("due before its time: %v", due)
	}
	due, err := k.s.DueSchedules(start, 10)
	if err != nil || len(due) != 1 || due[0] != (command.AdvanceItem{Name: "tick", FromMs: start}) {
		t.Fatalf("due = %v, %v", due, err)
	}
	// Enqueued two seconds ahead, 100 occurrences in entries of ten.
	var n int
	for e := 0; e < 10; e++ {
		var entries []Entry
		for i := 0; i < 10; i++ {
			occ := start + int64(n)*1000
			k.idx++
			entries = append(entries, Entry{Index: k.idx, Cmds: []command.Command{command.AdvanceSchedules{NowMs: occ - 2000, Items: []command.AdvanceItem{{Name: "tick", FromMs: occ}}}}})
			n++
		}
		k.log = append(k.log, entries...)
		res, err := k.s.Apply(entries)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r[0].Value.(command.AdvanceResult) != (command.AdvanceResult{Fired: 1}) {
				t.Fatalf("advance: %+v", r[0])
			}
		}
	}
	keys := k.keyed()
	for i := 0; i < n; i++ {
		occ := start + int64(i)*1000
		id, ok := keys[OccurrenceKey("tick", occ)]
		if !ok {
			t.Fatalf("occurrence %d at %d not enqueued", i, occ)
		}
		if v := k.get(id); v.DeliverAtMs != occ || v.Topic != "jobs" || string(v.Body) != "b" {
			t.Fatalf("occurrence %d: %+v", i, v)
		}
	}
	info = k.scheduleInfo("tick")
	if info.LastMs != start+99_000 || info.NextMs != start+100_000 || info.Fired != 100 {
		t.Fatalf("after 100: %+v", info)
	}
}

// TestScheduleAdvanceIsIdempotent: an advance retried after a leader change
// names an occurrence the schedule has moved past, and changes nothing; an
// occurrence whose key already holds a message is not enqueued twice.
func TestScheduleAdvanceIsIdempotent(t *testing.T) {
	k := newStoreKit(t, Options{})
	spec := command.ScheduleSpec{Name: "a", Topic: "jobs", EveryMs: 1000, StartAtMs: t0 + 3000}
	k.one(command.SetSchedule{NowMs: t0, Spec: spec})
	item := command.AdvanceItem{Name: "a", FromMs: t0 + 3000}
	if r := k.advance(t0+1000, item); r != (command.AdvanceResult{Fired: 1}) {
		t.Fatalf("first: %+v", r)
	}
	before := len(k.keyed())
	if r := k.advance(t0+1100, item, item); r != (command.AdvanceResult{Stale: 2}) {
		t.Fatalf("retry: %+v", r)
	}
	if r := k.advance(t0+1100, command.AdvanceItem{Name: "nope", FromMs: t0 + 3000}); r != (command.AdvanceResult{Stale: 1}) {
		t.Fatalf("unknown: %+v", r)
	}
	// Set again with the same calendar: the first occurrence is the one
	// already enqueued, whose key holds it.
	k.one(command.SetSchedule{NowMs: t0 + 1200, Spec: spec})
	if r := k.advance(t0+1300, item); r != (command.AdvanceResult{Duplicate: 1}) {
		t.Fatalf("re-set: %+v", r)
	}
	if got := len(k.keyed()); got != before {
		t.Fatalf("%d keys after retries; want %d", got, before)
	}
	if info := k.scheduleInfo("a"); info.NextMs != t0+4000 {
		t.Fatalf("next = %d; want %d", info.NextMs, t0+4000)
	}
}

// TestScheduleNoBurstAfterOutage: the occurrences missed while no leader
// advanced fire once, late, and the calendar goes on after NowMs.
func TestScheduleNoBurstAfterOutage(t *testing.T) {
	k := newStoreKit(t, Options{})
	k.one(command.SetSchedule{NowMs: t0, Spec: command.ScheduleSpec{Name: "a", Topic: "jobs", EveryMs: 1000, StartAtMs: t0 + 1000}})
	now := t0 + 60_500 // a minute without a leader
	due, _ := k.s.DueSchedules(now+2000, 100)
	if len(due) != 1 {
		t.Fatalf("due = %v", due)
	}
	if r := k.advance(now, due...); r != (command.AdvanceResult{Fired: 1}) {
		t.Fatalf("advance: %+v", r)
	}
	info := k.scheduleInfo("a")
	if info.LastMs != t0+1000 || info.NextMs != t0+61_000 {
		t.Fatalf("after the outage: last %d next %d; want %d, %d", info.LastMs, info.NextMs, t0+1000, t0+61_000)
	}
	keys := k.keyed()
	if len(keys) != 1 {
		t.Fatalf("%d occurrences enqueued; want the one missed", len(keys))
	}
	v := k.get(keys[OccurrenceKey("a", t0+1000)])
	if v.DeliverAtMs != t0+1000 {
		t.Fatalf("late occurrence due %d", v.DeliverAtMs)
	}
}

// TestScheduleLateAdvanceOfTheLeader: an advance five intervals late skips
// nothing when the occurrence came due while the stamping leader advanced
// schedules (a slow leader catches up occurrence by occurrence), and fires
// once and goes on after NowMs when it came due before that leader took
// over.
func TestScheduleLateAdvanceOfTheLeader(t *testing.T) {
	for _, tc := range []struct {
		name     string
		since    int64 // SinceMs relative to the occurrence
		wantNext int64 // relative to the occurrence
	}{
		{"slow leader", -10_000, 1000},
		{"slow leader, occurrence at since", 0, 1000},
		{"leader took over after it", 1, 6000},
		{"leader took over at now", 5500 - 2000, 6000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newStoreKit(t, Options{})
			occ := t0 + 1000
			k.one(command.SetSchedule{NowMs: t0, Spec: command.ScheduleSpec{Name: "a", Topic: "jobs", EveryMs: 1000, StartAtMs: occ}})
			now := occ + 5500 // five intervals late
			r := k.one(command.AdvanceSchedules{NowMs: now, SinceMs: occ + tc.since, Items: []command.AdvanceItem{{Name: "a", FromMs: occ}}}).(command.AdvanceResult)
			if r != (command.AdvanceResult{Fired: 1}) {
				t.Fatalf("advance: %+v", r)
			}
			info := k.scheduleInfo("a")
			if info.LastMs != occ || info.NextMs != occ+tc.wantNext || info.Fired != 1 {
				t.Fatalf("last %d next %d fired %d; want last %d next %d fired 1", info.LastMs, info.NextMs, info.Fired, occ, occ+tc.wantNext)
			}
			if _, ok := k.keyed()[OccurrenceKey("a", occ)]; !ok {
				t.Fatal("the late occurrence was not enqueued")
			}
			if tc.wantNext != 1000 {
				return
			}
			// The leader catches up: each advance moves one occurrence,
			// until the calendar is ahead of NowMs again.
			for want := occ + 1000; want <= now; want += 1000 {
				r := k.one(command.AdvanceSchedules{NowMs: now, SinceMs: occ + tc.since, Items: []command.AdvanceItem{{Name: "a", FromMs: want}}}).(command.AdvanceResult)
				if r != (command.AdvanceResult{Fired: 1}) {
					t.Fatalf("catching up %d: %+v", want, r)
				}
			}
			keys := k.keyed()
			for ms := occ; ms <= now; ms += 1000 {
				if _, ok := keys[OccurrenceKey("a", ms)]; !ok {
					t.Errorf("occurrence %d skipped", ms)
				}
			}
			if info := k.scheduleInfo("a"); info.NextMs != occ+6000 || info.Fired != 6 {
				t.Fatalf("after catching up: next %d fired %d; want %d, 6", info.NextMs, info.Fired, occ+6000)
			}
		})
	}
}

// TestScheduleDeleteWhileDue: an occurrence already enqueued is an
// ordinary message and stays when its schedule is deleted; nothing later
// is enqueued, and the advance naming it is stale.
func TestScheduleDeleteWhileDue(t *testing.T) {
	k := newStoreKit(t, Options{})
	k.one(command.SetSchedule{NowMs: t0, Spec: command.ScheduleSpec{Name: "a", Topic: "jobs", EveryMs: 1000, StartAtMs: t0 + 1000}})
	k.advance(t0, command.AdvanceItem{Name: "a", FromMs: t0 + 1000})
	next := k.scheduleInfo("a").NextMs
	if r := k.apply(command.DeleteSchedule{Name: "a"})[0]; r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := k.apply(command.DeleteSchedule{Name: "a"})[0]; !errors.Is(r.Err, model.ErrNotFound) {
		t.Fatalf("second delete: %v", r.Err)
	}
	if _, err := k.s.Schedule("a"); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if due, _ := k.s.DueSchedules(MaxDueMs, 10); len(due) != 0 || k.s.NumSchedules() != 0 {
		t.Fatalf("due %v, %d schedules after delete", due, k.s.NumSchedules())
	}
	if r := k.advance(t0+500, command.AdvanceItem{Name: "a", FromMs: next}); r != (command.AdvanceResult{Stale: 1}) {
		t.Fatalf("advance after delete: %+v", r)
	}
	id, ok := k.keyed()[OccurrenceKey("a", t0+1000)]
	if !ok {
		t.Fatal("the enqueued occurrence is gone")
	}
	k.wantState(id, StateDelayed, t0+1000, 0)
	k.apply(command.Expire{Before: t0s + 2})
	k.wantState(id, StateReady, t0+1000, 0)
}

// TestScheduleBadSpecStoresNothing: a SetSchedule that fails validation
// changes nothing but the applied index.
func TestScheduleBadSpecStoresNothing(t *testing.T) {
	k := newStoreKit(t, Options{})
	dump := func() string {
		var b bytes.Buffer
		if err := k.s.Dump(&b); err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(b.String(), "\n")
		return rest
	}
	before := dump()
	r := k.apply(command.SetSchedule{NowMs: t0, Spec: command.ScheduleSpec{Name: "a", Topic: "jobs", Cron: "0 9 * * *", Timezone: "Nowhere/Special"}})[0]
	if !errors.Is(r.Err, model.ErrInvalid) || !strings.Contains(r.Err.Error(), "timezone") {
		t.Fatalf("err = %v", r.Err)
	}
	if after := dump(); after != before {
		t.Fatalf("state changed:\n%s\n---\n%s", before, after)
	}
}

// TestScheduleReplicaEquality applies a random log of schedule commands,
// messages, expiries and deletes in large batches to a store that is
// reopened now and then, and one entry at a time to a replica: their dumps
// must be equal, and survive reopens and power losses.
func TestScheduleReplicaEquality(t *testing.T) {
	for seed := int64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { scheduleReplicaRun(t, seed) })
	}
}

func scheduleReplicaRun(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	k := newStoreKit(t, Options{})
	rep := newStoreKit(t, Options{})
	rep.log = nil
	names := []string{"a", "b", "c", "d", "e"}
	zones := []string{"", "Europe/Berlin", "America/New_York"}
	now := t0
	var pending []Entry
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if _, err := k.s.Apply(pending); err != nil {
			t.Fatal(err)
		}
		k.log = append(k.log, pending...)
		for _, e := range pending {
			if _, err := rep.s.Apply([]Entry{e}); err != nil {
				t.Fatal(err)
			}
		}
		pending = nil
	}
	since := now - 2000 // the current leader's SinceMs
	for step := 0; step < 600; step++ {
		now += int64(rng.Intn(900))
		switch rng.Intn(40) {
		case 0: // a slow leader: its advances come late
			now += int64(rng.Intn(8000))
		case 1: // an outage, and a new leader
			now += int64(rng.Intn(30_000))
			since = now - 2000
		}
		var cmd command.Command
		switch p := rng.Intn(10); {
		case p < 2:
			sp := command.ScheduleSpec{Name: names[rng.Intn(len(names))], Topic: fmt.Sprintf("t%d", rng.Intn(2)), Body: []byte{byte(step)}}
			if rng.Intn(2) == 0 {
				sp.EveryMs = int64(1000 + rng.Intn(3)*500)
			} else {
				sp.Cron, sp.Timezone = "*/2 * * * * *", zones[rng.Intn(len(zones))]
			}
			if rng.Intn(4) == 0 {
				sp.EndAtMs = now + int64(rng.Intn(20_000))
			}
			cmd = command.SetSchedule{NowMs: now, Spec: sp}
		case p < 3:
			cmd = command.DeleteSchedule{Name: names[rng.Intn(len(names))]}
		case p < 8:
			flush() // the leader reads the committed due order
			due, err := k.s.DueSchedules(now+2000, 3)
			if err != nil {
				t.Fatal(err)
			}
			if rng.Intn(5) == 0 && len(due) > 0 {
				due = append(due, due[0]) // a retry within the entry
			}
			cmd = command.AdvanceSchedules{NowMs: now, SinceMs: since, Items: due}
		case p < 9:
			cmd = command.Expire{Before: now / TickMs}
		default:
			cmd = command.Schedule{NowMs: now, Messages: []command.NewMessage{{Topic: "t0", Key: OccurrenceKey("a", now/1000*1000+2000), DeliverAtMs: now + 2000}}}
		}
		k.idx++
		pending = append(pending, Entry{Index: k.idx, Cmds: []command.Command{cmd}})
		if rng.Intn(4) == 0 {
			flush()
		}
		switch rng.Intn(100) {
		case 0:
			flush()
			k.reopen()
		case 1:
			// Power loss: what was not synced is gone, and the log suffix
			// is applied again.
			flush()
			k.s.CrashForTest(k.fs)
			k.open()
			from := k.s.AppliedIndex()
			var replay []Entry
			for _, e := range k.log {
				if e.Index > from {
					replay = append(replay, e)
				}
			}
			if _, err := k.s.Apply(replay); err != nil {
				t.Fatal(err)
			}
		}
	}
	flush()
	equalDumps(t, k.s, rep.s)
	if k.s.NumSchedules() == 0 {
		t.Fatal("the log left no schedule; the test covers too little")
	}
	k.reopen()
	equalDumps(t, k.s, rep.s)
}

func equalDumps(t *testing.T, a, b *Store) {
	t.Helper()
	var da, db bytes.Buffer
	if err := a.Dump(&da); err != nil {
		t.Fatal(err)
	}
	if err := b.Dump(&db); err != nil {
		t.Fatal(err)
	}
	if da.String() != db.String() {
		t.Fatalf("dumps differ:\n%s\n---\n%s", da.String(), db.String())
	}
	if !strings.Contains(da.String(), "schedule \"") {
		t.Fatal("dump lists no schedule")
	}
}

// allDue reads the whole due order, from its start, up to to: what
// DueSchedules must return, whatever its floor.
func (k *storeKit) allDue(to int64) []command.AdvanceItem {
	k.t.Helper()
	var out []command.AdvanceItem
	err := k.s.scanRange([]byte{pScheduleDue}, scheduleDueKey(to+1, ""), func(key, _ []byte) error {
		out = append(out, dueItem(key))
		return nil
	})
	if err != nil {
		k.t.Fatal(err)
	}
	return out
}

// TestDueSchedulesFloor: DueSchedules reads from a floor it raises, and
// still returns every schedule due, in order, as a scan of the whole due
// order does: after advances, with schedules set earlier than a look
// reached (their entry committed late) and deleted, with the instant
// looked up to going back (a clock stepped back), and after a reopen.
func TestDueSchedulesFloor(t *testing.T) {
	k := newStoreKit(t, Options{})
	k.apply(command.Expire{Before: SecondOf(t0)})
	rng := rand.New(rand.NewSource(11))
	now := t0
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	looks := 0
	for step := range 3000 {
		switch p := rng.Intn(10); {
		case p < 2:
			// Stamped up to 30 s before now: an entry that took long to commit.
			at := now - int64(rng.Intn(30_000))
			sp := command.ScheduleSpec{Name: names[rng.Intn(len(names))], Topic: "t", EveryMs: int64(1000 + rng.Intn(4)*250),
				StartAtMs: at + int64(rng.Intn(5000))}
			k.one(command.SetSchedule{NowMs: at, Spec: sp})
		case p < 3:
			k.apply(command.DeleteSchedule{Name: names[rng.Intn(len(names))]})
		default:
			to := now + 2000
			if rng.Intn(10) == 0 {
				to = now - int64(rng.Intn(5000)) // the clock went back
			}
			want := k.allDue(to)
			got, err := k.s.DueSchedules(to, len(names)+1)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: DueSchedules(%d) = %v; the whole due order has %v", step, to, got, want)
			}
			looks += len(got)
			if len(got) > 0 && rng.Intn(4) > 0 {
				k.advance(now, got...)
			}
		}
		now += int64(rng.Intn(300))
		if rng.Intn(200) == 0 {
			k.reopen()
		}
	}
	if looks < 1000 {
		t.Fatalf("%d schedules found due in all; the test covers too little", looks)
	}
}

// TestScheduleAdvanceWritesTheCalendarOnly: an advance rewrites a
// schedule's calendar and leaves the schedule as set, body and all,
// untouched in the index; a set rewrites both, and a delete removes both.
func TestScheduleAdvanceWritesTheCalendarOnly(t *testing.T) {
	k := newStoreKit(t, Options{})
	spec := command.ScheduleSpec{Name: "a", Topic: "jobs", EveryMs: 1000, StartAtMs: t0 + 3000, Body: bytes.Repeat([]byte("b"), 200)}
	k.one(command.SetSchedule{NowMs: t0, Spec: spec})
	stored := func() (sched, cal []byte) {
		t.Helper()
		var err error
		if sched, err = k.s.get(scheduleKey("a")); err != nil {
			t.Fatal(err)
		}
		if cal, err = k.s.get(calendarKey("a")); err != nil {
			t.Fatal(err)
		}
		return sched, cal
	}
	set, cal0 := stored()
	if set == nil || cal0 == nil {
		t.Fatalf("after set: schedule %x, calendar %x", set, cal0)
	}
	// The keys an advance's batch writes, read off the batch before it is
	// thrown away: not the schedule's.
	tx := k.s.newTx()
	tx.index = k.idx + 1
	if r := tx.apply(command.AdvanceSchedules{NowMs: t0 + 1000, SinceMs: t0 - 1000, Items: []command.AdvanceItem{{Name: "a", FromMs: t0 + 3000}}}); r.Err != nil || tx.err != nil {
		t.Fatalf("advance: %v, %v", r.Err, tx.err)
	}
	for rd := tx.b.Reader(); ; {
		_, key, _, ok, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if key[0] == pSchedule {
			t.Errorf("an advance writes the schedule's key %q", key)
		}
	}
	tx.b.Close()
	if r := k.advance(t0+1000, command.AdvanceItem{Name: "a", FromMs: t0 + 3000}); r != (command.AdvanceResult{Fired: 1}) {
		t.Fatalf("advance: %+v", r)
	}
	sched, cal1 := stored()
	if !bytes.Equal(sched, set) {
		t.Errorf("the advance changed the schedule: %x, set %x", sched, set)
	}
	if bytes.Equal(cal1, cal0) || len(cal1) > 16 {
		t.Errorf("calendar after the advance %x (%d bytes), before %x", cal1, len(cal1), cal0)
	}
	k.reopen() // read from the index, not the cache
	if info := k.scheduleInfo("a"); info.LastMs != t0+3000 || info.NextMs != t0+4000 || info.Fired != 1 || !bytes.Equal(info.Body, spec.Body) {
		t.Errorf("after a reopen: %+v", info)
	}
	spec.Body = []byte("new")
	k.one(command.SetSchedule{NowMs: t0 + 1500, Spec: spec})
	if sched, cal := stored(); bytes.Equal(sched, set) || bytes.Equal(cal, cal1) {
		t.Errorf("a set left the schedule %x or the calendar %x as they were", sched, cal)
	}
	k.one(command.DeleteSchedule{Name: "a"})
	if sched, cal := stored(); sched != nil || cal != nil {
		t.Errorf("after a delete: schedule %x, calendar %x", sched, cal)
	}
}

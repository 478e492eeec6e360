package replication

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

// storeOccurrenceKeys is occurrenceKeys of a store.
func storeOccurrenceKeys(t *testing.T, st *wheel.Store, schedule string) map[int64]bool {
	t.Helper()
	var b bytes.Buffer
	if err := st.Dump(&b); err != nil {
		t.Fatal(err)
	}
	out := map[int64]bool{}
	prefix := "schedule:" + schedule + ":"
	sc := bufio.NewScanner(&b)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 5 || f[0] != "key" {
			continue
		}
		key, _ := strconv.Unquote(f[3])
		if ms, ok := strings.CutPrefix(key, prefix); ok {
			v, err := strconv.ParseInt(ms, 10, 64)
			if err != nil {
				t.Fatalf("key %q: %v", key, err)
			}
			out[v] = true
		}
	}
	return out
}

// storeProposer applies proposals straight to a store, one entry each,
// and records them.
type storeProposer struct {
	st      *wheel.Store
	index   uint64
	entries [][]command.Command
}

func (p *storeProposer) propose(_ context.Context, cmds ...command.Command) ([]command.Result, error) {
	p.index++
	p.entries = append(p.entries, cmds)
	res, err := p.st.Apply([]wheel.Entry{{Index: p.index, Cmds: cmds}})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// schedulerKit is a store whose cursor stands at a fake clock's time,
// commands applied to it one entry each, and schedulers over it.
type schedulerKit struct {
	st    *wheel.Store
	clock *wheeltest.FakeClock
	p     *storeProposer
}

func newSchedulerKit(t *testing.T) *schedulerKit {
	t.Helper()
	st, err := wheel.Open(t.TempDir(), wheel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	k := &schedulerKit{st: st, clock: wheeltest.NewFakeClock(time.UnixMilli(1_700_000_000_000)), p: &storeProposer{st: st}}
	if _, err := k.p.propose(context.Background(), command.Expire{Before: k.now() / 1000}); err != nil {
		t.Fatal(err)
	}
	return k
}

func (k *schedulerKit) now() int64 { return k.clock.Now().UnixMilli() }

// scheduler returns a scheduler looking 2 s ahead, every 250 ms, in
// entries of at most batch items.
func (k *schedulerKit) scheduler(batch int) *scheduler {
	st := k.st
	return &scheduler{clock: k.clock, log: slog.New(slog.DiscardHandler), store: func() *wheel.Store { return st }, propose: k.p.propose,
		met: newScheduleMetrics(func() *wheel.Store { return st }), ahead: 2 * time.Second, every: 250 * time.Millisecond, batch: batch}
}

// The scheduler advances every schedule due within its lead in entries of
// at most batch items, and keeps each schedule's occurrences enqueued that
// far ahead.
func TestSchedulerBatchesAdvances(t *testing.T) {
	k := newSchedulerKit(t)
	st, clock, p, now := k.st, k.clock, k.p, k.now
	start := clock.Now()
	for i := range 5 {
		spec := command.ScheduleSpec{Name: fmt.Sprintf("s%d", i), Topic: "t", EveryMs: 1000, StartAtMs: now() + 500}
		if _, err := p.propose(context.Background(), command.SetSchedule{NowMs: now(), Spec: spec}); err != nil {
			t.Fatal(err)
		}
	}
	s := k.scheduler(2)
	met := s.met
	var last int64
	for range 20 {
		last = now()
		p.entries = nil
		if err := s.step(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, e := range p.entries {
			if n := len(e[0].(command.AdvanceSchedules).Items); n > 2 {
				t.Fatalf("an entry advanced %d schedules; the batch is 2", n)
			}
		}
		for i := range 5 {
			info, err := st.Schedule(fmt.Sprintf("s%d", i))
			if err != nil {
				t.Fatal(err)
			}
			if info.NextMs <= now()+2000 || info.LastMs == 0 {
				t.Fatalf("at %d: schedule %s next %d last %d; want everything due within 2 s enqueued", now(), info.Name, info.NextMs, info.LastMs)
			}
		}
		clock.Advance(250 * time.Millisecond)
	}
	// Each schedule enqueued its occurrences from start+500 to 2 s after
	// the last look, once each.
	if got, want := testutilCounter(t, met), 5*int((last+2000-(start.UnixMilli()+500))/1000+1); got != want {
		t.Fatalf("%d occurrences enqueued; want %d", got, want)
	}
}

func testutilCounter(t *testing.T, m *scheduleMetrics) int {
	t.Helper()
	var d dto.Metric
	if err := m.occurrences.Write(&d); err != nil {
		t.Fatal(err)
	}
	return int(d.GetCounter().GetValue())
}

// A leader whose scheduler is held back (its clock jumps ahead between two
// looks, as when it is starved of CPU) enqueues every occurrence late,
// none skipped, and catches up; a leader that takes over after an outage
// fires the occurrences missed meanwhile once, and goes on from its time.
func TestSchedulerHeldBackSkipsNothing(t *testing.T) {
	k := newSchedulerKit(t)
	st, clock, p, now := k.st, k.clock, k.p, k.now
	ctx := context.Background()
	start := now() + 500
	spec := command.ScheduleSpec{Name: "s", Topic: "t", EveryMs: 1000, StartAtMs: start}
	if _, err := p.propose(ctx, command.SetSchedule{NowMs: now(), Spec: spec}); err != nil {
		t.Fatal(err)
	}
	s := k.scheduler(2)
	// The leader looks on time, then is held back by 5 s, and by 15 s.
	for _, d := range []time.Duration{250 * time.Millisecond, 5 * time.Second, 250 * time.Millisecond, 5 * time.Second,
		15 * time.Second, 250 * time.Millisecond} {
		clock.Advance(d)
		if err := s.step(ctx); err != nil {
			t.Fatal(err)
		}
		info, err := st.Schedule("s")
		if err != nil {
			t.Fatal(err)
		}
		if info.NextMs <= now()+2000 {
			t.Fatalf("after a look at %d, next %d: the leader has not caught up", now(), info.NextMs)
		}
		if want := (info.LastMs-start)/1000 + 1; info.Fired != want {
			t.Fatalf("fired %d up to %d; want %d, one per second from %d", info.Fired, info.LastMs, want, start)
		}
	}
	keys := storeOccurrenceKeys(t, st, "s")
	info, _ := st.Schedule("s")
	for ms := start; ms <= info.LastMs; ms += 1000 {
		if !keys[ms] {
			t.Errorf("occurrence %d skipped by a live leader", ms)
		}
	}
	// No leader for a minute; the next one fires the first missed
	// occurrence once, late, and goes on from its own time.
	missed := info.NextMs
	clock.Advance(time.Minute)
	s = k.scheduler(2)
	if err := s.step(ctx); err != nil {
		t.Fatal(err)
	}
	after, _ := st.Schedule("s")
	if want := info.Fired + 1 + 2; after.Fired != want || !storeOccurrenceKeys(t, st, "s")[missed] {
		t.Fatalf("after the outage: fired %d (want %d: the missed %d once, then the next 2 s)", after.Fired, want, missed)
	}
	if after.NextMs <= now()+2000 || after.NextMs > now()+3000 {
		t.Fatalf("after the outage at %d: next %d", now(), after.NextMs)
	}
}

// TestSchedulerFindsScheduleSetBehindIt: a schedule whose SetSchedule was
// stamped long before it committed (its first occurrence already behind
// where the scheduler's looks have got to) is advanced at the next look,
// not at a periodic look from the start.
func TestSchedulerFindsScheduleSetBehindIt(t *testing.T) {
	k := newSchedulerKit(t)
	st, clock, p, now := k.st, k.clock, k.p, k.now
	ctx := context.Background()
	s := k.scheduler(10)
	for range 4 { // looks that find nothing
		if err := s.step(ctx); err != nil {
			t.Fatal(err)
		}
		clock.Advance(250 * time.Millisecond)
	}
	stamped := now() - 30_000
	spec := command.ScheduleSpec{Name: "late", Topic: "t", EveryMs: 1000, StartAtMs: stamped + 500}
	if _, err := p.propose(ctx, command.SetSchedule{NowMs: stamped, Spec: spec}); err != nil {
		t.Fatal(err)
	}
	if err := s.step(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := st.Schedule("late")
	if err != nil {
		t.Fatal(err)
	}
	if info.Fired == 0 || info.NextMs <= now()+2000 {
		t.Fatalf("after the next look: %+v; want its occurrences up to 2 s ahead enqueued", info)
	}
}

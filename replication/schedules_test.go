package replication

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
)

// occurrenceKeys returns the keys of the messages in n's store that name
// an occurrence of schedule, by their millisecond.
func occurrenceKeys(t *testing.T, n *Node, schedule string) map[int64]bool {
	t.Helper()
	return storeOccurrenceKeys(t, n.store(), schedule)
}

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

// Each occurrence is enqueued ahead of its time and handed out at its
// millisecond, keyed by it, like any message.
func TestScheduleOccurrencesFire(t *testing.T) {
	c := NewTestCluster(t, 1, nil)
	n := c.Leader().Node
	ctx := context.Background()
	start := time.Now().Add(2500 * time.Millisecond).UnixMilli()
	info, err := n.SetSchedule(ctx, command.ScheduleSpec{Name: "tick", Topic: "jobs", EveryMs: 1000, StartAtMs: start, Body: []byte("b")})
	if err != nil {
		t.Fatal(err)
	}
	if info.NextMs != start {
		t.Fatalf("next = %d; want %d", info.NextMs, start)
	}
	for k := int64(0); k < 2; k++ {
		got := reserve(t, n, "jobs", 1, 10*time.Second)
		if len(got) != 1 {
			t.Fatalf("occurrence %d not handed out", k)
		}
		m := got[0].Message
		if m.DeliverAtMs != start+k*1000 || m.Key != wheel.OccurrenceKey("tick", start+k*1000) || string(m.Body) != "b" {
			t.Fatalf("occurrence %d: due %d key %q", k, m.DeliverAtMs, m.Key)
		}
		if now := time.Now().UnixMilli(); now < m.DeliverAtMs {
			t.Fatalf("occurrence %d handed out %d ms early", k, m.DeliverAtMs-now)
		}
	}
	if err := n.DeleteSchedule(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	if got, err := n.Schedules(ctx, "", 10); err != nil || len(got) != 0 {
		t.Fatalf("schedules after delete: %v %v", got, err)
	}
}

// advanceHold holds a node's state machine at the first batch holding an
// AdvanceSchedules, once armed: that entry has committed, and the node
// has not applied it.
type advanceHold struct {
	armed atomic.Bool
	held  chan int64 // the occurrence the held entry enqueues
	gate  chan struct{}
}

func (h *advanceHold) wait(logs []*raft.Log) {
	if !h.armed.Load() {
		return
	}
	for _, l := range logs {
		if l.Type != raft.LogCommand {
			continue
		}
		cmds, _ := command.DecodeCommands(l.Data)
		for _, c := range cmds {
			if a, ok := c.(command.AdvanceSchedules); ok && len(a.Items) > 0 && h.armed.CompareAndSwap(true, false) {
				h.held <- a.Items[0].FromMs
				<-h.gate
				return
			}
		}
	}
}

// The leader dies after an occurrence's advance committed and before it
// applied it (so before it computed the next one): the next leader
// applies the entry and goes on, every occurrence is enqueued once, none
// is missed, and each stays on the calendar start + k·every_ms.
func TestScheduleLeaderKilledBetweenOccurrences(t *testing.T) {
	holds := map[string]*advanceHold{}
	c := NewTestCluster(t, 3, func(cfg *Config) {
		h := &advanceHold{held: make(chan int64, 1), gate: make(chan struct{})}
		holds[cfg.ID] = h
		cfg.beforeApply = h.wait
	})
	li := -1
	leader := c.Leader()
	for i, tn := range c.Nodes {
		if tn == leader {
			li = i
		}
	}
	hold := holds[leader.Cfg.ID]
	hold.armed.Store(true)
	const every = 4000
	start := time.Now().Add(3 * time.Second).UnixMilli()
	if _, err := leader.Node.SetSchedule(context.Background(), command.ScheduleSpec{Name: "s", Topic: "jobs", EveryMs: every, StartAtMs: start}); err != nil {
		t.Fatal(err)
	}
	var held int64
	select {
	case held = <-hold.held:
	case <-time.After(30 * time.Second):
		t.Fatal("no advance reached the leader's state machine")
	}
	// Shut the leader's Raft down while its state machine holds the entry,
	// so the node cannot act on it; then let the entry go, and stop it.
	old := leader.Node
	shut := old.raft.Shutdown()
	WaitFor(t, 30*time.Second, "the old leader's Raft to shut down", func() bool { return old.raft.State() == raft.Shutdown })
	close(hold.gate)
	if err := shut.Error(); err != nil {
		t.Fatal(err)
	}
	c.Stop(li)

	nl := c.Leader()
	WaitFor(t, 30*time.Second, "the occurrence after the held one to be enqueued", func() bool {
		info, err := nl.Node.store().Schedule("s")
		return err == nil && info.LastMs >= held+every
	})
	keys := occurrenceKeys(t, nl.Node, "s")
	info, err := nl.Node.store().Schedule("s")
	if err != nil {
		t.Fatal(err)
	}
	if !keys[held] || !keys[held+every] {
		t.Fatalf("held occurrence %d or the next one missing: %v", held, keys)
	}
	for ms := range keys {
		if (ms-start)%every != 0 {
			t.Errorf("occurrence %d is off the calendar (start %d, every %d)", ms, start, every)
		}
	}
	for ms := start; ms <= info.LastMs; ms += every {
		if !keys[ms] {
			t.Errorf("occurrence %d missed", ms)
		}
	}
	var msgs int64
	for _, tc := range nl.Node.store().Topics() {
		if tc.Topic == "jobs" {
			msgs = tc.Delayed + tc.Ready + tc.Reserved + tc.Dead
		}
	}
	if msgs != int64(len(keys)) || info.Fired != int64(len(keys)) {
		t.Fatalf("%d messages and %d fired for %d occurrences", msgs, info.Fired, len(keys))
	}
}

// Schedules are part of the store's snapshots: a node whose store is gone
// gets them back from its snapshot, and the gauge counts them.
func TestSchedulesRestoredFromSnapshot(t *testing.T) {
	c := NewTestCluster(t, 1, nil)
	l := c.Leader()
	ctx := context.Background()
	for _, name := range []string{"a", "b", "c"} {
		spec := command.ScheduleSpec{Name: name, Topic: "t", Cron: "0 9 * * *", Timezone: "America/New_York"}
		if _, err := l.Node.SetSchedule(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	want, err := l.Node.Schedules(ctx, "", 10)
	if err != nil || len(want) != 3 {
		t.Fatalf("schedules: %v %v", want, err)
	}
	if err := l.Node.Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	c.Stop(0)
	if err := os.RemoveAll(filepath.Join(l.Cfg.DataDir, "fsm")); err != nil {
		t.Fatal(err)
	}
	c.Start(0)
	l = c.Leader()
	got, err := l.Node.Schedules(ctx, "", 10)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("after restoring the snapshot: %+v, %v; want %+v", got, err, want)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(l.Node.Collector())
	if v := metricValue(t, reg, "delaywheel_schedules", nil); v != 3 {
		t.Fatalf("delaywheel_schedules = %v; want 3", v)
	}
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
	clock *wheel.FakeClock
	p     *storeProposer
}

func newSchedulerKit(t *testing.T) *schedulerKit {
	t.Helper()
	st, err := wheel.Open(t.TempDir(), wheel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	k := &schedulerKit{st: st, clock: wheel.NewFakeClock(time.UnixMilli(1_700_000_000_000)), p: &storeProposer{st: st}}
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

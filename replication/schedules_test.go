package replication_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	. "github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
)

// occurrenceKeys returns the keys of the messages in n's store that name
// an occurrence of schedule, by their millisecond.
func occurrenceKeys(t *testing.T, n *Node, schedule string) map[int64]bool {
	t.Helper()
	return StoreOccurrenceKeys(t, n.Store(), schedule)
}

// Each occurrence is enqueued ahead of its time and handed out at its
// millisecond, keyed by it, like any message.
func TestScheduleOccurrencesFire(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
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
	c := repltest.NewCluster(t, 3, func(cfg *Config) {
		h := &advanceHold{held: make(chan int64, 1), gate: make(chan struct{})}
		holds[cfg.ID] = h
		SetBeforeApply(cfg, h.wait)
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
	shut := old.Raft().Shutdown()
	nettest.WaitFor(t, 30*time.Second, "the old leader's Raft to shut down", func() bool { return old.Raft().State() == raft.Shutdown })
	close(hold.gate)
	if err := shut.Error(); err != nil {
		t.Fatal(err)
	}
	c.Stop(li)

	nl := c.Leader()
	nettest.WaitFor(t, 30*time.Second, "the occurrence after the held one to be enqueued", func() bool {
		info, err := nl.Node.Store().Schedule("s")
		return err == nil && info.LastMs >= held+every
	})
	keys := occurrenceKeys(t, nl.Node, "s")
	info, err := nl.Node.Store().Schedule("s")
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
	for _, tc := range nl.Node.Store().Topics() {
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
	c := repltest.NewCluster(t, 1, nil)
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

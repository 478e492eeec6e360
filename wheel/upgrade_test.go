package wheel

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

// format7Dir is a store written by the code of index format 7
// (testdata/format7/README).
const format7Dir = "testdata/format7"

// copyGolden copies a store of testdata into a new directory and returns it.
func copyGolden(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if filepath.Ext(path) == ".txt" || d.Name() == "README" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// openGolden opens the store in dir on the OS file system; its log goes on
// from the index the store has applied.
func openGolden(t *testing.T, dir string, readOnly bool) *storeKit {
	t.Helper()
	k := &storeKit{t: t, dir: dir, opts: Options{FS: vfs.Default, ReadOnly: readOnly}}
	k.open()
	t.Cleanup(func() {
		if k.s != nil {
			k.s.Close()
		}
	})
	k.idx = k.s.AppliedIndex()
	return k
}

func (k *storeKit) wantFormat(want uint64) {
	k.t.Helper()
	if v, err := k.s.get(keyFormat); err != nil || u64(v) != want {
		k.t.Fatalf("format key %x, %v; want %d", v, err, want)
	}
}

// format7Msg is a message of testdata/format7: its id is (2, seq).
type format7Msg struct {
	seq      uint32
	topic    string
	state    State
	dueMs    int64 // DeliverAtMs: for a reserved message, its redelivery
	attempts int32
	body     string
}

func (m format7Msg) id() model.ID { return model.ID{Index: 2, Seq: m.seq} }

const hourMs = int64(3_600_000)

// format7Pending are the messages of testdata/format7 that come due: each
// is handed out once, at its due time (m5 is ready already).
var format7Pending = []format7Msg{
	{0, "jobs", StateDelayed, t0 + 3*hourMs, 0, "m0 unkeyed 3h"},
	{1, "jobs", StateDelayed, t0 + 24*hourMs, 0, "m1 keyed 24h"},
	{2, "jobs", StateDelayed, t0 + 24*hourMs + 500, 0, "m2 unkeyed 24h"},
	{3, "jobs", StateDelayed, t0 + 10_000, 0, "m3 unkeyed 10s"},
	{4, "jobs", StateDelayed, t0 + 20_000, 0, "m4 keyed 20s"},
	{5, "jobs", StateReady, t0 - 5000, 0, "m5 ready"},
	{6, "jobs", StateReserved, t0 + 60_000, 1, "m6 reserved"},
	{7, "jobs", StateDelayed, t0 + 30_200, 1, "m7 nacked 30s"},
	{8, "jobs", StateDelayed, t0 + 12_600_200, 1, "m8 nacked 3.5h"},
	{10, "jobs", StateReserved, t0 + 4*hourMs, 1, "m10 reserved 4h"},
	{12, "mail", StateDelayed, t0 + 3*hourMs + 1000, 0, "m12 mail 3h"},
}

// format7Dead is the dead letter of testdata/format7; m11 was cancelled.
var (
	format7Dead      = format7Msg{9, "jobs", StateDead, t0 + 60_000, 1, "m9 dead"}
	format7Cancelled = model.ID{Index: 2, Seq: 11}
)

func (k *storeKit) wantFormat7Msg(m format7Msg) {
	k.t.Helper()
	k.wantState(m.id(), m.state, m.dueMs, m.attempts)
	if v := k.get(m.id()); v.Topic != m.topic || string(v.Body) != m.body {
		k.t.Fatalf("message %s is %q in %q; want %q in %q", m.id(), v.Body, v.Topic, m.body, m.topic)
	}
}

// wantFormat7 checks that the store holds every message of
// testdata/format7 as it was written.
func (k *storeKit) wantFormat7() {
	k.t.Helper()
	for _, m := range format7Pending {
		k.wantFormat7Msg(m)
	}
	k.wantFormat7Msg(format7Dead)
	k.wantGone(format7Cancelled)
	k.wantCounts(TopicCounts{Topic: "jobs", Delayed: 7, Ready: 1, Reserved: 2, Dead: 1})
	k.wantCounts(TopicCounts{Topic: "mail", Delayed: 1})
	if got := k.deadIDs("jobs"); !slices.Equal(got, []model.ID{format7Dead.id()}) {
		k.t.Fatalf("dead letters %v, want %s", got, format7Dead.id())
	}
	if w := k.wheel(); w.OverflowMessages != 6 {
		k.t.Fatalf("%d messages in the overflow, want 6", w.OverflowMessages)
	}
}

// TestFormat7Upgrade opens a store written by the code of index format 7:
// read-only it reads every message and records nothing; read-write it
// records format 8 and then hands out every message once, when it comes
// due, as a leader would (expiring and promoting by a fake clock, loading
// the slots about to come due, leasing and acking what comes due and
// what is ready), with the overflow messages promoted from their metas.
func TestFormat7Upgrade(t *testing.T) {
	dir := copyGolden(t, format7Dir)

	ro := openGolden(t, dir, true)
	ro.wantFormat(upgradableFormat)
	ro.wantFormat7()
	if err := ro.s.Close(); err != nil {
		t.Fatal(err)
	}
	ro.s = nil

	k := openGolden(t, dir, false)
	k.wantFormat(indexFormat)
	k.wantFormat7()
	// The key index holds the keyed messages' keys.
	for key, want := range map[string]uint32{"k24": 1, "k20": 4} {
		enq := k.schedule(t0+50, command.NewMessage{Topic: "jobs", Key: key, DeliverAtMs: t0 + 5000})
		if !enq[0].Duplicate || enq[0].ID != (model.ID{Index: 2, Seq: want}) {
			t.Fatalf("enqueue with key %q: %+v; want a duplicate of m%d", key, enq[0], want)
		}
	}

	l := NewLoader()
	k.s.AttachLoader(l)
	clk := wheeltest.NewFakeClock(time.UnixMilli(t0))
	due := map[model.ID]int64{}
	steps := []int64{}
	for _, m := range format7Pending {
		due[m.id()] = m.dueMs
		steps = append(steps, max(m.dueMs-1, t0), max(m.dueMs, t0))
	}
	for ms := t0; ms <= t0+25*hourMs; ms += 10 * 60_000 {
		steps = append(steps, ms)
	}
	slices.Sort(steps)
	steps = slices.Compact(steps)

	handedAt := map[model.ID]int64{}
	var nonce uint64 = 1000
	handOut := func(m model.Message, now int64) {
		t.Helper()
		want, ok := due[m.ID]
		switch {
		case !ok:
			t.Fatalf("at %d: handed out %s, which is not pending", now, m.ID)
		case handedAt[m.ID] != 0:
			t.Fatalf("at %d: handed out %s again (first at %d)", now, m.ID, handedAt[m.ID])
		case m.DeliverAtMs > now || want > now:
			t.Fatalf("at %d: handed out %s due %d (pending due %d): early", now, m.ID, m.DeliverAtMs, want)
		}
		handedAt[m.ID] = now
		nonce++
		r := k.one(command.Lease{NowMs: now, Items: []command.LeaseItem{{ID: m.ID, Nonce: nonce, ExpiresMs: now + 30_000, RedeliverMs: now + 30_000}}}).([]bool)
		if !r[0] {
			t.Fatalf("at %d: lease of %s refused", now, m.ID)
		}
		if n := k.one(command.Ack{NowMs: now, Receipts: []model.Receipt{{ID: m.ID, Nonce: nonce}}}).(command.Counted); n.Done != 1 {
			t.Fatalf("at %d: ack of %s: %+v", now, m.ID, n)
		}
	}
	for _, now := range steps {
		clk.Set(time.UnixMilli(now))
		now := clk.Now().UnixMilli()
		if before := SecondOf(now); before > k.s.Cursor() {
			for _, r := range k.apply(command.Expire{Before: before}, command.Promote{Before: before + HorizonSecs}) {
				if r.Err != nil {
					t.Fatalf("at %d: %v", now, r.Err)
				}
			}
		}
		k.load(SecondOf(now) + 2)
		popped, _ := l.PopDue(now)
		for _, m := range popped {
			handOut(m, now)
		}
		for _, topic := range []string{"jobs", "mail"} {
			vs, err := k.s.Ready(topic, 1000, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vs {
				handOut(v.Message, now)
			}
		}
		for _, m := range format7Pending {
			switch {
			case handedAt[m.id()] != 0:
				k.wantGone(m.id())
			case m.dueMs <= now:
				t.Fatalf("at %d: %s due %d not handed out", now, m.id(), m.dueMs)
			default:
				k.wantFormat7Msg(m)
			}
		}
	}
	for _, m := range format7Pending {
		if at := handedAt[m.id()]; at != max(m.dueMs, t0) {
			t.Fatalf("%s due %d handed out at %d", m.id(), m.dueMs, at)
		}
	}
	k.wantCounts(TopicCounts{Topic: "jobs", Dead: 1})
	k.wantCounts(TopicCounts{Topic: "mail"})
	if w := k.wheel(); w.OverflowMessages != 0 {
		t.Fatalf("%d messages left in the overflow", w.OverflowMessages)
	}

	for _, readOnly := range []bool{false, true} {
		if err := k.s.Close(); err != nil {
			t.Fatal(err)
		}
		k.opts.ReadOnly = readOnly
		k.open()
		k.wantFormat(indexFormat)
		k.wantFormat7Msg(format7Dead)
	}
}

// TestFormat7UpgradeChanges changes the overflow messages of a store
// written in index format 7, whose metas that format wrote, after the
// upgrade: cancels by id and by key, a reschedule, and an Expire hours
// ahead without its Promote, then the Promote, which moves the overflow
// messages now past the cursor to ready.
func TestFormat7UpgradeChanges(t *testing.T) {
	k := openGolden(t, copyGolden(t, format7Dir), false)
	m0, m2, m8, m10, m12 := format7Pending[0], format7Pending[2], format7Pending[8], format7Pending[9], format7Pending[10]
	k.one(command.Cancel{ID: m0.id()})
	k.one(command.Cancel{Topic: "jobs", Key: "k24"})
	k.one(command.Reschedule{ID: m12.id(), DeliverAtMs: t0 + 5*hourMs})
	k.wantGone(m0.id())
	k.wantGone(format7Pending[1].id())
	k.wantState(m12.id(), StateDelayed, t0+5*hourMs, 0)
	if w := k.wheel(); w.OverflowMessages != 4 {
		t.Fatalf("%d messages in the overflow, want 4", w.OverflowMessages)
	}

	before := t0s + 6*3600
	k.apply(command.Expire{Before: before})
	for _, m := range []format7Msg{m2, m8, m10} {
		k.wantFormat7Msg(m)
	}
	k.wantState(m12.id(), StateDelayed, t0+5*hourMs, 0)
	k.apply(command.Promote{Before: before + HorizonSecs})
	k.wantFormat7Msg(m2)
	k.wantState(m8.id(), StateReady, m8.dueMs, 1)
	k.wantState(m10.id(), StateReady, m10.dueMs, 1)
	k.wantState(m12.id(), StateReady, t0+5*hourMs, 0)
	k.wantCounts(TopicCounts{Topic: "jobs", Delayed: 1, Ready: 7, Dead: 1})
	k.wantCounts(TopicCounts{Topic: "mail", Ready: 1})
	if w := k.wheel(); w.OverflowMessages != 1 {
		t.Fatalf("%d messages in the overflow, want 1", w.OverflowMessages)
	}
	// The key freed by the cancel is taken by a new message.
	if enq := k.schedule(t0+6*hourMs, command.NewMessage{Topic: "jobs", Key: "k24", DeliverAtMs: t0 + 30*hourMs}); enq[0].Duplicate {
		t.Fatalf("enqueue with key k24 after its cancel: %+v", enq[0])
	}
}

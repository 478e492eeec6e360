package wheel

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// t0 is a second boundary: the wheel's cursor in these tests starts at t0s.
const (
	t0  = int64(1_700_000_000_000)
	t0s = t0 / TickMs
)

// storeKit drives one store on a strict in-memory file system: one log
// entry per apply call, with increasing indexes.
type storeKit struct {
	t    *testing.T
	fs   *vfs.MemFS
	dir  string
	opts Options
	s    *Store
	idx  uint64
	log  []Entry
}

// newStoreKit opens a store whose cursor is at t0s, as a leader's first
// entry leaves it.
func newStoreKit(t *testing.T, opts Options) *storeKit {
	t.Helper()
	fs := vfs.NewStrictMem()
	opts.FS = fs
	k := &storeKit{t: t, fs: fs, dir: "/db", opts: opts}
	k.open()
	t.Cleanup(func() {
		if k.s != nil {
			k.s.Close()
		}
	})
	k.apply(command.Expire{Before: t0s}, command.Promote{Before: t0s + Slots})
	return k
}

func (k *storeKit) open() {
	k.t.Helper()
	s, err := Open(k.dir, k.opts)
	if err != nil {
		k.t.Fatalf("open: %v", err)
	}
	k.s = s
}

func (k *storeKit) reopen() {
	k.t.Helper()
	if err := k.s.Close(); err != nil {
		k.t.Fatalf("close: %v", err)
	}
	k.open()
}

// apply applies cmds as the next log entry and returns their results.
func (k *storeKit) apply(cmds ...command.Command) []command.Result {
	k.t.Helper()
	k.idx++
	e := Entry{Index: k.idx, Cmds: cmds}
	k.log = append(k.log, e)
	res, err := k.s.Apply([]Entry{e})
	if err != nil {
		k.t.Fatalf("apply %d: %v", k.idx, err)
	}
	return res[0]
}

// one applies a single command and fails on a command error.
func (k *storeKit) one(c command.Command) any {
	k.t.Helper()
	r := k.apply(c)[0]
	if r.Err != nil {
		k.t.Fatalf("%T: %v", c, r.Err)
	}
	return r.Value
}

func (k *storeKit) schedule(now int64, msgs ...command.NewMessage) []Enqueued {
	k.t.Helper()
	return k.one(command.Schedule{NowMs: now, Messages: msgs}).([]Enqueued)
}

func (k *storeKit) get(id model.ID) View {
	k.t.Helper()
	v, err := k.s.Get(id)
	if err != nil {
		k.t.Fatalf("get %s: %v", id, err)
	}
	return v
}

func (k *storeKit) wantState(id model.ID, st State, dueMs int64, attempts int32) {
	k.t.Helper()
	v := k.get(id)
	if v.State != st || v.DeliverAtMs != dueMs || v.Attempts != attempts {
		k.t.Fatalf("message %s is %s due %d attempts %d; want %s due %d attempts %d",
			id, v.State, v.DeliverAtMs, v.Attempts, st, dueMs, attempts)
	}
}

func (k *storeKit) wantGone(id model.ID) {
	k.t.Helper()
	if v, err := k.s.Get(id); !errors.Is(err, model.ErrNotFound) {
		k.t.Fatalf("message %s: %+v %v; want not found", id, v.State, err)
	}
}

func (k *storeKit) counts(topic string) TopicCounts {
	for _, c := range k.s.Topics() {
		if c.Topic == topic {
			return c
		}
	}
	return TopicCounts{Topic: topic}
}

func (k *storeKit) wantCounts(want TopicCounts) {
	k.t.Helper()
	if got := k.counts(want.Topic); got != want {
		k.t.Fatalf("counts %+v, want %+v", got, want)
	}
}

func (k *storeKit) readyIDs(topic string) []model.ID {
	k.t.Helper()
	vs, err := k.s.Ready(topic, 1000, nil)
	if err != nil {
		k.t.Fatal(err)
	}
	var out []model.ID
	for _, v := range vs {
		out = append(out, v.ID)
	}
	return out
}

func (k *storeKit) deadIDs(topic string) []model.ID {
	k.t.Helper()
	vs, err := k.s.Dead(topic, 1000)
	if err != nil {
		k.t.Fatal(err)
	}
	var out []model.ID
	for _, v := range vs {
		out = append(out, v.ID)
	}
	return out
}

func (k *storeKit) segPath(second int64) string {
	return k.fs.PathJoin(k.dir, "segments", segment.FileName(second))
}

func (k *storeKit) fileExists(second int64) bool {
	_, err := k.fs.Stat(k.segPath(second))
	return err == nil
}

func (k *storeKit) wheel() Info {
	k.t.Helper()
	w, err := k.s.Wheel()
	if err != nil {
		k.t.Fatal(err)
	}
	return w
}

func ids(es []Enqueued) []model.ID {
	out := make([]model.ID, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func TestScheduleDefaults(t *testing.T) {
	k := newStoreKit(t, Options{})
	now := t0 + 250
	enq := k.schedule(now,
		command.NewMessage{Topic: "orders", Body: []byte("close order 7"), Headers: map[string]string{"a": "b"}, Priority: 3, DeliverAtMs: now + 30_000},
		command.NewMessage{Topic: "orders", DeliverAtMs: now + 1000, TTRMs: 5000, MaxAttempts: 2},
	)
	if len(enq) != 2 || enq[0].Duplicate || enq[1].Duplicate {
		t.Fatalf("enqueued %+v", enq)
	}
	// IDs are (log index, position in the entry).
	if enq[0].ID != (model.ID{Index: k.idx, Seq: 0}) || enq[1].ID != (model.ID{Index: k.idx, Seq: 1}) {
		t.Fatalf("ids %v %v, want (%d,0) (%d,1)", enq[0].ID, enq[1].ID, k.idx, k.idx)
	}
	v := k.get(enq[0].ID)
	want := model.Message{ID: enq[0].ID, Topic: "orders", Body: []byte("close order 7"), Headers: map[string]string{"a": "b"},
		Priority: 3, DeliverAtMs: now + 30_000, TTRMs: DefaultTTRMs, MaxAttempts: DefaultMaxAttempts, EnqueuedMs: now}
	if v.State != StateDelayed || !reflect.DeepEqual(v.Message, want) {
		t.Fatalf("got %+v %s\nwant %+v", v.Message, v.State, want)
	}
	if v := k.get(enq[1].ID); v.TTRMs != 5000 || v.MaxAttempts != 2 || len(v.Body) != 0 {
		t.Fatalf("explicit ttr/max: %+v", v.Message)
	}
	k.wantCounts(TopicCounts{Topic: "orders", Delayed: 2})
	if w := k.wheel(); len(w.NonEmpty) != 2 || w.OverflowMessages != 0 {
		t.Fatalf("wheel %+v", w)
	}
}

func TestScheduleDedupe(t *testing.T) {
	k := newStoreKit(t, Options{})
	now := t0
	enq := k.schedule(now,
		command.NewMessage{Topic: "a", Key: "order-1", Body: []byte("first"), DeliverAtMs: now + 5000},
		command.NewMessage{Topic: "a", Key: "order-1", Body: []byte("same batch"), DeliverAtMs: now + 9000},
		command.NewMessage{Topic: "b", Key: "order-1", DeliverAtMs: now + 9000}, // another topic: not a duplicate
	)
	if enq[0].Duplicate || !enq[1].Duplicate || enq[1].ID != enq[0].ID || enq[1].DeliverAtMs != now+5000 || enq[2].Duplicate {
		t.Fatalf("enqueued %+v", enq)
	}
	// IDs are only spent on new messages.
	if enq[2].ID != (model.ID{Index: k.idx, Seq: 1}) {
		t.Fatalf("third message id %v, want position 1", enq[2].ID)
	}
	if string(k.get(enq[0].ID).Body) != "first" {
		t.Fatal("duplicate overwrote the body")
	}
	dup := k.schedule(now, command.NewMessage{Topic: "a", Key: "order-1", DeliverAtMs: now + 1})
	if !dup[0].Duplicate || dup[0].ID != enq[0].ID {
		t.Fatalf("later duplicate %+v", dup)
	}
	// Reserved still holds the key; the duplicate reports the redelivery time.
	k.apply(command.Expire{Before: t0s + 6})
	now = t0 + 6000
	k.one(command.Lease{NowMs: now, Items: []command.LeaseItem{{ID: enq[0].ID, Nonce: 1, ExpiresMs: now + 100, RedeliverMs: now + 700}}})
	if d := k.schedule(now, command.NewMessage{Topic: "a", Key: "order-1"}); !d[0].Duplicate || d[0].DeliverAtMs != now+700 {
		t.Fatalf("duplicate of reserved %+v", d)
	}
	// Acked: the key is free.
	if c := k.one(command.Ack{NowMs: now, Receipts: []model.Receipt{{ID: enq[0].ID, Nonce: 1}}}).(command.Counted); c.Done != 1 {
		t.Fatalf("ack %+v", c)
	}
	fresh := k.schedule(now, command.NewMessage{Topic: "a", Key: "order-1", DeliverAtMs: now + 1000, MaxAttempts: 1})
	if fresh[0].Duplicate || fresh[0].ID == enq[0].ID {
		t.Fatalf("after ack %+v", fresh)
	}
	// Dead frees the key too.
	k.apply(command.Expire{Before: t0s + 8})
	now = t0 + 8000
	k.one(command.Lease{NowMs: now, Items: []command.LeaseItem{{ID: fresh[0].ID, Nonce: 2, ExpiresMs: now + 100, RedeliverMs: now + 100}}})
	if c := k.one(command.Nack{NowMs: now, Receipts: []model.Receipt{{ID: fresh[0].ID, Nonce: 2}}}).(command.Counted); c.Done != 1 {
		t.Fatalf("nack %+v", c)
	}
	k.wantState(fresh[0].ID, StateDead, now+100, 1)
	third := k.schedule(now, command.NewMessage{Topic: "a", Key: "order-1", DeliverAtMs: now + 1000})
	if third[0].Duplicate {
		t.Fatalf("a dead message still holds its key: %+v", third)
	}
}

func TestSchedulePastDue(t *testing.T) {
	k := newStoreKit(t, Options{})
	k.apply(command.Expire{Before: t0s + 10})
	now := t0 + 10_500 // cursor is t0s+10
	enq := k.schedule(now,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 9_999},  // a second before the cursor: ready
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 10_000}, // the cursor's second, already past: its slot
		command.NewMessage{Topic: "a", DeliverAtMs: -5},          // clamped to 0: ready, first in line
		command.NewMessage{Topic: "a", DeliverAtMs: now},
	)
	k.wantState(enq[0].ID, StateReady, t0+9_999, 0)
	k.wantState(enq[1].ID, StateDelayed, t0+10_000, 0)
	k.wantState(enq[2].ID, StateReady, 0, 0)
	k.wantState(enq[3].ID, StateDelayed, now, 0)
	if enq[2].DeliverAtMs != 0 {
		t.Fatalf("clamped due reported as %d", enq[2].DeliverAtMs)
	}
	if got := k.readyIDs("a"); !reflect.DeepEqual(got, []model.ID{enq[2].ID, enq[0].ID}) {
		t.Fatalf("ready %v", got)
	}
	k.wantCounts(TopicCounts{Topic: "a", Ready: 2, Delayed: 2})
}

func TestScheduleOverflow(t *testing.T) {
	k := newStoreKit(t, Options{})
	edge := (t0s + Slots) * TickMs // the first instant beyond the horizon
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", Body: []byte("far"), DeliverAtMs: t0 + 3*86_400_000},
		command.NewMessage{Topic: "a", DeliverAtMs: edge},
		command.NewMessage{Topic: "a", DeliverAtMs: edge - 1},
		command.NewMessage{Topic: "a", DeliverAtMs: MaxDueMs + 12345},
	)
	w := k.wheel()
	if w.OverflowMessages != 3 || len(w.NonEmpty) != 1 || w.NonEmpty[0].Second != t0s+Slots-1 {
		t.Fatalf("wheel %+v", w)
	}
	if enq[3].DeliverAtMs != MaxDueMs {
		t.Fatalf("due past MaxDueMs reported as %d", enq[3].DeliverAtMs)
	}
	v := k.get(enq[0].ID)
	if v.State != StateDelayed || string(v.Body) != "far" {
		t.Fatalf("overflow get %+v", v)
	}
	k.wantCounts(TopicCounts{Topic: "a", Delayed: 4})
	// Promote does not pass the horizon.
	if n := k.one(command.Promote{Before: t0s + 10*Slots}).(int); n != 0 {
		t.Fatalf("promoted %d beyond the horizon", n)
	}
}

func TestCancel(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 5000},
		command.NewMessage{Topic: "a", Key: "k", DeliverAtMs: t0 + 3*3600_000}, // overflow
		command.NewMessage{Topic: "a", DeliverAtMs: t0 - 5000},                 // ready
		command.NewMessage{Topic: "a", Key: "r", DeliverAtMs: t0 + 100},
	)
	if id := k.one(command.Cancel{ID: enq[0].ID}).(model.ID); id != enq[0].ID {
		t.Fatalf("cancel returned %v", id)
	}
	k.wantGone(enq[0].ID)
	if id := k.one(command.Cancel{Topic: "a", Key: "k"}).(model.ID); id != enq[1].ID {
		t.Fatalf("cancel by key returned %v", id)
	}
	k.wantGone(enq[1].ID)
	k.one(command.Cancel{ID: enq[2].ID})
	k.wantGone(enq[2].ID)
	if w := k.wheel(); w.OverflowMessages != 0 {
		t.Fatalf("overflow %d after cancel", w.OverflowMessages)
	}
	for _, c := range []command.Cancel{{ID: enq[0].ID}, {Topic: "a", Key: "k"}, {Topic: "nope", Key: "k"}, {ID: model.ID{Index: 999}}} {
		if r := k.apply(c)[0]; !errors.Is(r.Err, model.ErrNotFound) {
			t.Fatalf("cancel %+v again: %v", c, r.Err)
		}
	}
	// The key is free again.
	if e := k.schedule(t0, command.NewMessage{Topic: "a", Key: "k", DeliverAtMs: t0 + 1}); e[0].Duplicate {
		t.Fatal("cancelled message still holds its key")
	}
	// Reserved: conflict, by id and by key.
	k.one(command.Lease{NowMs: t0 + 100, Items: []command.LeaseItem{{ID: enq[3].ID, Nonce: 9, ExpiresMs: t0 + 30_100, RedeliverMs: t0 + 30_100}}})
	for _, c := range []command.Cancel{{ID: enq[3].ID}, {Topic: "a", Key: "r"}} {
		if r := k.apply(c)[0]; !errors.Is(r.Err, model.ErrConflict) {
			t.Fatalf("cancel reserved %+v: %v, want conflict", c, r.Err)
		}
	}
	k.wantState(enq[3].ID, StateReserved, t0+30_100, 1)
	k.wantCounts(TopicCounts{Topic: "a", Delayed: 1, Reserved: 1})
}

func TestRescheduleAcrossHorizon(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0, command.NewMessage{Topic: "a", Body: []byte("b"), DeliverAtMs: t0 + 5000})
	id := enq[0].ID
	far := t0 + 5*3600_000
	if v := k.one(command.Reschedule{ID: id, DeliverAtMs: far}).(int64); v != far {
		t.Fatalf("reschedule returned %d", v)
	}
	k.wantState(id, StateDelayed, far, 0)
	if w := k.wheel(); w.OverflowMessages != 1 || len(w.NonEmpty) != 1 || w.NonEmpty[0].Messages != 0 {
		t.Fatalf("after moving out: %+v", w)
	}
	k.one(command.Reschedule{ID: id, DeliverAtMs: t0 + 7000})
	k.wantState(id, StateDelayed, t0+7000, 0)
	if w := k.wheel(); w.OverflowMessages != 0 {
		t.Fatalf("after moving back: %+v", w)
	}
	// Into the past: ready.
	k.one(command.Reschedule{ID: id, DeliverAtMs: t0 - 1})
	k.wantState(id, StateReady, t0-1, 0)
	// From ready back to delayed.
	k.one(command.Reschedule{ID: id, DeliverAtMs: t0 + 2000})
	k.wantState(id, StateDelayed, t0+2000, 0)
	if len(k.readyIDs("a")) != 0 {
		t.Fatal("ready queue keeps a rescheduled message")
	}
	if string(k.get(id).Body) != "b" {
		t.Fatal("body lost")
	}
	k.wantCounts(TopicCounts{Topic: "a", Delayed: 1})
	if r := k.apply(command.Reschedule{ID: model.ID{Index: 77}, DeliverAtMs: t0})[0]; !errors.Is(r.Err, model.ErrNotFound) {
		t.Fatalf("missing: %v", r.Err)
	}
	k.apply(command.Expire{Before: t0s + 2})
	k.one(command.Lease{NowMs: t0 + 2000, Items: []command.LeaseItem{{ID: id, Nonce: 1, ExpiresMs: t0 + 9000, RedeliverMs: t0 + 9000}}})
	if r := k.apply(command.Reschedule{ID: id, DeliverAtMs: t0})[0]; !errors.Is(r.Err, model.ErrConflict) {
		t.Fatalf("reserved: %v", r.Err)
	}
}

func TestLease(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1500, TTRMs: 2000}, command.NewMessage{Topic: "a", DeliverAtMs: t0 - 1})
	a, b := enq[0].ID, enq[1].ID
	k.apply(command.Expire{Before: t0s + 1})
	now := t0 + 1500
	took := k.one(command.Lease{NowMs: now, Items: []command.LeaseItem{
		{ID: a, Nonce: 11, ExpiresMs: now + 2000, RedeliverMs: now + 2500},
		{ID: a, Nonce: 12, ExpiresMs: now + 2000, RedeliverMs: now + 2500}, // handed out twice
		{ID: b, Nonce: 13, ExpiresMs: now + 2000, RedeliverMs: now + 1000}, // redelivery before expiry: expiry wins
		{ID: model.ID{Index: 99}, Nonce: 14, ExpiresMs: now + 2000},
	}}).([]bool)
	if !reflect.DeepEqual(took, []bool{true, false, true, false}) {
		t.Fatalf("lease took %v", took)
	}
	v := k.get(a)
	if v.State != StateReserved || v.Attempts != 1 || v.Receipt != 11 || v.LeaseExpiresMs != now+2000 || v.LeaseMs != 2000 || v.DeliverAtMs != now+2500 {
		t.Fatalf("leased %+v %s", v.Message, v.State)
	}
	k.wantState(b, StateReserved, now+2000, 1)
	if len(k.readyIDs("a")) != 0 {
		t.Fatal("leased message still ready")
	}
	k.wantCounts(TopicCounts{Topic: "a", Reserved: 2})
	// The redelivery is a lease record in the slot of its second.
	info, err := k.s.Slot(SlotOf(SecondOf(now+2500)), true)
	if err != nil {
		t.Fatal(err)
	}
	var leases int
	for _, r := range info.Records {
		if r.Live && r.Type == "lease" && r.ID == a {
			leases++
		}
	}
	if leases != 1 || info.Second != SecondOf(now+2500) {
		t.Fatalf("slot %+v", info)
	}
	// Unexpired: not leasable. At the expiry instant still held; after it, leasable.
	for _, at := range []int64{now + 1, now + 2000} {
		if took := k.one(command.Lease{NowMs: at, Items: []command.LeaseItem{{ID: a, Nonce: 20, ExpiresMs: at + 100, RedeliverMs: at + 100}}}).([]bool); took[0] {
			t.Fatalf("re-leased at %d while the lease runs to %d", at, now+2000)
		}
	}
	at := now + 2001
	if took := k.one(command.Lease{NowMs: at, Items: []command.LeaseItem{{ID: a, Nonce: 21, ExpiresMs: at + 100, RedeliverMs: at + 100}}}).([]bool); !took[0] {
		t.Fatal("expired lease not leasable")
	}
	k.wantState(a, StateReserved, at+100, 2)
}

func TestAck(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0, command.NewMessage{Topic: "a", Key: "k", DeliverAtMs: t0 - 1}, command.NewMessage{Topic: "a", DeliverAtMs: t0 - 1})
	a, b := enq[0].ID, enq[1].ID
	now := t0 + 100
	k.one(command.Lease{NowMs: now, Items: []command.LeaseItem{{ID: a, Nonce: 1, ExpiresMs: now + 1000, RedeliverMs: now + 1000}, {ID: b, Nonce: 2, ExpiresMs: now + 1000, RedeliverMs: now + 1000}}})
	c := k.one(command.Ack{NowMs: now + 10, Receipts: []model.Receipt{{ID: a, Nonce: 99}, {ID: model.ID{Index: 1234}, Nonce: 1}}}).(command.Counted)
	if c != (command.Counted{Stale: 2}) {
		t.Fatalf("wrong nonce / unknown id: %+v", c)
	}
	c = k.one(command.Ack{NowMs: now + 1000, Receipts: []model.Receipt{{ID: a, Nonce: 1}, {ID: a, Nonce: 1}}}).(command.Counted)
	if c != (command.Counted{Done: 1, Stale: 1}) {
		t.Fatalf("ack at the expiry instant, twice: %+v", c)
	}
	k.wantGone(a)
	c = k.one(command.Ack{NowMs: now + 1001, Receipts: []model.Receipt{{ID: b, Nonce: 2}}}).(command.Counted)
	if c != (command.Counted{Stale: 1}) {
		t.Fatalf("ack after expiry: %+v", c)
	}
	k.wantState(b, StateReserved, now+1000, 1)
	k.wantCounts(TopicCounts{Topic: "a", Reserved: 1})
	if e := k.schedule(now, command.NewMessage{Topic: "a", Key: "k"}); e[0].Duplicate {
		t.Fatal("acked message keeps its key")
	}
	// The acked message's lease record is gone from its slot.
	info, err := k.s.Slot(SlotOf(SecondOf(now+1000)), false)
	if err != nil || info.Messages != 1 {
		t.Fatalf("slot after ack: %+v %v", info, err)
	}
}

func TestNack(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0, command.NewMessage{Topic: "a", Key: "k", DeliverAtMs: t0 - 1, MaxAttempts: 2})
	id := enq[0].ID
	now := t0 + 100
	lease := func(nonce uint64) {
		t.Helper()
		if took := k.one(command.Lease{NowMs: now, Items: []command.LeaseItem{{ID: id, Nonce: nonce, ExpiresMs: now + 1000, RedeliverMs: now + 1000}}}).([]bool); !took[0] {
			t.Fatal("lease not taken")
		}
	}
	lease(1)
	if c := k.one(command.Nack{NowMs: now, DelayMs: 3000, Receipts: []model.Receipt{{ID: id, Nonce: 7}}}).(command.Counted); c != (command.Counted{Stale: 1}) {
		t.Fatalf("stale nack %+v", c)
	}
	if c := k.one(command.Nack{NowMs: now, DelayMs: 3000, Receipts: []model.Receipt{{ID: id, Nonce: 1}}}).(command.Counted); c != (command.Counted{Done: 1}) {
		t.Fatalf("nack %+v", c)
	}
	v := k.get(id)
	if v.State != StateDelayed || v.DeliverAtMs != now+3000 || v.Attempts != 1 || v.Receipt != 0 || v.LeaseExpiresMs != 0 {
		t.Fatalf("nacked %+v %s", v.Message, v.State)
	}
	k.wantCounts(TopicCounts{Topic: "a", Delayed: 1})
	// Negative delay means now.
	now = t0 + 3100
	k.apply(command.Expire{Before: t0s + 3})
	lease(2)
	k.one(command.Nack{NowMs: now, DelayMs: -50, Receipts: []model.Receipt{{ID: id, Nonce: 2}}})
	// attempts (2) >= max_attempts (2): dead, and the key is free.
	k.wantState(id, StateDead, now+1000, 2)
	if got := k.deadIDs("a"); !reflect.DeepEqual(got, []model.ID{id}) {
		t.Fatalf("dead %v", got)
	}
	k.wantCounts(TopicCounts{Topic: "a", Dead: 1})
	if e := k.schedule(now, command.NewMessage{Topic: "a", Key: "k", DeliverAtMs: now + 1}); e[0].Duplicate {
		t.Fatal("dead message keeps its key")
	}
	if w := k.wheel(); w.NonEmpty[len(w.NonEmpty)-1].Second == SecondOf(now+1000) && w.NonEmpty[len(w.NonEmpty)-1].Messages != 0 {
		t.Fatalf("dead message's lease record still live: %+v", w)
	}
}

func TestNackFirstAttemptGoesBackToDelayed(t *testing.T) {
	k := newStoreKit(t, Options{})
	id := k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0, MaxAttempts: 3})[0].ID
	k.one(command.Lease{NowMs: t0, Items: []command.LeaseItem{{ID: id, Nonce: 1, ExpiresMs: t0 + 500, RedeliverMs: t0 + 500}}})
	k.one(command.Nack{NowMs: t0 + 10, DelayMs: 3 * 3600_000, Receipts: []model.Receipt{{ID: id, Nonce: 1}}})
	k.wantState(id, StateDelayed, t0+10+3*3600_000, 1)
	if w := k.wheel(); w.OverflowMessages != 1 {
		t.Fatalf("nack beyond the horizon: %+v", w)
	}
}

func TestDeadLetter(t *testing.T) {
	k := newStoreKit(t, Options{})
	id := k.schedule(t0, command.NewMessage{Topic: "a", Key: "k", DeliverAtMs: t0, MaxAttempts: 5})[0].ID
	k.one(command.Lease{NowMs: t0, Items: []command.LeaseItem{{ID: id, Nonce: 1, ExpiresMs: t0 + 1000, RedeliverMs: t0 + 1000}}})
	if c := k.one(command.DeadLetter{NowMs: t0 + 10, Receipts: []model.Receipt{{ID: id, Nonce: 2}}}).(command.Counted); c != (command.Counted{Stale: 1}) {
		t.Fatalf("stale dead letter %+v", c)
	}
	if c := k.one(command.DeadLetter{NowMs: t0 + 10, Receipts: []model.Receipt{{ID: id, Nonce: 1}}}).(command.Counted); c != (command.Counted{Done: 1}) {
		t.Fatalf("dead letter %+v", c)
	}
	// Dead with attempts left, its key free and its lease record gone.
	if v := k.get(id); v.State != StateDead || v.Attempts != 1 || v.Receipt != 0 {
		t.Fatalf("dead-lettered %+v %s", v.Message, v.State)
	}
	k.wantCounts(TopicCounts{Topic: "a", Dead: 1})
	if e := k.schedule(t0+20, command.NewMessage{Topic: "a", Key: "k", DeliverAtMs: t0 + 30}); e[0].Duplicate {
		t.Fatal("dead message keeps its key")
	}
	if c := k.one(command.DeadLetter{NowMs: t0 + 40, Receipts: []model.Receipt{{ID: id, Nonce: 1}}}).(command.Counted); c != (command.Counted{Stale: 1}) {
		t.Fatalf("dead letter of a dead message %+v", c)
	}
}

func TestTouch(t *testing.T) {
	k := newStoreKit(t, Options{})
	id := k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0})[0].ID
	k.one(command.Lease{NowMs: t0, Items: []command.LeaseItem{{ID: id, Nonce: 5, ExpiresMs: t0 + 1000, RedeliverMs: t0 + 1200}}})
	now := t0 + 900
	if c := k.one(command.Touch{NowMs: now, Receipts: []model.Receipt{{ID: id, Nonce: 5}, {ID: id, Nonce: 6}}}).(command.Counted); c != (command.Counted{Done: 1, Stale: 1}) {
		t.Fatalf("touch %+v", c)
	}
	v := k.get(id)
	// The lease is extended by its length from now; the redelivery keeps its
	// distance from the expiry.
	if v.State != StateReserved || v.LeaseExpiresMs != now+1000 || v.DeliverAtMs != now+1200 || v.Attempts != 1 || v.Receipt != 5 || v.LeaseMs != 1000 {
		t.Fatalf("touched %+v", v.Message)
	}
	// The old redelivery no longer fires: expiring past it leaves the message reserved.
	k.apply(command.Expire{Before: t0s + 2})
	k.wantState(id, StateReserved, now+1200, 1)
	if c := k.one(command.Touch{NowMs: now + 1001, Receipts: []model.Receipt{{ID: id, Nonce: 5}}}).(command.Counted); c != (command.Counted{Stale: 1}) {
		t.Fatalf("touch after expiry %+v", c)
	}
}

func TestExpireForwardsToReadyAndDeletesFiles(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1500, Priority: 1},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1500, Priority: 9},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1200},
		command.NewMessage{Topic: "b", DeliverAtMs: t0 + 2100},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 3000}, // stays
	)
	cancelled := k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1100})[0].ID
	k.one(command.Cancel{ID: cancelled})
	if !k.fileExists(t0s+1) || !k.fileExists(t0s+2) || !k.fileExists(t0s+3) {
		t.Fatal("slot files missing before expiry")
	}
	k.apply(command.Expire{Before: t0s + 3})
	if k.s.Cursor() != t0s+3 {
		t.Fatalf("cursor %d", k.s.Cursor())
	}
	if got, want := k.readyIDs("a"), []model.ID{enq[2].ID, enq[1].ID, enq[0].ID}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ready a %v, want %v (due, then higher priority)", got, want)
	}
	if got := k.readyIDs("b"); !reflect.DeepEqual(got, []model.ID{enq[3].ID}) {
		t.Fatalf("ready b %v", got)
	}
	k.wantGone(cancelled)
	k.wantState(enq[4].ID, StateDelayed, t0+3000, 0)
	k.wantCounts(TopicCounts{Topic: "a", Ready: 3, Delayed: 1})
	if w := k.wheel(); len(w.NonEmpty) != 1 || w.NonEmpty[0].Second != t0s+3 || w.CursorMs != (t0s+3)*TickMs {
		t.Fatalf("wheel %+v", w)
	}
	// The expired files go once the expiry is durable.
	if _, err := k.s.Sync(); err != nil {
		t.Fatal(err)
	}
	if k.fileExists(t0s+1) || k.fileExists(t0s+2) || !k.fileExists(t0s+3) {
		t.Fatal("expired slot files not deleted after Sync, or a live one deleted")
	}
	// Expire never moves backwards and is idempotent.
	k.apply(command.Expire{Before: t0s + 1})
	if k.s.Cursor() != t0s+3 {
		t.Fatalf("cursor moved back to %d", k.s.Cursor())
	}
	k.s.CrashForTest(k.fs)
	k.open()
	if k.fileExists(t0s+1) || k.s.Cursor() != t0s+3 || k.s.AppliedIndex() < k.idx-1 {
		t.Fatal("expired file back after the crash, or the synced expiry lost")
	}
}

// TestExpireNotYetDurable: a crash after an Expire that was applied but not
// made durable brings the slot back as it was, with its file; replaying the
// Expire fires it again.
func TestExpireNotYetDurable(t *testing.T) {
	k := newStoreKit(t, Options{})
	id := k.schedule(t0, command.NewMessage{Topic: "a", Body: []byte("x"), DeliverAtMs: t0 + 1500})[0].ID
	if _, err := k.s.Sync(); err != nil {
		t.Fatal(err)
	}
	synced := k.idx
	k.apply(command.Expire{Before: t0s + 2})
	k.wantState(id, StateReady, t0+1500, 0)
	// Until the expiry is durable the file stays: a file system may make
	// an unlink durable before the index.
	if !k.fileExists(t0s + 1) {
		t.Fatal("slot file deleted before its expiry was durable")
	}
	k.s.CrashForTest(k.fs)
	k.open()
	a := k.s.AppliedIndex()
	if a < synced {
		t.Fatalf("applied %d, the last Sync covered %d", a, synced)
	}
	if a < k.idx {
		// The expiry was lost: the message is back in its slot, file and all.
		if !k.fileExists(t0s+1) || k.s.Cursor() != t0s {
			t.Fatal("slot file deleted before its expiry was durable")
		}
		k.wantState(id, StateDelayed, t0+1500, 0)
		if _, err := k.s.Apply(k.log[a:]); err != nil {
			t.Fatal(err)
		}
	}
	k.wantState(id, StateReady, t0+1500, 0)
	if string(k.get(id).Body) != "x" || k.s.Cursor() != t0s+2 {
		t.Fatal("after replay")
	}
}

// TestExpiredFilesDoNotLinger: without any Sync, expired slot files are
// still deleted after a bounded number of Expires.
func TestExpiredFilesDoNotLinger(t *testing.T) {
	k := newStoreKit(t, Options{})
	for i := int64(1); i <= 5; i++ {
		k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + i*TickMs})
	}
	for sec := t0s + 1; sec <= t0s+40; sec++ {
		k.apply(command.Expire{Before: sec})
	}
	for i := int64(1); i <= 5; i++ {
		if k.fileExists(t0s + i) {
			t.Fatalf("slot file of second %d still there 35 Expires after it expired", t0s+i)
		}
	}
}

func TestLeaseExpiryRedeliveryAndDeadLetters(t *testing.T) {
	k := newStoreKit(t, Options{})
	id := k.schedule(t0, command.NewMessage{Topic: "a", Key: "k", Body: []byte("x"), DeliverAtMs: t0 + 100, MaxAttempts: 2})[0].ID
	now := t0 + 100
	k.one(command.Lease{NowMs: now, Items: []command.LeaseItem{{ID: id, Nonce: 1, ExpiresMs: now + 500, RedeliverMs: now + 1500}}}) // redelivery in t0s+1
	k.apply(command.Expire{Before: t0s + 1})
	k.wantState(id, StateReserved, now+1500, 1)
	// The lease record fires: attempt 1 < 2, back to ready, lease cleared.
	k.apply(command.Expire{Before: t0s + 2})
	v := k.get(id)
	if v.State != StateReady || v.Attempts != 1 || v.Receipt != 0 || v.DeliverAtMs != now+1500 {
		t.Fatalf("after the first redelivery %+v %s", v.Message, v.State)
	}
	// The stale receipt cannot ack it.
	if c := k.one(command.Ack{NowMs: now + 400, Receipts: []model.Receipt{{ID: id, Nonce: 1}}}).(command.Counted); c.Stale != 1 {
		t.Fatalf("old receipt acked a ready message: %+v", c)
	}
	now = t0 + 2000
	k.one(command.Lease{NowMs: now, Items: []command.LeaseItem{{ID: id, Nonce: 2, ExpiresMs: now + 300, RedeliverMs: now + 300}}})
	k.wantState(id, StateReserved, now+300, 2)
	// Out of attempts: not leasable again, and dead when the slot fires.
	if took := k.one(command.Lease{NowMs: now + 301, Items: []command.LeaseItem{{ID: id, Nonce: 3, ExpiresMs: now + 900}}}).([]bool); took[0] {
		t.Fatal("leased past max_attempts")
	}
	k.apply(command.Expire{Before: t0s + 3})
	k.wantState(id, StateDead, now+300, 2)
	k.wantCounts(TopicCounts{Topic: "a", Dead: 1})
	if got := k.deadIDs("a"); !reflect.DeepEqual(got, []model.ID{id}) {
		t.Fatalf("dead %v", got)
	}
	// Redrive: back to ready, attempts reset, due now, key taken again.
	now = t0 + 3000
	if n := k.one(command.Redrive{NowMs: now, Topic: "a"}).(int); n != 1 {
		t.Fatalf("redrove %d", n)
	}
	v = k.get(id)
	if v.State != StateReady || v.Attempts != 0 || v.DeliverAtMs != now || v.Key != "k" || string(v.Body) != "x" {
		t.Fatalf("redriven %+v %s", v.Message, v.State)
	}
	if e := k.schedule(now, command.NewMessage{Topic: "a", Key: "k"}); !e[0].Duplicate {
		t.Fatal("a redriven message does not hold its key")
	}
}

func TestRedrive(t *testing.T) {
	k := newStoreKit(t, Options{})
	kill := func(key string, nonce uint64) model.ID {
		t.Helper()
		id := k.schedule(t0, command.NewMessage{Topic: "a", Key: key, DeliverAtMs: t0, MaxAttempts: 1})[0].ID
		k.one(command.Lease{NowMs: t0, Items: []command.LeaseItem{{ID: id, Nonce: nonce, ExpiresMs: t0 + 10, RedeliverMs: t0 + 10}}})
		k.one(command.Nack{NowMs: t0, Receipts: []model.Receipt{{ID: id, Nonce: nonce}}})
		k.wantState(id, StateDead, t0+10, 1)
		return id
	}
	d1 := kill("k", 1)
	d2 := kill("k", 2) // the key was free again: same key, another message
	d3 := kill("", 3)
	holder := k.schedule(t0, command.NewMessage{Topic: "a", Key: "k", DeliverAtMs: t0 + 60_000})[0].ID
	if n := k.one(command.Redrive{NowMs: t0 + 5, Topic: "a", IDs: []model.ID{d2, holder, {Index: 999}}}).(int); n != 1 {
		t.Fatalf("redrove %d of one dead id", n)
	}
	if v := k.get(d2); v.State != StateReady || v.Key != "" {
		t.Fatalf("redriven with its key held elsewhere: %+v %s", v.Message, v.State)
	}
	if n := k.one(command.Redrive{NowMs: t0 + 6, Topic: "b"}).(int); n != 0 {
		t.Fatalf("redrove %d from an unknown topic", n)
	}
	k.one(command.Cancel{ID: holder})
	if n := k.one(command.Redrive{NowMs: t0 + 7, Topic: "a"}).(int); n != 2 {
		t.Fatalf("redrove %d, want 2", n)
	}
	if v := k.get(d1); v.Key != "k" {
		t.Fatalf("d1 key %q", v.Key)
	}
	if got, want := k.readyIDs("a"), []model.ID{d2, d1, d3}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ready %v, want %v", got, want)
	}
	k.wantCounts(TopicCounts{Topic: "a", Ready: 3})
}

func TestPromoteAcrossHorizonEdge(t *testing.T) {
	k := newStoreKit(t, Options{})
	edge := (t0s + Slots) * TickMs
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: edge - 1}, // last instant inside
		command.NewMessage{Topic: "a", DeliverAtMs: edge},     // first outside
		command.NewMessage{Topic: "a", DeliverAtMs: edge + 999},
		command.NewMessage{Topic: "a", DeliverAtMs: edge + 1000},
	)
	if w := k.wheel(); w.OverflowMessages != 3 {
		t.Fatalf("overflow %d", w.OverflowMessages)
	}
	k.apply(command.Expire{Before: t0s + 1})
	// Promote{Before} stops at Before and at the horizon.
	if n := k.one(command.Promote{Before: t0s + Slots}).(int); n != 0 {
		t.Fatalf("promoted %d before the edge", n)
	}
	if n := k.one(command.Promote{Before: t0s + Slots + 5}).(int); n != 2 {
		t.Fatalf("promoted %d, want the two due in second %d", n, t0s+Slots)
	}
	w := k.wheel()
	if w.OverflowMessages != 1 || w.NonEmpty[len(w.NonEmpty)-1].Second != t0s+Slots || w.NonEmpty[len(w.NonEmpty)-1].Messages != 2 {
		t.Fatalf("wheel %+v", w)
	}
	k.wantState(enq[1].ID, StateDelayed, edge, 0)
	// An overflow message whose time passed before it was promoted goes
	// straight to ready.
	k.apply(command.Expire{Before: t0s + Slots + 2})
	if n := k.one(command.Promote{Before: t0s + Slots + 2 + Slots}).(int); n != 1 {
		t.Fatalf("late promote moved %d", n)
	}
	k.wantState(enq[3].ID, StateReady, edge+1000, 0)
	if got := k.readyIDs("a"); len(got) != 4 {
		t.Fatalf("ready %v", got)
	}
}

// TestSlotReuseAfterFullLap: seconds s and s+7200 share slot index s mod
// 7200 but never a file: the later one waits in overflow until s expired.
func TestSlotReuseAfterFullLap(t *testing.T) {
	k := newStoreKit(t, Options{})
	s := t0s + 10
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", Body: []byte("lap0"), DeliverAtMs: s*TickMs + 1},
		command.NewMessage{Topic: "a", Body: []byte("lap1"), DeliverAtMs: (s+Slots)*TickMs + 2},
	)
	if SlotOf(s) != SlotOf(s+Slots) {
		t.Fatal("slot math")
	}
	info, err := k.s.Slot(SlotOf(s), true)
	if err != nil || info.Second != s || info.Messages != 1 || len(info.Records) != 1 || info.Records[0].ID != enq[0].ID {
		t.Fatalf("slot before the lap: %+v %v", info, err)
	}
	k.apply(command.Expire{Before: s + 1})
	if n := k.one(command.Promote{Before: s + 1 + Slots}).(int); n != 1 {
		t.Fatalf("promoted %d", n)
	}
	if !k.fileExists(s + Slots) {
		t.Fatal("no file for the second lap")
	}
	if _, err := k.s.Sync(); err != nil {
		t.Fatal(err)
	}
	if k.fileExists(s) || !k.fileExists(s+Slots) {
		t.Fatal("files of the two laps after Sync")
	}
	info, err = k.s.Slot(SlotOf(s), true)
	if err != nil || info.Second != s+Slots || len(info.Records) != 1 || info.Records[0].ID != enq[1].ID || info.Records[0].DueMs != (s+Slots)*TickMs+2 {
		t.Fatalf("slot after the lap: %+v %v", info, err)
	}
	k.wantState(enq[0].ID, StateReady, s*TickMs+1, 0)
	k.wantState(enq[1].ID, StateDelayed, (s+Slots)*TickMs+2, 0)
	k.apply(command.Expire{Before: s + Slots + 1})
	if got := k.readyIDs("a"); !reflect.DeepEqual(got, ids(enq)) {
		t.Fatalf("ready %v", got)
	}
}

func TestWheelAndSlotInspection(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", Body: []byte("12345"), DeliverAtMs: t0 + 5500},
		command.NewMessage{Topic: "b", DeliverAtMs: t0 + 5900},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 9000},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 9*3600_000},
	)
	k.one(command.Cancel{ID: enq[1].ID})
	w := k.wheel()
	if w.CursorMs != t0 || w.HorizonMs != t0+Slots*TickMs || w.OverflowMessages != 1 || len(w.NonEmpty) != 2 {
		t.Fatalf("wheel %+v", w)
	}
	s5 := w.NonEmpty[0]
	if s5.Second != t0s+5 || s5.Slot != SlotOf(t0s+5) || s5.Messages != 1 || s5.Bytes <= segment.HeaderSize {
		t.Fatalf("slot summary %+v", s5)
	}
	info, err := k.s.Slot(SlotOf(t0s+5), true)
	if err != nil {
		t.Fatal(err)
	}
	if info.SlotSummary != s5 || info.File != k.segPath(t0s+5) || len(info.Records) != 3 {
		t.Fatalf("slot %+v", info)
	}
	want := []struct {
		typ  string
		id   model.ID
		live bool
	}{{"message", enq[0].ID, true}, {"message", enq[1].ID, false}, {"tombstone", enq[1].ID, false}}
	off := int64(segment.HeaderSize)
	for i, r := range info.Records {
		if r.Type != want[i].typ || r.ID != want[i].id || r.Live != want[i].live || r.Offset != off || r.Index == 0 {
			t.Fatalf("record %d: %+v, want %+v at offset %d", i, r, want[i], off)
		}
		off += int64(r.Bytes)
	}
	if off != s5.Bytes {
		t.Fatalf("records end at %d, slot has %d bytes", off, s5.Bytes)
	}
	if info.Records[0].Topic != "a" || info.Records[0].DueMs != t0+5500 {
		t.Fatalf("record 0 %+v", info.Records[0])
	}
	empty, err := k.s.Slot(SlotOf(t0s+100), true)
	if err != nil || empty.File != "" || empty.Messages != 0 || empty.Second != t0s+100 {
		t.Fatalf("empty slot %+v %v", empty, err)
	}
	for _, bad := range []int{-1, Slots} {
		if _, err := k.s.Slot(bad, false); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("Slot(%d): %v", bad, err)
		}
	}
}

func TestOpenSegmentsBound(t *testing.T) {
	k := newStoreKit(t, Options{MaxOpenSegments: 4})
	var all []model.ID
	for i := 0; i < 100; i++ {
		e := k.schedule(t0, command.NewMessage{Topic: "a", Body: []byte(fmt.Sprint(i)), DeliverAtMs: t0 + int64(i+1)*TickMs + int64(i)})
		all = append(all, e[0].ID)
		if n := k.s.OpenSegments(); n > 4 {
			t.Fatalf("%d open segment handles after %d slots", n, i+1)
		}
	}
	// Every slot again, in one batch: still bounded.
	var msgs []command.NewMessage
	for i := 0; i < 100; i++ {
		msgs = append(msgs, command.NewMessage{Topic: "a", DeliverAtMs: t0 + int64(i+1)*TickMs + 500})
	}
	k.schedule(t0, msgs...)
	if n := k.s.OpenSegments(); n > 4 {
		t.Fatalf("%d open handles after a batch over 100 slots", n)
	}
	if w := k.wheel(); len(w.NonEmpty) != 100 || w.OpenSegments > 4 {
		t.Fatalf("wheel: %d slots, %d open", len(w.NonEmpty), w.OpenSegments)
	}
	// Sync covers files whose handles were evicted: nothing is lost in a crash.
	if _, err := k.s.Sync(); err != nil {
		t.Fatal(err)
	}
	k.s.CrashForTest(k.fs)
	k.open()
	if a := k.s.AppliedIndex(); a != k.idx {
		t.Fatalf("applied %d after Sync and crash, want %d", a, k.idx)
	}
	for i, id := range all {
		if v := k.get(id); string(v.Body) != fmt.Sprint(i) {
			t.Fatalf("message %d body %q", i, v.Body)
		}
	}
}

func TestTornTailCutOnOpen(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0, command.NewMessage{Topic: "a", Body: []byte("keep"), DeliverAtMs: t0 + 2000})
	k.reopen()
	path := k.segPath(t0s + 2)
	good, err := readFS(k.fs, path)
	if err != nil {
		t.Fatal(err)
	}
	lost := segment.AppendRecord(nil, segment.Record{Type: segment.TypeMessage, Index: k.idx + 1,
		Payload: EncodeMessage(nil, &model.Message{ID: model.ID{Index: k.idx + 1}, Topic: "a", Body: []byte("lost")})})
	for name, tail := range map[string][]byte{
		"whole record of a lost entry": lost,
		"half a record":                lost[:len(lost)/2],
		"junk":                         []byte("\xde\xad\xbe\xef garbage"),
		"zeros":                        make([]byte, 100),
	} {
		t.Run(name, func(t *testing.T) {
			k.s.Close()
			if err := writeFS(k.fs, path, append(append([]byte(nil), good...), tail...)); err != nil {
				t.Fatal(err)
			}
			k.open()
			got, err := readFS(k.fs, path)
			if err != nil || !bytes.Equal(got, good) {
				t.Fatalf("after open the file has %d bytes (%v), want the %d recorded", len(got), err, len(good))
			}
			if v := k.get(enq[0].ID); string(v.Body) != "keep" {
				t.Fatalf("message %+v", v)
			}
			// Appends go after the recorded length.
			e := k.schedule(t0, command.NewMessage{Topic: "a", Body: []byte("next"), DeliverAtMs: t0 + 2500})
			if v := k.get(e[0].ID); string(v.Body) != "next" {
				t.Fatalf("appended after repair: %+v", v)
			}
			k.one(command.Cancel{ID: e[0].ID})
			k.reopen()
			good, _ = readFS(k.fs, path)
		})
	}
	// Files the index does not know (a crash before the index committed) are removed.
	orphan := k.segPath(t0s + 50)
	if err := writeFS(k.fs, orphan, segment.AppendHeader(nil, t0s+50)); err != nil {
		t.Fatal(err)
	}
	k.reopen()
	if _, err := k.fs.Stat(orphan); err == nil {
		t.Fatal("orphan segment kept")
	}
}

func TestShortSegmentIsInconsistent(t *testing.T) {
	k := newStoreKit(t, Options{})
	id := k.schedule(t0, command.NewMessage{Topic: "a", Body: []byte("x"), DeliverAtMs: t0 + 2000})[0].ID
	if err := k.s.Close(); err != nil {
		t.Fatal(err)
	}
	k.s = nil
	path := k.segPath(t0s + 2)
	good, err := readFS(k.fs, path)
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{1, len(good) - segment.HeaderSize, len(good)} {
		if err := writeFS(k.fs, path, good[:len(good)-cut]); err != nil {
			t.Fatal(err)
		}
		s, err := Open(k.dir, k.opts)
		if err == nil {
			s.Close()
			t.Fatalf("Open with %d bytes cut from a segment succeeded", cut)
		}
		if !errors.Is(err, ErrInconsistent) {
			t.Fatalf("cut %d: %v, want ErrInconsistent", cut, err)
		}
	}
	if err := k.fs.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(k.dir, k.opts); !errors.Is(err, ErrInconsistent) {
		t.Fatalf("missing segment: %v, want ErrInconsistent", err)
	}
	// Restored, the store opens again (the failed opens released the index).
	if err := writeFS(k.fs, path, good); err != nil {
		t.Fatal(err)
	}
	k.open()
	if v := k.get(id); string(v.Body) != "x" {
		t.Fatalf("message %+v", v)
	}
}

// TestReplayIdempotent crashes a store that applied entries unsynced,
// replays the whole log into it and compares it with a store that never
// crashed.
func TestReplayIdempotent(t *testing.T) {
	ref := newStoreKit(t, Options{})
	k := newStoreKit(t, Options{})
	both := func(cmds ...command.Command) {
		t.Helper()
		a, b := ref.apply(cmds...), k.apply(cmds...)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("results differ: %v %v", a, b)
		}
	}
	var all []model.ID
	var synced uint64
	for i := 0; i < 20; i++ {
		var msgs []command.NewMessage
		for j := 0; j < 5; j++ {
			msgs = append(msgs, command.NewMessage{Topic: "a", Body: []byte{byte(i), byte(j)}, DeliverAtMs: t0 + int64(i*j)*700 + int64(j)*3600_000})
		}
		both(command.Schedule{NowMs: t0, Messages: msgs})
		for j := range msgs {
			all = append(all, model.ID{Index: k.idx, Seq: uint32(j)})
		}
		if i == 5 {
			both(command.Expire{Before: t0s + 2})
			if _, err := k.s.Sync(); err != nil { // a synced point
				t.Fatal(err)
			}
			synced = k.idx
		}
		if i%4 == 0 {
			both(command.Cancel{ID: all[len(all)-2]}, command.Reschedule{ID: all[len(all)-3], DeliverAtMs: t0 + 9000})
		}
	}
	k.s.CrashForTest(k.fs)
	k.open()
	a := k.s.AppliedIndex()
	if a < synced || a >= k.idx {
		t.Fatalf("applied %d after the crash; the last synced entry is %d, the log ends at %d", a, synced, k.idx)
	}
	// Replay everything, twice, in uneven batches.
	for round := 0; round < 2; round++ {
		for i := 0; i < len(k.log); i += 3 {
			batch := k.log[i:min(i+3, len(k.log))]
			res, err := k.s.Apply(batch)
			if err != nil {
				t.Fatal(err)
			}
			for j, e := range batch {
				if (e.Index <= a || round == 1) && res[j] != nil {
					t.Fatalf("round %d: entry %d was applied before but returned %v", round, e.Index, res[j])
				}
			}
		}
		a = k.idx
	}
	if k.s.AppliedIndex() != ref.s.AppliedIndex() || k.s.Cursor() != ref.s.Cursor() {
		t.Fatal("applied index or cursor differ")
	}
	for _, id := range all {
		va, ea := ref.s.Get(id)
		vb, eb := k.s.Get(id)
		if (ea == nil) != (eb == nil) || !reflect.DeepEqual(va, vb) {
			t.Fatalf("message %s: never crashed %+v %v; replayed %+v %v", id, va, ea, vb, eb)
		}
	}
	if !reflect.DeepEqual(ref.s.Topics(), k.s.Topics()) || !reflect.DeepEqual(ref.wheel().NonEmpty, k.wheel().NonEmpty) {
		t.Fatalf("topics or wheel differ:\n%+v\n%+v", ref.wheel(), k.wheel())
	}
}

func TestSyncEveryBatchSurvivesCrash(t *testing.T) {
	k := newStoreKit(t, Options{SyncEveryBatch: true})
	id := k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 4000})[0].ID
	k.s.CrashForTest(k.fs)
	k.open()
	if a := k.s.AppliedIndex(); a != k.idx {
		t.Fatalf("applied %d, want %d", a, k.idx)
	}
	k.wantState(id, StateDelayed, t0+4000, 0)
}

// TestCrashAfterMemtableRotation is a regression test: a memtable rotation
// used to sync Pebble's WAL by itself (and the first memtable after an Open
// is only 256 KiB), making the index durable ahead of the slot files, so
// that a power loss after about 2,500 unsynced messages left a state Open
// refused with ErrInconsistent. Whatever makes the index durable (now: only
// flushes, each of which must sync the slot files first), a crash at any
// instant must leave a state Open accepts.
func TestCrashAfterMemtableRotation(t *testing.T) {
	// A small memtable: Pebble flushes several of them meanwhile.
	k := newStoreKit(t, Options{MemTableBytes: 1 << 20})
	body := make([]byte, 100)
	for b := 0; b < 50; b++ {
		msgs := make([]command.NewMessage, 1000)
		for i := range msgs {
			msgs[i] = command.NewMessage{Topic: "t", Body: body, DeliverAtMs: t0 + 5000 + int64(b*1000+i)}
		}
		k.schedule(t0, msgs...)
	}
	k.s.CrashForTest(k.fs)
	s, err := Open(k.dir, k.opts)
	if err != nil {
		k.s = nil
		t.Fatalf("a power loss after 50,000 unsynced messages: Open fails: %v\n"+
			"expected: Open succeeds and AppliedIndex() is at most the last state the slot files cover", err)
	}
	k.s = s
	if a := s.AppliedIndex(); a <= 1 {
		t.Logf("applied %d of %d: no flush made anything durable, so this did not test flushes", a, k.idx)
	}
}

func TestNodesReplicated(t *testing.T) {
	k := newStoreKit(t, Options{})
	k.apply(command.SetNode{Node: model.Member{ID: "n2", RaftAddr: "b:1", HTTPAddr: "b:2"}}, command.SetNode{Node: model.Member{ID: "n1", RaftAddr: "a:1"}})
	k.apply(command.SetNode{Node: model.Member{ID: "n2", RaftAddr: "b:9", HTTPAddr: "b:2"}})
	k.reopen()
	want := []model.Member{{ID: "n1", RaftAddr: "a:1"}, {ID: "n2", RaftAddr: "b:9", HTTPAddr: "b:2"}}
	if got := k.s.Nodes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("nodes %+v", got)
	}
	k.apply(command.RemoveNode{ID: "n1"})
	if got := k.s.Nodes(); len(got) != 1 || got[0].ID != "n2" {
		t.Fatalf("after remove %+v", got)
	}
}

func TestReadyLimitAndSkip(t *testing.T) {
	k := newStoreKit(t, Options{})
	var msgs []command.NewMessage
	for i := 0; i < 6; i++ {
		msgs = append(msgs, command.NewMessage{Topic: "a", DeliverAtMs: t0 - 1000 + int64(i%3), Priority: int64(i)})
	}
	enq := k.schedule(t0, msgs...)
	// Due order, then higher priority: (0:p0,p3) (1:p1,p4) (2:p2,p5).
	order := []model.ID{enq[3].ID, enq[0].ID, enq[4].ID, enq[1].ID, enq[5].ID, enq[2].ID}
	if got := k.readyIDs("a"); !reflect.DeepEqual(got, order) {
		t.Fatalf("ready %v, want %v", got, order)
	}
	vs, err := k.s.Ready("a", 2, func(id model.ID) bool { return id == order[0] || id == order[2] })
	if err != nil || len(vs) != 2 || vs[0].ID != order[1] || vs[1].ID != order[3] {
		t.Fatalf("limit 2 skipping two: %v %v", vs, err)
	}
	if vs, err := k.s.Ready("nosuch", 10, nil); err != nil || len(vs) != 0 {
		t.Fatalf("unknown topic: %v %v", vs, err)
	}
	if vs, err := k.s.Ready("a", 0, nil); err != nil || len(vs) != 0 {
		t.Fatalf("limit 0: %v %v", vs, err)
	}
}

func TestReadOnlyOpen(t *testing.T) {
	k := newStoreKit(t, Options{})
	id := k.schedule(t0, command.NewMessage{Topic: "a", Body: []byte("x"), DeliverAtMs: t0 + 3000})[0].ID
	if err := k.s.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(k.dir, Options{FS: k.fs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := ro.Get(id); err != nil || string(v.Body) != "x" || ro.AppliedIndex() != k.idx {
		t.Fatalf("read-only get %+v %v, applied %d", v, err, ro.AppliedIndex())
	}
	if _, err := ro.Apply([]Entry{{Index: k.idx + 1, Cmds: []command.Command{command.Expire{Before: t0s + 5}}}}); err == nil {
		t.Fatal("a read-only store applied an entry")
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	k.open()
	if k.s.AppliedIndex() != k.idx || k.s.Cursor() != t0s {
		t.Fatal("the read-only open changed the store")
	}
}

func TestClosedStore(t *testing.T) {
	k := newStoreKit(t, Options{})
	if err := k.s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := k.s.Apply([]Entry{{Index: k.idx + 1, Cmds: []command.Command{command.Expire{Before: t0s + 5}}}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("apply after close: %v", err)
	}
	if _, err := k.s.Get(model.ID{Index: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("get after close: %v", err)
	}
	k.s = nil
}

// TestPromoteResumesWhereItEnded: each promote scans the overflow from where
// the last one ended. Messages sent to the overflow later are still
// promoted, a promote that ends earlier than the last moves nothing, and a
// reopened store, which scans from the start once, finds what is left.
func TestPromoteResumesWhereItEnded(t *testing.T) {
	k := newStoreKit(t, Options{})
	edge := (t0s + Slots) * TickMs
	first := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: edge + 100},
		command.NewMessage{Topic: "a", DeliverAtMs: edge + 5_000},
		command.NewMessage{Topic: "a", DeliverAtMs: edge + 20_000},
	)
	k.apply(command.Expire{Before: t0s + 3})
	if n := k.one(command.Promote{Before: t0s + Slots + 3}).(int); n != 1 {
		t.Fatalf("first promote moved %d, want 1", n)
	}
	k.wantState(first[0].ID, StateDelayed, edge+100, 0)
	// Sent to the overflow after that promote: due past the horizon as it
	// stands now, which is past where the promote ended.
	k.apply(command.Expire{Before: t0s + 6})
	later := k.schedule(t0+6_000,
		command.NewMessage{Topic: "a", DeliverAtMs: (t0s+Slots+6)*TickMs + 1},
	)
	k.apply(command.Expire{Before: t0s + 8})
	// Ending earlier than the last promote moves nothing.
	if n := k.one(command.Promote{Before: t0s + Slots + 2}).(int); n != 0 {
		t.Fatalf("promote ending before the last one moved %d", n)
	}
	if n := k.one(command.Promote{Before: t0s + Slots + 8}).(int); n != 2 {
		t.Fatalf("second promote moved %d, want 2 (one scheduled before the first promote, one after)", n)
	}
	k.wantState(first[1].ID, StateDelayed, edge+5_000, 0)
	k.wantState(later[0].ID, StateDelayed, (t0s+Slots+6)*TickMs+1, 0)
	if w := k.wheel(); w.OverflowMessages != 1 {
		t.Fatalf("overflow %d after two promotes, want 1", w.OverflowMessages)
	}
	k.reopen()
	k.apply(command.Expire{Before: t0s + 25})
	if n := k.one(command.Promote{Before: t0s + Slots + 25}).(int); n != 1 {
		t.Fatalf("promote after reopen moved %d, want 1", n)
	}
	k.wantState(first[2].ID, StateDelayed, edge+20_000, 0)
	if w := k.wheel(); w.OverflowMessages != 0 {
		t.Fatalf("overflow %d, want 0", w.OverflowMessages)
	}
}

// TestBufPool: buffers come back empty, large ones and those past the
// pool's room are dropped.
func TestBufPool(t *testing.T) {
	var p bufPool
	if b := p.take(); b != nil {
		t.Fatalf("empty pool gave %d bytes of capacity", cap(b))
	}
	p.give(nil)
	p.give(make([]byte, 10, bufPoolMaxCap+1))
	if len(p.bufs) != 0 {
		t.Fatalf("kept %d buffers, want none (empty, too large)", len(p.bufs))
	}
	for range bufPoolMax + 3 {
		p.give(make([]byte, 100, 4096))
	}
	if len(p.bufs) != bufPoolMax {
		t.Fatalf("kept %d buffers, want %d", len(p.bufs), bufPoolMax)
	}
	b := p.take()
	if len(b) != 0 || cap(b) != 4096 {
		t.Fatalf("took len %d cap %d, want an empty buffer of 4096", len(b), cap(b))
	}
	if len(p.bufs) != bufPoolMax-1 {
		t.Fatalf("%d buffers left, want %d", len(p.bufs), bufPoolMax-1)
	}
}

// TestPromoteLeaseRedelivery: a lease whose redelivery lies beyond the
// horizon waits in the overflow as a lease record; promoted, the message
// stays reserved under the same receipt, the counts do not move, and it
// comes back when its slot expires.
func TestPromoteLeaseRedelivery(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 - 1}, command.NewMessage{Topic: "b", DeliverAtMs: t0 + 3*3600_000})
	id := enq[0].ID
	exp := t0 + 3*3600_000 // a three-hour lease
	if took := k.one(command.Lease{NowMs: t0, Items: []command.LeaseItem{{ID: id, Nonce: 7, ExpiresMs: exp, RedeliverMs: exp + 1}}}).([]bool); !took[0] {
		t.Fatal("not leased")
	}
	if w := k.wheel(); w.OverflowMessages != 2 {
		t.Fatalf("overflow %d, want the redelivery and the far message", w.OverflowMessages)
	}
	k.wantCounts(TopicCounts{Topic: "a", Reserved: 1})
	// Move the cursor until the redelivery's second enters the horizon.
	sec := SecondOf(exp + 1)
	k.apply(command.Expire{Before: sec - Slots + 1})
	if n := k.one(command.Promote{Before: sec + 1}).(int); n != 2 {
		t.Fatalf("promoted %d, want 2", n)
	}
	v := k.get(id)
	if v.State != StateReserved || v.Receipt != 7 || v.LeaseExpiresMs != exp || v.DeliverAtMs != exp+1 {
		t.Fatalf("promoted lease %+v %s", v.Message, v.State)
	}
	k.wantCounts(TopicCounts{Topic: "a", Reserved: 1})
	k.wantCounts(TopicCounts{Topic: "b", Delayed: 1})
	if w := k.wheel(); w.OverflowMessages != 0 {
		t.Fatalf("overflow %d after the promote", w.OverflowMessages)
	}
	// The lease expires unacked: the message is ready again.
	k.apply(command.Expire{Before: sec + 1})
	k.wantState(id, StateReady, exp+1, 1)
	k.wantCounts(TopicCounts{Topic: "a", Ready: 1})
}

// A delayed message reads as ready from its due millisecond, in Get (View.At)
// and in the topic counts (TopicsAt), though it stays in its slot until the
// slot expires; a reserved one stays reserved.
func TestDueMessagesReadReady(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 100},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1200},
		command.NewMessage{Topic: "b", DeliverAtMs: t0 + 150},
		command.NewMessage{Topic: "b", DeliverAtMs: t0 + 50},
	)
	k.one(command.Lease{NowMs: t0 + 60, Items: []command.LeaseItem{{ID: enq[3].ID, Nonce: 7, ExpiresMs: t0 + 30_000, RedeliverMs: t0 + 31_000}}})
	counts := func(now int64) map[string][2]int64 {
		t.Helper()
		tc, err := k.s.TopicsAt(now)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][2]int64{}
		for _, c := range tc {
			out[c.Topic] = [2]int64{c.Delayed, c.Ready}
		}
		return out
	}
	if got := counts(t0 + 99); got["a"] != [2]int64{2, 0} || got["b"] != [2]int64{1, 0} {
		t.Fatalf("a millisecond before the first is due: %v", got)
	}
	if got := counts(t0 + 100); got["a"] != [2]int64{1, 1} || got["b"] != [2]int64{1, 0} {
		t.Fatalf("at the first's due millisecond: %v", got)
	}
	if got := counts(t0 + 1200); got["a"] != [2]int64{0, 2} || got["b"] != [2]int64{0, 1} {
		t.Fatalf("all due (in two slots): %v", got)
	}
	for i, want := range []struct {
		now   int64
		state State
	}{{t0 + 99, StateDelayed}, {t0 + 100, StateReady}} {
		v, err := k.s.Get(enq[0].ID)
		if err != nil || v.At(want.now).State != want.state {
			t.Fatalf("case %d: Get at %d: %v, %v; want %s", i, want.now, v.At(want.now).State, err, want.state)
		}
	}
	if v, err := k.s.Get(enq[3].ID); err != nil || v.At(t0+5000).State != StateReserved {
		t.Fatalf("the reserved message: %+v, %v", v, err)
	}
	// The stored state has not changed: expiring the slots makes it so.
	if tc := k.s.Topics(); tc[0].Delayed != 2 || tc[0].Ready != 0 {
		t.Fatalf("stored counts %+v changed by reads", tc)
	}
}

// TestKeysHeldAgreesWithGet checks the one-iterator key lookup of a
// Schedule against a point read per key, with keys in every place the
// index keeps them: compacted into the lower levels, flushed into level 0,
// in the memtable, deleted (an ack frees a key) at each of those, and
// written by the batch itself.
func TestKeysHeldAgreesWithGet(t *testing.T) {
	k := newStoreKit(t, Options{})
	now := t0
	var sent []model.ID
	phase := func(p int) {
		var msgs []command.NewMessage
		for i := range 40 {
			msgs = append(msgs, command.NewMessage{Topic: "a", Key: fmt.Sprintf("k-%d-%02d", p, i), DeliverAtMs: now + 1000})
		}
		sent = append(sent, ids(k.schedule(now, msgs...))...)
	}
	phase(0)
	if err := k.s.db.Compact([]byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	phase(1)
	if err := k.s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	phase(2)
	// Free every third key of each phase: the delete lands in the memtable
	// over keys in the lower levels, level 0 and the memtable.
	k.apply(command.Expire{Before: t0s + 2})
	now += 2000
	var free []model.Receipt
	for i := 0; i < len(sent); i += 3 {
		free = append(free, model.Receipt{ID: sent[i], Nonce: uint64(i + 1)})
		k.one(command.Lease{NowMs: now, Items: []command.LeaseItem{{ID: sent[i], Nonce: uint64(i + 1), ExpiresMs: now + 60_000, RedeliverMs: now + 60_000}}})
	}
	if c := k.one(command.Ack{NowMs: now, Receipts: free}).(command.Counted); c.Done != len(free) {
		t.Fatalf("ack %+v", c)
	}

	tx := k.s.newTx()
	defer tx.b.Close()
	tid, _ := tx.topicID("a", false)
	tx.set(keyIndexKey(tid, "own-write"), []byte("x")) // the batch's own write
	var keys [][]byte
	for p := range 4 { // phase 3 was never written
		for i := range 40 {
			keys = append(keys, keyIndexKey(tid, fmt.Sprintf("k-%d-%02d", p, i)))
		}
	}
	keys = append(keys, keyIndexKey(tid, "own-write"), keyIndexKey(tid, "k-1"), keyIndexKey(tid, "k-1-00x"), keyIndexKey(tid+1, "k-1-01"))
	got := tx.keysHeld(keys)
	if tx.err != nil {
		t.Fatal(tx.err)
	}
	var nHeld int
	for i, key := range keys {
		if want := tx.get(key) != nil; got[i] != want {
			t.Errorf("key %q: held %v, a point read says %v", key, got[i], want)
		}
		if got[i] {
			nHeld++
		}
	}
	if want := 3*40 - len(free) + 1; nHeld != want {
		t.Errorf("%d keys held, want %d", nHeld, want)
	}
}

// TestScheduleNumbersTopicsInMessageOrder: the topics a Schedule creates
// are numbered in the order its messages name them, keyed or not, so the
// key lookup that runs before the messages are put changes no number.
func TestScheduleNumbersTopicsInMessageOrder(t *testing.T) {
	k := newStoreKit(t, Options{})
	k.schedule(t0,
		command.NewMessage{Topic: "first", DeliverAtMs: t0 + 1000},
		command.NewMessage{Topic: "second", Key: "a", DeliverAtMs: t0 + 1000},
		command.NewMessage{Topic: "second", Key: "a", DeliverAtMs: t0 + 1000},
		command.NewMessage{Topic: "third", Key: "b", DeliverAtMs: t0 + 1000},
	)
	first, second, third := k.s.topics["first"], k.s.topics["second"], k.s.topics["third"]
	if first == 0 || second != first+1 || third != second+1 {
		t.Fatalf("topic ids first %d, second %d, third %d; want consecutive in message order", first, second, third)
	}
}

// A stopped node's slot file may hold bytes past the length its index
// records: the appends of entries whose index writes a crash lost. A
// read-only open cuts nothing, so Slot lists the records the index covers
// and no more, as a read-write open would after cutting the tail.
func TestReadOnlySlotIgnoresUncoveredTail(t *testing.T) {
	k := newStoreKit(t, Options{})
	id := k.schedule(t0, command.NewMessage{Topic: "a", Body: []byte("kept"), DeliverAtMs: t0 + 3000})[0].ID
	if err := k.s.Close(); err != nil {
		t.Fatal(err)
	}
	path := k.segPath(t0s + 3)
	good, err := readFS(k.fs, path)
	if err != nil {
		t.Fatal(err)
	}
	lost := segment.AppendRecord(nil, segment.Record{Type: segment.TypeMessage, Index: k.idx + 1,
		Payload: EncodeMessage(nil, &model.Message{ID: model.ID{Index: k.idx + 1}, Topic: "a", Body: []byte("lost")})})
	for name, tail := range map[string][]byte{"whole record of a lost entry": lost, "half a record": lost[:len(lost)/2]} {
		t.Run(name, func(t *testing.T) {
			if err := writeFS(k.fs, path, append(append([]byte(nil), good...), tail...)); err != nil {
				t.Fatal(err)
			}
			ro, err := Open(k.dir, Options{FS: k.fs, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer ro.Close()
			info, err := ro.Slot(SlotOf(t0s+3), true)
			if err != nil {
				t.Fatalf("slot of a stopped node: %v", err)
			}
			if len(info.Records) != 1 || info.Records[0].ID != id || info.Messages != 1 {
				t.Fatalf("slot of a stopped node lists %+v (%d messages); want the one record the index covers, of %s", info.Records, info.Messages, id)
			}
		})
	}
}

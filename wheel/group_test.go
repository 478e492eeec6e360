package wheel

import (
	"errors"
	"hash/fnv"
	"testing"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

func TestGroupOf(t *testing.T) {
	for _, n := range []int{0, 1} {
		if g := model.GroupOf("orders", n); g != 0 {
			t.Fatalf("GroupOf(orders, %d) = %d, want 0", n, g)
		}
	}
	h := fnv.New64a()
	h.Write([]byte("orders.close"))
	if got, want := model.GroupOf("orders.close", 7), int(h.Sum64()%7); got != want {
		t.Fatalf("GroupOf(orders.close, 7) = %d, want fnv1a64 mod 7 = %d", got, want)
	}
	// Topics spread over the groups.
	seen := map[int]int{}
	for i := range 300 {
		seen[model.GroupOf(string(rune('a'+i%26))+string(rune('a'+i/26)), 3)]++
	}
	for g := range 3 {
		if seen[g] < 50 {
			t.Fatalf("group %d holds %d of 300 topics: %v", g, seen[g], seen)
		}
	}
}

func TestIDGroup(t *testing.T) {
	for _, c := range []struct {
		group int
		pos   uint32
	}{{0, 0}, {0, model.MaxEntryMessages - 1}, {1, 5}, {model.MaxGroups - 1, 0}, {model.MaxGroups - 1, model.MaxEntryMessages - 1}} {
		id := model.ID{Index: 9, Seq: model.SeqOf(c.group, c.pos)}
		if id.Group() != c.group || id.Seq&(model.MaxEntryMessages-1) != c.pos {
			t.Fatalf("seqOf(%d, %d) = %#x: group %d", c.group, c.pos, id.Seq, id.Group())
		}
		back, err := model.ParseID(id.String())
		if err != nil || back != id {
			t.Fatalf("ParseID(%s) = %v, %v", id, back, err)
		}
	}
	if (model.ID{Index: 3, Seq: 7}).Group() != 0 {
		t.Fatal("an id without a group byte is not of group 0")
	}
}

func TestOpenRefusesGroupOutOfRange(t *testing.T) {
	for _, g := range []int{-1, model.MaxGroups} {
		_, err := Open(t.TempDir(), Options{Group: g})
		if !errors.Is(err, model.ErrInvalid) {
			t.Fatalf("Open with group %d: %v, want ErrInvalid", g, err)
		}
	}
}

// TestScheduledMatchesApplyInGroup: the answer at commit is the id Apply
// mints, in every group, across the kinds of placement a keyless message
// gets (a slot file, the overflow, the ready queue).
func TestScheduledMatchesApplyInGroup(t *testing.T) {
	for _, g := range []int{0, 1, model.MaxGroups - 1} {
		k := newStoreKit(t, Options{Group: g})
		msgs := []command.NewMessage{
			{Topic: "a", DeliverAtMs: t0 + 1500},
			{Topic: "a", DeliverAtMs: t0 - 5000},
			{Topic: "b", DeliverAtMs: t0 + 3*3600_000},
			{Topic: "b", DeliverAtMs: MaxDueMs + 1},
		}
		got := k.schedule(t0, msgs...)
		want := Scheduled(g, k.idx, msgs)
		for i := range msgs {
			if got[i] != want[i] {
				t.Fatalf("group %d message %d: applied %+v, Scheduled %+v", g, i, got[i], want[i])
			}
			if got[i].ID.Group() != g {
				t.Fatalf("group %d message %d: id %s names group %d", g, i, got[i].ID, got[i].ID.Group())
			}
		}
	}
}

// TestPlacementsInGroup runs the placements' life (placed, leased, acked,
// cancelled, expired, reopened) in a store of a group other than 0: the
// entry's first placement is its group's first Seq, not 0.
func TestPlacementsInGroup(t *testing.T) {
	k := newStoreKit(t, Options{Group: model.MaxGroups - 1})
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1500},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 2500, Priority: 3},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 2600, Key: "k"},
		command.NewMessage{Topic: "b", DeliverAtMs: t0 + 4500},
	)
	if got := len(k.keysWith(pMeta)); got != 1 {
		t.Fatalf("%d metas, want only the keyed message's", got)
	}
	k.wantState(enq[0].ID, StateDelayed, t0+1500, 0)
	k.wantState(enq[3].ID, StateDelayed, t0+4500, 0)
	if v := k.get(enq[1].ID); v.Priority != 3 {
		t.Fatalf("placed message reads %+v", v)
	}
	ids, err := k.s.messageIDs()
	if err != nil || len(ids) != 4 {
		t.Fatalf("message ids %v, %v", ids, err)
	}
	for i, id := range ids {
		if id != enq[i].ID {
			t.Fatalf("message ids %v, want the enqueued %v", ids, enq)
		}
	}
	k.one(command.Cancel{ID: enq[0].ID})
	k.wantGone(enq[0].ID)
	k.one(command.Lease{NowMs: t0 + 2500, Items: []command.LeaseItem{{ID: enq[1].ID, Nonce: 4, ExpiresMs: t0 + 9000, RedeliverMs: t0 + 9000}}})
	k.one(command.Ack{NowMs: t0 + 2600, Receipts: []model.Receipt{{ID: enq[1].ID, Nonce: 4}}})
	k.wantGone(enq[1].ID)
	k.reopen()
	k.wantState(enq[3].ID, StateDelayed, t0+4500, 0)
	k.wantGone(enq[0].ID)
	k.apply(command.Expire{Before: t0s + 5})
	k.wantState(enq[3].ID, StateReady, t0+4500, 0)
	for _, p := range []byte{pPlaced, pPlacedBy} {
		if got := k.keysWith(p); len(got) != 0 {
			t.Fatalf("prefix %q holds %x after the entry's last slot expired", p, got)
		}
	}
	if got := k.goneMarks(); len(got) != 0 {
		t.Fatalf("gone marks %x after the entry's last slot expired", got)
	}
}

// TestEntryMessageLimit: an entry never enqueues more than MaxEntryMessages
// messages, so a position never reaches the group byte; a Schedule that
// would is refused whole, and an AdvanceSchedules leaves the occurrences
// past the limit for later.
func TestEntryMessageLimit(t *testing.T) {
	k := newStoreKit(t, Options{Group: 2})
	k.one(command.SetSchedule{NowMs: t0, Spec: command.ScheduleSpec{Name: "s1", Topic: "j", EveryMs: 1000, StartAtMs: t0 + 5000}})
	k.one(command.SetSchedule{NowMs: t0, Spec: command.ScheduleSpec{Name: "s2", Topic: "j", EveryMs: 1000, StartAtMs: t0 + 5000}})

	k.s.mu.Lock()
	defer k.s.mu.Unlock()
	tx := k.s.newTx()
	defer tx.b.Close()
	tx.index, tx.applied = k.idx+1, k.idx+1
	tx.seq = model.MaxEntryMessages - 2
	r := tx.schedule(command.Schedule{NowMs: t0, Messages: make([]command.NewMessage, 3)})
	if !errors.Is(r.Err, model.ErrInvalid) || tx.seq != model.MaxEntryMessages-2 {
		t.Fatalf("a Schedule past the limit: %v, position %d", r.Err, tx.seq)
	}
	r = tx.schedule(command.Schedule{NowMs: t0, Messages: []command.NewMessage{{Topic: "a", DeliverAtMs: t0 + 1000}}})
	enq := r.Value.([]Enqueued)
	if r.Err != nil || enq[0].ID.Group() != 2 || enq[0].ID.Seq != model.SeqOf(2, model.MaxEntryMessages-2) {
		t.Fatalf("a Schedule within the limit: %+v, %v", enq, r.Err)
	}
	r = tx.advanceSchedules(command.AdvanceSchedules{NowMs: t0 + 4000, Items: []command.AdvanceItem{{Name: "s1", FromMs: t0 + 5000}, {Name: "s2", FromMs: t0 + 5000}}})
	if got := r.Value.(command.AdvanceResult); got.Fired != 1 || got.Stale != 1 {
		t.Fatalf("advance at the limit: %+v, want one fired, one left", got)
	}
	if tx.seq != model.MaxEntryMessages {
		t.Fatalf("position %d after the last message, want %d", tx.seq, model.MaxEntryMessages)
	}
	if tx.err != nil {
		t.Fatal(tx.err)
	}
}

package wheel

import (
	"reflect"
	"testing"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// TestLeaseByID follows the Lease a reserve by id (beanstalkd's
// reserve-job) makes: of one message, whatever its due time. A ready
// message leaves its ready queue, a delayed one its slot, one beyond the
// horizon its overflow placement; each becomes reserved at attempt 1 and
// is settled by its receipt, and none comes due where it was. A reserved,
// acked, dead or unknown message is refused; a dead one is taken by
// LeaseBuried, which redrives it first. A replay of the log and a reopen
// read the same.
func TestLeaseByID(t *testing.T) {
	k := newStoreKit(t, Options{})
	now := t0 + 100
	enq := k.schedule(now,
		command.NewMessage{Topic: "a", Body: []byte("ready"), DeliverAtMs: now},
		command.NewMessage{Topic: "a", Body: []byte("slot"), DeliverAtMs: now + 5_000},
		command.NewMessage{Topic: "a", Body: []byte("overflow"), DeliverAtMs: now + 3*HorizonSecs*TickMs},
		command.NewMessage{Topic: "a", Body: []byte("acked"), DeliverAtMs: now},
		command.NewMessage{Topic: "a", Body: []byte("dead"), DeliverAtMs: now, MaxAttempts: 1},
	)
	ready, slot, over, acked, dead := enq[0].ID, enq[1].ID, enq[2].ID, enq[3].ID, enq[4].ID
	k.apply(command.Expire{Before: t0s + 1}) // ready and acked and dead are on the ready queue
	now = t0 + 1_000
	lease := func(id model.ID, nonce uint64) bool {
		t.Helper()
		ok := k.one(command.Lease{NowMs: now, Items: []command.LeaseItem{{ID: id, Nonce: nonce, ExpiresMs: now + 30_000, RedeliverMs: now + 31_000}}}).([]bool)
		return ok[0]
	}
	if got := k.keysWith(pOverflow); len(got) != 1 {
		t.Fatalf("overflow placements %x; want the overflow message's", got)
	}
	for i, id := range []model.ID{ready, slot, over, acked, dead} {
		if !lease(id, uint64(i+1)) {
			t.Fatalf("lease of %s refused", id)
		}
		k.wantState(id, StateReserved, now+31_000, 1)
	}
	if c := k.one(command.Ack{NowMs: now, Receipts: []model.Receipt{{ID: acked, Nonce: 4}}}).(command.Counted); c.Done != 1 {
		t.Fatalf("ack %+v", c)
	}
	if c := k.one(command.Nack{NowMs: now, Receipts: []model.Receipt{{ID: dead, Nonce: 5}}}).(command.Counted); c.Done != 1 {
		t.Fatalf("nack %+v", c)
	}
	k.wantState(dead, StateDead, now+31_000, 1)
	for _, id := range []model.ID{ready, acked, dead, {Index: 999, Seq: 3}} {
		if lease(id, 9) {
			t.Fatalf("lease of %s taken; want refused", id)
		}
	}
	if c := k.counts("a"); c.Ready != 0 || c.Delayed != 0 || c.Reserved != 3 || c.Dead != 1 {
		t.Fatalf("counts %+v", c)
	}
	// A dead (buried) message is redriven and leased in one apply, its
	// attempts counted afresh; of another topic, or not dead, it is refused.
	leaseBuried := func(topic string, id model.ID) bool {
		t.Helper()
		ok := k.one(command.LeaseBuried{NowMs: now, Topic: topic, Item: command.LeaseItem{ID: id, Nonce: 6, ExpiresMs: now + 30_000, RedeliverMs: now + 31_000}}).([]bool)
		return ok[0]
	}
	if leaseBuried("b", dead) || leaseBuried("a", ready) || leaseBuried("a", model.ID{Index: 999}) {
		t.Fatal("LeaseBuried of another topic's message, a reserved one or an unknown one taken")
	}
	k.wantState(dead, StateDead, now+31_000, 1)
	if !leaseBuried("a", dead) {
		t.Fatal("LeaseBuried of a dead message refused")
	}
	k.wantState(dead, StateReserved, now+31_000, 1)
	if c := k.counts("a"); c.Reserved != 4 || c.Dead != 0 {
		t.Fatalf("counts after LeaseBuried %+v", c)
	}
	// Nothing comes due where it was: the slot's and the overflow's
	// seconds pass and the ready queue stays empty.
	k.apply(command.Expire{Before: t0s + 7}, command.Promote{Before: t0s + 7 + Slots})
	if vs, err := k.s.Ready("a", 10, nil); err != nil || len(vs) != 0 {
		t.Fatalf("ready queue %+v %v; want empty", vs, err)
	}
	k.wantState(slot, StateReserved, now+31_000, 1)
	if c := k.one(command.Ack{NowMs: now, Receipts: []model.Receipt{{ID: slot, Nonce: 2}, {ID: over, Nonce: 3}, {ID: dead, Nonce: 6}}}).(command.Counted); c.Done != 3 {
		t.Fatalf("ack %+v", c)
	}
	k.wantGone(slot)
	k.wantGone(over)
	k.wantGone(dead)
	if got := k.keysWith(pOverflow); len(got) != 0 {
		t.Fatalf("overflow placements %x after the overflow message was leased", got)
	}

	// The log replayed into another store reads the same, and so does a reopen.
	rep, err := Open("/db", Options{FS: vfs.NewStrictMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	if _, err := rep.Apply(k.log); err != nil {
		t.Fatal(err)
	}
	k.reopen()
	for _, id := range []model.ID{ready, slot, over, acked, dead} {
		va, ea := k.s.Get(id)
		vb, eb := rep.Get(id)
		if (ea == nil) != (eb == nil) || !reflect.DeepEqual(va, vb) {
			t.Fatalf("message %s: %+v %v; replayed %+v %v", id, va, ea, vb, eb)
		}
	}
	if !reflect.DeepEqual(k.s.Topics(), rep.Topics()) {
		t.Fatalf("topics %+v; replayed %+v", k.s.Topics(), rep.Topics())
	}
}

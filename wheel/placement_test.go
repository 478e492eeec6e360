package wheel

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// keysWith lists the index's keys with prefix p.
func (k *storeKit) keysWith(p ...byte) [][]byte {
	k.t.Helper()
	var out [][]byte
	if err := k.s.scan(p, func(key, _ []byte) error {
		out = append(out, append([]byte(nil), key...))
		return nil
	}); err != nil {
		k.t.Fatal(err)
	}
	return out
}

// goneMarks returns the meta keys that hold a gone mark.
func (k *storeKit) goneMarks() [][]byte {
	k.t.Helper()
	var out [][]byte
	if err := k.s.scan([]byte{pMeta}, func(key, v []byte) error {
		if isGoneMark(v) {
			out = append(out, append([]byte(nil), key...))
		}
		return nil
	}); err != nil {
		k.t.Fatal(err)
	}
	return out
}

// wantPlacementsGone fails unless the index holds no placements and no
// gone marks: what an expiry past every entry's last slot second leaves.
func (k *storeKit) wantPlacementsGone() {
	k.t.Helper()
	for _, p := range []byte{pPlaced, pPlacedBy} {
		if got := k.keysWith(p); len(got) != 0 {
			k.t.Fatalf("prefix %q holds %x after the entry's last slot expired", p, got)
		}
	}
	if got := k.goneMarks(); len(got) != 0 {
		k.t.Fatalf("gone marks %x after the entry's last slot expired", got)
	}
}

// TestPlacementsStandForMetas follows messages enqueued without a key into
// slot files: they get no meta, only their entry's placements; acking or
// cancelling one marks it gone; the placements and marks go once the
// cursor passes the entry's last slot, and every step reads the same as
// if each message had a meta.
func TestPlacementsStandForMetas(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1500},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 2500, Priority: 3},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 2600, Key: "k"},     // keyed: a meta
		command.NewMessage{Topic: "b", DeliverAtMs: t0 + 4500, Priority: -1}, // last slot of the entry
	)
	// Beyond the horizon, keyed: a meta (TestOverflowPlacements follows one
	// without a key).
	enq = append(enq[:3], append(k.schedule(t0, command.NewMessage{Topic: "b", DeliverAtMs: t0 + 3*3600_000, Key: "o"}), enq[3])...)
	idx := enq[0].ID.Index
	if got := len(k.keysWith(pMeta)); got != 2 {
		t.Fatalf("%d metas, want 2 (the keyed message and the one beyond the horizon)", got)
	}
	if got := k.keysWith(pPlaced); len(got) != 1 || !bytes.Equal(got[0], placedKey(idx)) {
		t.Fatalf("placements %x, want one for entry %d", got, idx)
	}
	if got := k.keysWith(pPlacedBy); len(got) != 1 || !bytes.Equal(got[0], placedByKey(t0s+4, idx)) {
		t.Fatalf("placements by last second %x, want second %d", got, t0s+4)
	}
	k.wantState(enq[0].ID, StateDelayed, t0+1500, 0)
	if v := k.get(enq[1].ID); v.Priority != 3 || v.Topic != "a" {
		t.Fatalf("placed message reads %+v", v)
	}
	k.wantCounts(TopicCounts{Topic: "a", Delayed: 3})

	// Cancelled: gone, and marked so.
	k.one(command.Cancel{ID: enq[0].ID})
	k.wantGone(enq[0].ID)
	if got := k.goneMarks(); len(got) != 1 || !bytes.Equal(got[0], metaKey(enq[0].ID)) {
		t.Fatalf("gone marks %x", got)
	}
	// Leased: it gets a meta of its own; acked: gone.
	k.one(command.Lease{NowMs: t0 + 2500, Items: []command.LeaseItem{{ID: enq[1].ID, Nonce: 4, ExpiresMs: t0 + 9000, RedeliverMs: t0 + 9000}}})
	k.wantState(enq[1].ID, StateReserved, t0+9000, 1)
	k.one(command.Ack{NowMs: t0 + 2600, Receipts: []model.Receipt{{ID: enq[1].ID, Nonce: 4}}})
	k.wantGone(enq[1].ID)
	if got := len(k.goneMarks()); got != 2 {
		t.Fatalf("%d gone marks, want 2", got)
	}
	// The last slot second with a placement has not expired: they stay.
	k.apply(command.Expire{Before: t0s + 4})
	if len(k.keysWith(pPlaced)) != 1 {
		t.Fatal("placements dropped before the cursor passed the entry's last slot")
	}
	// It expires: what was still placed moves to the ready queue, and
	// the placements and marks go.
	k.apply(command.Expire{Before: t0s + 5})
	k.wantPlacementsGone()
	if got := len(k.keysWith(pMeta)); got != 3 {
		t.Fatalf("%d metas after the expiry, want 3 (the keyed message's, the one beyond the horizon, the ready one)", got)
	}
	k.wantState(enq[4].ID, StateReady, t0+4500, 0)
	k.wantGone(enq[0].ID)
	k.wantGone(enq[1].ID)
	// And it all survives a reopen.
	k.reopen()
	k.wantState(enq[4].ID, StateReady, t0+4500, 0)
	k.wantState(enq[3].ID, StateDelayed, t0+3*3600_000, 0)
	k.wantGone(enq[0].ID)
}

// TestOverflowPlacements follows messages enqueued without a key beyond
// the horizon: their entry's placements stand for their metas, which
// every read implies from the overflow; a cancel marks one gone; Promote
// gives the others a meta of their own, and so does an Expire that passes
// one no Promote moved; the placements go once the cursor passes the
// entry's last due second.
func TestOverflowPlacements(t *testing.T) {
	k := newStoreKit(t, Options{})
	due := []int64{t0 + 3*3600_000, t0 + 3*3600_000 + 700, t0 + 5*3600_000}
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: due[0]},
		command.NewMessage{Topic: "a", DeliverAtMs: due[1], Priority: 2},
		command.NewMessage{Topic: "a", DeliverAtMs: due[2]},
	)
	idx := enq[0].ID.Index
	if got := len(k.keysWith(pMeta)); got != 0 {
		t.Fatalf("%d metas, want none", got)
	}
	last := SecondOf(due[2])
	if got := k.keysWith(pPlacedBy); len(got) != 1 || !bytes.Equal(got[0], placedByKey(last, idx)) {
		t.Fatalf("placements by last second %x, want second %d", got, last)
	}
	for i, id := range enq {
		k.wantState(id.ID, StateDelayed, due[i], 0)
	}
	if v := k.get(enq[1].ID); v.Priority != 2 || v.Topic != "a" {
		t.Fatalf("placed message reads %+v", v)
	}
	k.wantCounts(TopicCounts{Topic: "a", Delayed: 3})
	if w := k.wheel(); w.OverflowMessages != 3 {
		t.Fatalf("overflow holds %d, want 3", w.OverflowMessages)
	}

	k.one(command.Cancel{ID: enq[1].ID})
	k.wantGone(enq[1].ID)
	if got := k.goneMarks(); len(got) != 1 || !bytes.Equal(got[0], metaKey(enq[1].ID)) {
		t.Fatalf("gone marks %x", got)
	}
	// Promoted into the wheel: a meta of its own.
	k.apply(command.Expire{Before: SecondOf(due[0]) - Slots + 10}, command.Promote{Before: SecondOf(due[0]) + 10})
	k.wantState(enq[0].ID, StateDelayed, due[0], 0)
	if got := len(k.keysWith(pMeta)); got != 2 {
		t.Fatalf("%d metas after the promotion, want 2 (the promoted one, the gone mark)", got)
	}
	// Expired past the last one without its Promote: it keeps the meta
	// its placement implied, and the placements and marks go.
	k.apply(command.Expire{Before: last + 1})
	k.wantPlacementsGone()
	k.wantState(enq[0].ID, StateReady, due[0], 0)
	k.wantState(enq[2].ID, StateDelayed, due[2], 0)
	k.wantGone(enq[1].ID)
	k.apply(command.Promote{Before: last + Slots})
	k.wantState(enq[2].ID, StateReady, due[2], 0)
	k.reopen()
	k.wantState(enq[2].ID, StateReady, due[2], 0)
	k.wantGone(enq[1].ID)
	k.wantCounts(TopicCounts{Topic: "a", Ready: 2})
}

// TestPlacementsAcrossCommands applies one entry with two Schedule
// commands: the second extends the entry's placements and moves its last
// slot second.
func TestPlacementsAcrossCommands(t *testing.T) {
	k := newStoreKit(t, Options{})
	res := k.apply(
		command.Schedule{NowMs: t0, Messages: []command.NewMessage{{Topic: "a", DeliverAtMs: t0 + 1000}}},
		command.Schedule{NowMs: t0, Messages: []command.NewMessage{{Topic: "a", DeliverAtMs: t0 + 7000}, {Topic: "a", DeliverAtMs: t0 + 500}}},
	)
	var ids []model.ID
	for _, r := range res {
		for _, e := range r.Value.([]Enqueued) {
			ids = append(ids, e.ID)
		}
	}
	if len(ids) != 3 {
		t.Fatalf("enqueued %v", ids)
	}
	if got := k.keysWith(pPlacedBy); len(got) != 1 || !bytes.Equal(got[0], placedByKey(t0s+7, ids[0].Index)) {
		t.Fatalf("placements by last second %x, want second %d only", got, t0s+7)
	}
	for i, due := range []int64{t0 + 1000, t0 + 7000, t0 + 500} {
		k.wantState(ids[i], StateDelayed, due, 0)
	}
}

func TestFindPlacement(t *testing.T) {
	var tx tx
	want := map[uint32][2]int64{}
	sec, off := int64(1_700_000_000), int64(0)
	for seq := uint32(0); seq < 300; seq += 1 + seq%3 {
		sec += int64(seq%5) - 2 // back and forth
		off += 17 + int64(seq)
		tx.place(model.ID{Index: 42, Seq: seq}, sec, off)
		want[seq] = [2]int64{sec, off}
	}
	for seq := uint32(0); seq < 310; seq++ {
		s, o, ok, err := findPlacement(tx.placing.buf, seq)
		if err != nil {
			t.Fatal(err)
		}
		w, placed := want[seq]
		if ok != placed || ok && (s != w[0] || o != w[1]) {
			t.Fatalf("seq %d: %d %d %v, want %v %v", seq, s, o, ok, w, placed)
		}
	}
	if _, _, _, err := findPlacement([]byte{0x80}, 1); err == nil {
		t.Fatal("a truncated varint decoded")
	}
}

func FuzzFindPlacement(f *testing.F) {
	var tx tx
	tx.place(model.ID{Index: 1, Seq: 0}, 5, 10)
	tx.place(model.ID{Index: 1, Seq: 3}, 4, 99)
	f.Add(tx.placing.buf, uint32(3))
	f.Add([]byte{0x80, 0x80}, uint32(0))
	f.Add(binary.AppendUvarint(nil, 1<<40), uint32(7))
	f.Fuzz(func(t *testing.T, v []byte, seq uint32) {
		_, _, ok, err := findPlacement(v, seq)
		if ok && err != nil {
			t.Fatal("found and failed")
		}
	})
}

// TestAckOfKeyedAndKeylessLeases: a lease's meta says whether its message
// holds a key; an ack frees the key of a keyed message, and ends a keyless
// one, whose record it then need not read, just the same.
func TestAckOfKeyedAndKeylessLeases(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1500, Key: "k1"},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1500},
	)
	var items []command.LeaseItem
	var receipts []model.Receipt
	for i, e := range enq {
		items = append(items, command.LeaseItem{ID: e.ID, Nonce: uint64(10 + i), ExpiresMs: t0 + 9000, RedeliverMs: t0 + 9000})
		receipts = append(receipts, model.Receipt{ID: e.ID, Nonce: uint64(10 + i)})
	}
	k.one(command.Lease{NowMs: t0 + 1500, Items: items})
	k.s.mu.Lock()
	for i, want := range []bool{true, false} {
		mt, ok, err := lookupMeta(storeSource{k.s}, enq[i].ID)
		if err != nil || !ok || mt.Keyed != want || mt.State != StateReserved {
			t.Errorf("message %d: meta %+v, %v, %v; want reserved, keyed %v", i, mt, ok, err, want)
		}
	}
	k.s.mu.Unlock()
	if got := k.keyed(); got["k1"] != enq[0].ID {
		t.Fatalf("key index %v before the ack, want k1 → %s", got, enq[0].ID)
	}
	if c := k.one(command.Ack{NowMs: t0 + 1600, Receipts: receipts}).(command.Counted); c.Done != 2 {
		t.Fatalf("acked %+v, want 2 done", c)
	}
	k.wantGone(enq[0].ID)
	k.wantGone(enq[1].ID)
	if got := k.keyed(); len(got) != 0 {
		t.Fatalf("key index %v after the ack, want empty", got)
	}
	k.wantCounts(TopicCounts{Topic: "a"})
}

// TestKeyOfDeadMessageTakenByNewer: a keyed message's meta names its key
// until it goes dead, which frees the key, so when a newer message takes
// the key, redriving the dead one and acking it does not free the newer
// one's key, and an ack of the newer one does, from its meta.
func TestKeyOfDeadMessageTakenByNewer(t *testing.T) {
	k := newStoreKit(t, Options{})
	lease := func(now int64, id model.ID, nonce uint64) {
		t.Helper()
		ok := k.one(command.Lease{NowMs: now, Items: []command.LeaseItem{{ID: id, Nonce: nonce, ExpiresMs: now + 100, RedeliverMs: now + 101}}}).([]bool)
		if !ok[0] {
			t.Fatalf("lease of %s refused", id)
		}
	}
	keyMeta := func(id model.ID) meta {
		t.Helper()
		k.s.mu.Lock()
		defer k.s.mu.Unlock()
		mt, ok, err := lookupMeta(storeSource{k.s}, id)
		if err != nil || !ok {
			t.Fatalf("meta of %s: %v, %v", id, ok, err)
		}
		return mt
	}
	oldID := k.schedule(t0, command.NewMessage{Topic: "a", Key: "k", DeliverAtMs: t0, MaxAttempts: 1})[0].ID
	if mt := keyMeta(oldID); !mt.Keyed || mt.Key != "k" {
		t.Fatalf("a keyed message's meta %+v, want keyed k", mt)
	}
	lease(t0, oldID, 1)
	k.one(command.Nack{NowMs: t0 + 10, Receipts: []model.Receipt{{ID: oldID, Nonce: 1}}})
	k.wantState(oldID, StateDead, t0+101, 1)
	if mt := keyMeta(oldID); mt.Keyed || mt.Key != "" {
		t.Fatalf("a dead message's meta %+v names a key", mt)
	}
	newer := k.schedule(t0+20, command.NewMessage{Topic: "a", Key: "k", DeliverAtMs: t0 + 1500})
	if newer[0].Duplicate {
		t.Fatal("the dead message kept its key")
	}
	newID := newer[0].ID

	// Redrive: the key is taken, so the redriven message holds none.
	if n := k.one(command.Redrive{NowMs: t0 + 30, Topic: "a", IDs: []model.ID{oldID}}).(int); n != 1 {
		t.Fatalf("redrove %d, want 1", n)
	}
	if v := k.get(oldID); v.Key != "" {
		t.Fatalf("the redriven message holds key %q, which a newer message holds", v.Key)
	}
	if mt := keyMeta(oldID); mt.Keyed {
		t.Fatalf("the redriven message's meta %+v names the key a newer message holds", mt)
	}
	lease(t0+40, oldID, 2)
	if c := k.one(command.Ack{NowMs: t0 + 50, Receipts: []model.Receipt{{ID: oldID, Nonce: 2}}}).(command.Counted); c.Done != 1 {
		t.Fatalf("ack %+v", c)
	}
	if got := k.keyed(); got["k"] != newID {
		t.Fatalf("key index %v after the old message's ack, want k → %s", got, newID)
	}

	// The newer message's ack frees the key its meta names.
	lease(t0+1500, newID, 3)
	if c := k.one(command.Ack{NowMs: t0 + 1550, Receipts: []model.Receipt{{ID: newID, Nonce: 3}}}).(command.Counted); c.Done != 1 {
		t.Fatalf("ack %+v", c)
	}
	if got := k.keyed(); len(got) != 0 {
		t.Fatalf("key index %v after the ack, want empty", got)
	}
	k.wantGone(newID)
}

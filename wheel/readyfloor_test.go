package wheel

import (
	"slices"
	"testing"

	"github.com/delaywheel/delaywheel/wheel/command"
)

// TestReadyFloorRaiseAfterLower: a reader may raise a topic's floor only if
// no apply lowered it since the reader read it.
func TestReadyFloorRaiseAfterLower(t *testing.T) {
	var f readyFloors
	from := f.get(1)
	f.lower(map[uint32][]byte{1: []byte("k5")})
	f.raise(1, from, []byte("k7")) // read before the lowering: refused
	if got := f.get(1); got.key != nil {
		t.Fatalf("floor %q after a stale raise, want the range's start", got.key)
	}
	from = f.get(1)
	f.raise(1, from, []byte("k7"))
	if got := f.get(1); string(got.key) != "k7" {
		t.Fatalf("floor %q, want k7", got.key)
	}
	f.lower(map[uint32][]byte{1: []byte("k6"), 2: []byte("k9")})
	if got := f.get(1); string(got.key) != "k6" {
		t.Fatalf("floor %q after lowering to k6, want k6", got.key)
	}
	if got := f.get(2); got.key != nil {
		t.Fatalf("topic 2's floor %q, want the range's start: it was never raised", got.key)
	}
	from = f.get(1)
	f.raise(1, from, []byte("k2")) // never lowered by a reader
	if got := f.get(1); string(got.key) != "k6" {
		t.Fatalf("floor %q after a raise to a lower key, want k6", got.key)
	}
}

// TestReadyQueueReadsFromItsFloor drains a ready queue from its head while
// messages that sort before the head, and after, join it: every read
// returns the head of what is there, in order.
func TestReadyQueueReadsFromItsFloor(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1100},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1200},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1300},
	)
	k.apply(command.Expire{Before: t0s + 3})
	lease := func(es ...Enqueued) {
		var items []command.LeaseItem
		for _, e := range es {
			items = append(items, command.LeaseItem{ID: e.ID, Nonce: 1, ExpiresMs: t0 + 60_000, RedeliverMs: t0 + 60_000})
		}
		k.one(command.Lease{NowMs: t0 + 3000, Items: items})
	}
	want := func(step string, es ...Enqueued) {
		t.Helper()
		if got := k.readyIDs("a"); !slices.Equal(got, ids(es)) {
			t.Fatalf("%s: ready %v, want %v", step, got, ids(es))
		}
	}
	want("expired", enq...)
	lease(enq[0])
	want("head leased", enq[1:]...)
	// Due before the head (enqueued late, for a past instant), and with
	// the head's due time but a higher priority: both sort first.
	past := k.schedule(t0+3000, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 500})
	urgent := k.schedule(t0+3000, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1200, Priority: 9})
	want("joined before the head", past[0], urgent[0], enq[1], enq[2])
	lease(past[0], urgent[0], enq[1], enq[2])
	want("drained")
	again := k.schedule(t0+3000, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 100})
	want("after the drain", again[0])
	// A new store (a restart) starts without floors.
	k.reopen()
	want("reopened", again[0])
}

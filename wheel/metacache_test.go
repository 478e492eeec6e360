package wheel

import "testing"

// TestMetaCacheFollowsLoadedSlots checks which metas the cache holds as
// messages are loaded, placed, leased, acked and expired, and that every
// lookup it answers matches the index (the kit runs with CheckMetaCache).
func TestMetaCacheFollowsLoadedSlots(t *testing.T) {
	k, _, _ := newLoaderKit(t)
	before := k.schedule(t0,
		NewMessage{Topic: "a", DeliverAtMs: t0 + 1500},
		NewMessage{Topic: "a", DeliverAtMs: t0 + 2500},
		NewMessage{Topic: "b", DeliverAtMs: t0 + 60_000}, // beyond the loaded slots
	)
	if len(k.s.metas) != 0 {
		t.Fatalf("cache holds %d metas before any slot is loaded", len(k.s.metas))
	}
	k.load(t0s + 3)
	cached := func(id ID) bool { _, ok := k.s.metas[id]; return ok }
	if !cached(before[0].ID) || !cached(before[1].ID) || cached(before[2].ID) {
		t.Fatalf("after loading through second %d the cache holds %v", t0s+3, k.s.metas)
	}
	// Placed into a loaded slot after the load: cached at commit.
	placed := k.schedule(t0+10, NewMessage{Topic: "a", DeliverAtMs: t0 + 1700})[0].ID
	if !cached(placed) {
		t.Fatal("a message placed into a loaded slot is not cached")
	}

	// A lease reads the cached meta; the message stays cached while it is
	// reserved, though its lease record lies in a slot that is not loaded,
	// and the ack reads it from the cache and drops it.
	hits := k.s.metaHits
	took := k.one(Lease{NowMs: t0 + 1500, Items: []LeaseItem{{ID: before[0].ID, Nonce: 7, ExpiresMs: t0 + 31_500, RedeliverMs: t0 + 31_500}}})
	if ok := took.([]bool); !ok[0] {
		t.Fatal("lease refused")
	}
	if k.s.metaHits != hits+1 {
		t.Fatalf("lease: %d cache hits, want 1", k.s.metaHits-hits)
	}
	if mt, ok := k.s.metas[before[0].ID]; !ok || mt.State != StateReserved || mt.Second != t0s+31 {
		t.Fatalf("leased message's cached meta: %+v, %v", mt, ok)
	}
	hits = k.s.metaHits
	k.one(Ack{NowMs: t0 + 1600, Receipts: []Receipt{{ID: before[0].ID, Nonce: 7}}})
	if k.s.metaHits != hits+1 || cached(before[0].ID) {
		t.Fatalf("ack: %d cache hits, still cached %v", k.s.metaHits-hits, cached(before[0].ID))
	}
	k.wantGone(before[0].ID)
	// Not cached and not loaded: a lease leaves it out of the cache.
	far := before[2].ID
	k.one(Lease{NowMs: t0 + 1600, Items: []LeaseItem{{ID: far, Nonce: 9, ExpiresMs: t0 + 31_600, RedeliverMs: t0 + 31_600}}})
	if cached(far) {
		t.Fatal("a message leased from an unloaded slot was cached")
	}
	// A nack to a slot that is not loaded drops a reserved message.
	k.one(Lease{NowMs: t0 + 1600, Items: []LeaseItem{{ID: before[1].ID, Nonce: 10, ExpiresMs: t0 + 2600, RedeliverMs: t0 + 2600}}})
	k.one(Nack{NowMs: t0 + 1650, DelayMs: 50_000, Receipts: []Receipt{{ID: before[1].ID, Nonce: 10}}})
	if cached(before[1].ID) {
		t.Fatal("a message nacked to an unloaded slot is still cached")
	}
	// Rescheduled back into a loaded slot: cached again.
	k.one(Reschedule{ID: before[1].ID, DeliverAtMs: t0 + 2500})
	if !cached(before[1].ID) {
		t.Fatal("a message rescheduled into a loaded slot is not cached")
	}
	// A lease whose redelivery lies in a loaded slot stays cached, with its
	// new meta, and the ack that follows reads it from the cache and drops it.
	k.one(Lease{NowMs: t0 + 1700, Items: []LeaseItem{{ID: placed, Nonce: 8, ExpiresMs: t0 + 2900, RedeliverMs: t0 + 2900}}})
	mt, ok := k.s.metas[placed]
	if !ok || mt.State != StateReserved || mt.Second != t0s+2 || mt.Receipt != 8 {
		t.Fatalf("leased message's cached meta: %+v, %v", mt, ok)
	}
	hits = k.s.metaHits
	k.one(Ack{NowMs: t0 + 1800, Receipts: []Receipt{{ID: placed, Nonce: 8}}})
	if k.s.metaHits != hits+1 || cached(placed) {
		t.Fatalf("ack: %d cache hits, still cached %v", k.s.metaHits-hits, cached(placed))
	}
	k.wantGone(placed)

	// Expiry moves what is left of the slot to the ready queue, out of the cache.
	k.apply(Expire{Before: t0s + 3})
	if cached(before[1].ID) {
		t.Fatal("a message of an expired slot is still cached")
	}
	k.wantState(before[1].ID, StateReady, t0+2500, 1)

	// Detaching the loader drops the cache.
	k.schedule(t0+3000, NewMessage{Topic: "a", DeliverAtMs: t0 + 3500})
	k.load(t0s + 4)
	if len(k.s.metas) == 0 {
		t.Fatal("nothing cached after a load")
	}
	k.s.DetachLoader()
	if len(k.s.metas) != 0 {
		t.Fatalf("cache holds %d metas after the loader was detached", len(k.s.metas))
	}
}

// TestMetaCacheBounded checks that the cache stops growing at its bound
// and that lookups past it still find the index's metas.
func TestMetaCacheBounded(t *testing.T) {
	k, _, _ := newLoaderKit(t)
	k.load(t0s + 1)
	k.s.metas = map[ID]meta{}
	for id := range maxCachedMetas {
		k.s.metas[ID{Index: 1 << 40, Seq: uint32(id)}] = meta{Loc: locSegment, Second: t0s}
	}
	enq := k.schedule(t0, NewMessage{Topic: "a", DeliverAtMs: t0 + 500})
	if len(k.s.metas) != maxCachedMetas {
		t.Fatalf("cache grew to %d, bound %d", len(k.s.metas), maxCachedMetas)
	}
	if _, ok := k.s.metas[enq[0].ID]; ok {
		t.Fatal("a meta was cached past the bound")
	}
	k.one(Lease{NowMs: t0 + 500, Items: []LeaseItem{{ID: enq[0].ID, Nonce: 1, ExpiresMs: t0 + 900, RedeliverMs: t0 + 900}}})
	k.wantState(enq[0].ID, StateReserved, t0+900, 1)
}

// TestMetaCacheShrinks checks that once a burst has left the cache, its map
// is rebuilt at the size of what stays, with what stays still cached.
func TestMetaCacheShrinks(t *testing.T) {
	k, _, _ := newLoaderKit(t)
	burst := make([]NewMessage, 2*shrinkMetasFrom)
	for i := range burst {
		burst[i] = NewMessage{Topic: "a", DeliverAtMs: t0 + 1000 + int64(i%1000)}
	}
	k.schedule(t0, burst...)
	stay := k.schedule(t0, NewMessage{Topic: "a", DeliverAtMs: t0 + 2500})[0].ID
	k.load(t0s + 2)
	if len(k.s.metas) != len(burst)+1 || k.s.metasPeak != len(burst)+1 {
		t.Fatalf("after the load: %d cached, peak %d; want %d", len(k.s.metas), k.s.metasPeak, len(burst)+1)
	}
	// The burst's second expires to the ready queue, out of the cache.
	k.apply(Expire{Before: t0s + 2})
	if len(k.s.metas) != 1 || k.s.metasPeak != 1 {
		t.Fatalf("after the burst left: %d cached, peak %d; want the map rebuilt for 1", len(k.s.metas), k.s.metasPeak)
	}
	if _, ok := k.s.metas[stay]; !ok {
		t.Fatal("the message still in a loaded slot left the cache with the rebuild")
	}
	hits := k.s.metaHits
	k.one(Lease{NowMs: t0 + 2500, Items: []LeaseItem{{ID: stay, Nonce: 1, ExpiresMs: t0 + 9000, RedeliverMs: t0 + 9000}}})
	if k.s.metaHits != hits+1 {
		t.Fatal("the lease did not read the rebuilt cache")
	}
	k.wantState(stay, StateReserved, t0+9000, 1)
}

package wheel

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble"
)

// retireKeys puts the store's counts and segment lengths back under the
// prefixes of format 1, and removes the format key, as an index written by
// an earlier version holds them, and closes the store.
func (k *storeKit) retireKeys() {
	k.t.Helper()
	b := k.s.db.NewBatch()
	if err := b.Delete(keyFormat, nil); err != nil {
		k.t.Fatal(err)
	}
	for _, mv := range [...]struct{ from, to byte }{{pCounts, pOldCounts}, {pSegLen, pOldSegLen}} {
		if err := k.s.scan([]byte{mv.from}, func(key, v []byte) error {
			if err := b.Set(append([]byte{mv.to}, key[1:]...), v, nil); err != nil {
				return err
			}
			return b.Delete(key, nil)
		}); err != nil {
			k.t.Fatal(err)
		}
	}
	if b.Count() < 3 {
		k.t.Fatal("no counts or segment lengths to retire")
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		k.t.Fatal(err)
	}
	if err := k.s.Close(); err != nil {
		k.t.Fatal(err)
	}
	k.s = nil
}

// keysUnder counts the index keys with prefix p.
func (k *storeKit) keysUnder(p byte) int {
	k.t.Helper()
	return len(k.keysWith(p))
}

// TestMoveRetiredKeys opens an index in the key layout of earlier versions:
// a read-only open refuses it and changes nothing, a crash before the moved
// keys are durable leaves the old layout to be moved again, and once moved
// the counts are right and the slot files (whose recorded lengths moved)
// keep their messages.
func TestMoveRetiredKeys(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0,
		NewMessage{Topic: "a", DeliverAtMs: t0 + 1500},
		NewMessage{Topic: "a", DeliverAtMs: t0 + 2500},
		NewMessage{Topic: "b", DeliverAtMs: t0 + 2500},
	)
	k.retireKeys()

	ro := k.opts
	ro.ReadOnly = true
	refused := func(when string) {
		t.Helper()
		if s, err := Open(k.dir, ro); err == nil || !strings.Contains(err.Error(), "earlier version") {
			if s != nil {
				s.Close()
			}
			t.Fatalf("read-only open of the old layout %s: %v; want a refusal naming the earlier version", when, err)
		}
	}
	refused("before any move")

	// A crash after the move but before its flush is durable.
	k.fs.SetIgnoreSyncs(true)
	k.open()
	if k.keysUnder(pOldCounts) != 0 || k.keysUnder(pCounts) != 2 {
		t.Fatalf("after the move: %d old and %d new counts", k.keysUnder(pOldCounts), k.keysUnder(pCounts))
	}
	k.s.CrashForTest(k.fs)
	refused("after a crash lost the move")
	k.open()
	if n := k.keysUnder(pOldCounts) + k.keysUnder(pOldSegLen); n != 0 {
		t.Fatalf("%d keys left under the retired prefixes", n)
	}
	if n := k.keysUnder(pSegLen); n != 2 {
		t.Fatalf("%d segment lengths, want 2 (seconds t0+1 and t0+2)", n)
	}
	k.wantCounts(TopicCounts{Topic: "a", Delayed: 2})
	k.wantCounts(TopicCounts{Topic: "b", Delayed: 1})
	k.reopen()
	k.apply(Expire{Before: t0s + 3})
	for _, e := range enq {
		k.wantState(e.ID, StateReady, e.DeliverAtMs, 0)
	}
	k.wantCounts(TopicCounts{Topic: "a", Ready: 2})
	k.wantCounts(TopicCounts{Topic: "b", Ready: 1})
}

// TestIndexFromLaterFormat checks that a store refuses an index a later
// version wrote, read-write or read-only, and says so.
func TestIndexFromLaterFormat(t *testing.T) {
	k := newStoreKit(t, Options{})
	if v, err := k.s.get(keyFormat); err != nil || u64(v) != indexFormat {
		t.Fatalf("format key %v, %v; want %d recorded", v, err, indexFormat)
	}
	if err := k.s.db.Set(keyFormat, putU64(indexFormat+1), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if err := k.s.Close(); err != nil {
		t.Fatal(err)
	}
	k.s = nil
	for _, ro := range []bool{false, true} {
		opts := k.opts
		opts.ReadOnly = ro
		s, err := Open(k.dir, opts)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("format %d", indexFormat+1)) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("read-only %v: open of a later format: %v; want a refusal naming it", ro, err)
		}
	}
}

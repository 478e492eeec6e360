package wheel

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/cockroachdb/pebble"
)

// encodeMetaV1 is the fixed-size layout earlier versions wrote.
func encodeMetaV1(m meta) []byte {
	b := make([]byte, metaLenV1)
	b[0] = byte(m.State)
	b[1] = byte(m.Loc)
	binary.BigEndian.PutUint32(b[2:6], m.TopicID)
	binary.BigEndian.PutUint64(b[6:14], uint64(m.DueMs))
	binary.BigEndian.PutUint64(b[14:22], uint64(m.Priority))
	binary.BigEndian.PutUint64(b[22:30], uint64(m.Second))
	binary.BigEndian.PutUint64(b[30:38], uint64(m.Offset))
	binary.BigEndian.PutUint64(b[38:46], m.Receipt)
	binary.BigEndian.PutUint64(b[46:54], uint64(m.LeaseExpMs))
	return b
}

var metaCases = []meta{
	{State: StateDelayed, Loc: locSegment, TopicID: 1, DueMs: t0 + 1800_000, Second: SecondOf(t0 + 1800_000), Offset: 123_456},
	{State: StateReserved, Loc: locSegment, TopicID: 7, DueMs: t0 + 31_000, Priority: -5, Second: SecondOf(t0 + 31_000),
		Offset: 1 << 40, Receipt: math.MaxUint64, LeaseExpMs: t0 + 30_000},
	{State: StateDelayed, Loc: locOverflow, TopicID: math.MaxUint32, DueMs: t0 + 24*3600_000, Priority: math.MinInt64},
	{State: StateReady, Loc: locReady, TopicID: 2, DueMs: 0, Priority: math.MaxInt64},
	{State: StateDead, Loc: locDead, TopicID: 3, DueMs: math.MaxInt64},
	// Not written by the store, but a meta must survive whatever it holds.
	{State: StateDelayed, Loc: locSegment, DueMs: -1, Second: math.MinInt64, Offset: -1, LeaseExpMs: math.MinInt64},
}

// TestMetaEncoding checks that every meta survives its encoding, that a
// delayed message's meta stays small, and that the fixed-size layout of
// earlier versions still decodes.
func TestMetaEncoding(t *testing.T) {
	for i, m := range metaCases {
		b := m.encode()
		if len(b) > metaMaxLen {
			t.Errorf("case %d: %d bytes, more than metaMaxLen %d", i, len(b), metaMaxLen)
		}
		got, err := decodeMeta(b)
		if err != nil || got != m {
			t.Errorf("case %d: decode(encode(%+v)) = %+v, %v", i, m, got, err)
		}
		got, err = decodeMeta(encodeMetaV1(m))
		if err != nil || got != m {
			t.Errorf("case %d: decode of the v1 layout = %+v, %v; want %+v", i, got, err, m)
		}
	}
	if n := len(metaCases[0].encode()); n > 20 {
		t.Errorf("a delayed message's meta takes %d bytes, want at most 20", n)
	}
}

func TestMetaDecodeRejects(t *testing.T) {
	good := metaCases[1].encode()
	for name, b := range map[string][]byte{
		"empty":         nil,
		"tag only":      {metaTagV2},
		"truncated":     good[:len(good)-1],
		"trailing byte": append(append([]byte(nil), good...), 0),
		"unknown tag":   append([]byte{0xC3}, good[1:]...),
		"short v1":      encodeMetaV1(metaCases[0])[:metaLenV1-1],
	} {
		if _, err := decodeMeta(b); !errors.Is(err, ErrCorruptCommand) {
			t.Errorf("%s (% x): err %v, want ErrCorruptCommand", name, b, err)
		}
	}
	// A topic id past 32 bits, with every other field well-formed.
	b := binary.AppendUvarint([]byte{metaTagV2, byte(StateDelayed), byte(locOverflow)}, 1<<32)
	for range 6 {
		b = append(b, 0)
	}
	if _, err := decodeMeta(b); !errors.Is(err, ErrCorruptCommand) {
		t.Errorf("topic id 1<<32: err %v, want ErrCorruptCommand", err)
	}
}

// TestMetaV1Index runs messages whose metas an earlier version wrote: the
// store reads them, moves them on, and rewrites them in the new encoding.
func TestMetaV1Index(t *testing.T) {
	k := newStoreKit(t, Options{})
	enq := k.schedule(t0,
		// In a slot file; with a key, so that it gets a meta (a new message
		// without one only has its entry's placement).
		NewMessage{Topic: "a", DeliverAtMs: t0 + 2500, Key: "s"},
		NewMessage{Topic: "a", DeliverAtMs: t0 + 3*3600_000},     // beyond the horizon
		NewMessage{Topic: "a", DeliverAtMs: t0 + 5000, Key: "k"}, // cancelled by key below
	)
	// Rewrite every meta in the v1 layout, as an index written before
	// the compact encoding holds them.
	b := k.s.db.NewBatch()
	for _, e := range enq {
		key := metaKey(e.ID)
		v, closer, err := k.s.db.Get(key)
		if err != nil {
			t.Fatal(err)
		}
		m, err := decodeMeta(v)
		closer.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Set(key, encodeMetaV1(m), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	if err := k.s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	k.reopen()
	for _, e := range enq {
		if v, _, _ := k.s.db.Get(metaKey(e.ID)); len(v) != metaLenV1 {
			t.Fatalf("meta of %s is %d bytes after the rewrite, want the v1 layout", e.ID, len(v))
		}
	}
	k.wantState(enq[0].ID, StateDelayed, t0+2500, 0)
	k.wantState(enq[1].ID, StateDelayed, t0+3*3600_000, 0)
	if r := k.apply(Cancel{Topic: "a", Key: "k"})[0]; r.Err != nil {
		t.Fatalf("cancel by key: %v", r.Err)
	}
	k.wantGone(enq[2].ID)
	k.apply(Expire{Before: SecondOf(t0+2500) + 1})
	k.wantState(enq[0].ID, StateReady, t0+2500, 0)
	sec := SecondOf(t0 + 3*3600_000)
	k.apply(Expire{Before: sec - Slots + 1})
	k.one(Promote{Before: sec + 1})
	k.wantState(enq[1].ID, StateDelayed, t0+3*3600_000, 0)
	for _, id := range []ID{enq[0].ID, enq[1].ID} {
		v, closer, err := k.s.db.Get(metaKey(id))
		if err != nil {
			t.Fatal(err)
		}
		if v[0] != metaTagV2 {
			t.Errorf("meta of %s still in the v1 layout after it moved", id)
		}
		closer.Close()
	}
	k.wantCounts(TopicCounts{Topic: "a", Delayed: 1, Ready: 1})
}

// FuzzDecodeMeta checks that no index value makes the meta decoder panic,
// and that whatever it accepts in the current encoding survives being
// encoded again.
func FuzzDecodeMeta(f *testing.F) {
	for _, m := range metaCases {
		f.Add(m.encode())
		f.Add(encodeMetaV1(m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			if !errors.Is(err, ErrCorruptCommand) {
				t.Fatalf("error %v is not ErrCorruptCommand", err)
			}
			return
		}
		if len(b) == metaLenV1 && b[0] != metaTagV2 {
			return
		}
		again, err := decodeMeta(m.encode())
		if err != nil || again != m {
			t.Fatalf("re-encoding %+v decodes to %+v, %v", m, again, err)
		}
	})
}

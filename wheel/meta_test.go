package wheel

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/delaywheel/delaywheel/wheel/command"
)

var metaCases = []meta{
	{State: StateDelayed, Loc: locSegment, TopicID: 1, DueMs: t0 + 1800_000, Second: SecondOf(t0 + 1800_000), Offset: 123_456},
	{State: StateReserved, Loc: locSegment, TopicID: 7, DueMs: t0 + 31_000, Priority: -5, Second: SecondOf(t0 + 31_000),
		Offset: 1 << 40, Receipt: math.MaxUint64, LeaseExpMs: t0 + 30_000, Keyed: true, Key: "order-42"},
	{State: StateDelayed, Loc: locOverflow, TopicID: math.MaxUint32, DueMs: t0 + 24*3600_000, Priority: math.MinInt64},
	{State: StateReady, Loc: locReady, TopicID: 2, DueMs: 0, Priority: math.MaxInt64},
	{State: StateDead, Loc: locDead, TopicID: 3, DueMs: math.MaxInt64},
	{State: StateReady, Loc: locReady, TopicID: 4, DueMs: t0, Keyed: true, Key: "schedule:standup:1700000000000"},
	// Not written by the store, but a meta must survive whatever it holds.
	{State: StateDelayed, Loc: locSegment, DueMs: -1, Second: math.MinInt64, Offset: -1, LeaseExpMs: math.MinInt64},
}

// TestMetaEncoding checks that every meta survives its encoding, that a
// delayed message's meta stays small.
func TestMetaEncoding(t *testing.T) {
	for i, m := range metaCases {
		b := m.encode()
		if max := metaMaxLen + binary.MaxVarintLen64 + len(m.Key); len(b) > max {
			t.Errorf("case %d: %d bytes, more than metaMaxLen and its key, %d", i, len(b), max)
		}
		got, err := decodeMeta(b)
		if err != nil || got != m {
			t.Errorf("case %d: decode(encode(%+v)) = %+v, %v", i, m, got, err)
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
		"gone mark":     {goneMark},
		"tag only":      {metaTag},
		"truncated":     good[:len(good)-1],
		"trailing byte": append(append([]byte(nil), good...), 0),
		"unknown tag":   append([]byte{0xC3}, good[1:]...),
		"keyed, no key": (&meta{State: StateReady, Loc: locReady, Keyed: true}).appendTo(nil),
	} {
		if _, err := decodeMeta(b); !errors.Is(err, command.ErrCorruptCommand) {
			t.Errorf("%s (% x): err %v, want ErrCorruptCommand", name, b, err)
		}
	}
	// A topic id past 32 bits, with every other field well-formed.
	b := binary.AppendUvarint([]byte{metaTag, byte(StateDelayed), byte(locOverflow)}, 1<<32)
	for range 6 {
		b = append(b, 0)
	}
	if _, err := decodeMeta(b); !errors.Is(err, command.ErrCorruptCommand) {
		t.Errorf("topic id 1<<32: err %v, want ErrCorruptCommand", err)
	}
}

// FuzzDecodeMeta checks that no index value makes the meta decoder panic,
// and that whatever it accepts survives being
// encoded again.
func FuzzDecodeMeta(f *testing.F) {
	for _, m := range metaCases {
		f.Add(m.encode())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			if !errors.Is(err, command.ErrCorruptCommand) {
				t.Fatalf("error %v is not ErrCorruptCommand", err)
			}
			return
		}
		again, err := decodeMeta(m.encode())
		if err != nil || again != m {
			t.Fatalf("re-encoding %+v decodes to %+v, %v", m, again, err)
		}
	})
}

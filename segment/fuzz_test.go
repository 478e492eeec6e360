package segment

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte{})
	f.Add(AppendRecord(nil, Record{Type: TypeMessage, Index: 1, Payload: []byte("hello")}))
	f.Add(AppendRecord(nil, Record{Type: TypeTombstone, Index: 1 << 60, Payload: nil}))
	f.Add(AppendRecord(nil, Record{Type: TypeLease, Index: 7, Payload: bytes.Repeat([]byte{0xff}, 64)}))
	two := AppendRecord(AppendRecord(nil, Record{Type: TypeMessage, Index: 2, Payload: []byte("a")}), Record{Type: TypeLease, Index: 3, Payload: []byte("b")})
	f.Add(two)
	f.Add(two[:len(two)-1])
	f.Add(rawFrame(1, 0, 1, []byte("x")))
	f.Add(rawFrame(MaxPayload+1, 1, 1, nil))
	f.Add(make([]byte, FrameHeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := append([]byte(nil), b...)
		r, n, err := DecodeRecord(b)
		if !bytes.Equal(in, b) {
			t.Fatal("DecodeRecord modified its input")
		}
		if err != nil {
			if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrChecksum) && !errors.Is(err, ErrBadFrame) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			if n != 0 {
				t.Fatalf("failed decode consumed %d bytes", n)
			}
			return
		}
		if n < FrameHeaderSize || n > len(b) || n != r.Size() {
			t.Fatalf("consumed %d of %d bytes for a record of size %d", n, len(b), r.Size())
		}
		if !r.Type.valid() || len(r.Payload) > MaxPayload {
			t.Fatalf("decoded an impossible record: type %d, %d bytes", r.Type, len(r.Payload))
		}
		if enc := AppendRecord(nil, r); !bytes.Equal(enc, b[:n]) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b[:n], enc)
		}
	})
}

func FuzzScan(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, HeaderSize))
	f.Add(AppendHeader(nil, 5)[:10])
	f.Add(AppendHeader(nil, 5))
	f.Add(segImage(5, testRecords(4)...))
	for _, name := range []string{"valid.seg", "torn_tail.seg", "torn_crc.seg", "torn_zeros.seg", "corrupt_mid.seg"} {
		if data, err := os.ReadFile(filepath.Join(goldenDir, name)); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := append([]byte(nil), data...)
		var entries []Entry
		valid, err := Scan("fuzz.seg", data, func(e Entry) error {
			entries = append(entries, e)
			return nil
		})
		if !bytes.Equal(in, data) {
			t.Fatal("Scan modified its input")
		}
		if valid < 0 || valid > int64(len(data)) {
			t.Fatalf("valid = %d for %d bytes", valid, len(data))
		}
		if err != nil {
			var ce *CorruptionError
			if !errors.As(err, &ce) {
				t.Fatalf("Scan error is not a *CorruptionError: %v", err)
			}
			if ce.Path != "fuzz.seg" || ce.Offset != valid {
				t.Fatalf("corruption at %s:%d, valid prefix %d", ce.Path, ce.Offset, valid)
			}
		}
		// Entries are in order, inside the valid prefix, and tile it.
		next := int64(HeaderSize)
		for i, e := range entries {
			if e.Offset != next {
				t.Fatalf("entry %d at %d, want %d", i, e.Offset, next)
			}
			next += int64(e.Size())
			if next > valid {
				t.Fatalf("entry %d ends at %d, past the valid prefix %d", i, next, valid)
			}
		}
		if err != nil {
			return
		}
		if valid != 0 && valid != next {
			t.Fatalf("valid prefix %d, records end at %d", valid, next)
		}
		// The valid prefix is what a rollback keeps: it must scan cleanly, to the
		// end, with the same records.
		var again int
		v2, err := Scan("fuzz.seg", data[:valid], func(e Entry) error {
			if again >= len(entries) {
				t.Fatalf("rescan of the valid prefix found more than %d entries", len(entries))
			}
			if e.Offset != entries[again].Offset || e.Type != entries[again].Type || e.Index != entries[again].Index || !bytes.Equal(e.Payload, entries[again].Payload) {
				t.Fatalf("rescan entry %d differs", again)
			}
			again++
			return nil
		})
		if err != nil || v2 != valid || again != len(entries) {
			t.Fatalf("rescan of the valid prefix = %d, %v with %d entries; want %d, nil with %d", v2, err, again, valid, len(entries))
		}
	})
}

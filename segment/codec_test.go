package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"strings"
	"testing"
)

func TestRecordTypeString(t *testing.T) {
	tests := []struct {
		t    RecordType
		want string
	}{
		{TypeMessage, "message"},
		{TypeTombstone, "tombstone"},
		{TypeLease, "lease"},
		{0, "type(0)"},
		{4, "type(4)"},
		{255, "type(255)"},
	}
	for _, tt := range tests {
		if got := tt.t.String(); got != tt.want {
			t.Errorf("RecordType(%d).String() = %q, want %q", uint8(tt.t), got, tt.want)
		}
	}
}

func TestFileName(t *testing.T) {
	tests := []struct {
		second int64
		name   string
	}{
		{0, "000000000000.seg"},
		{1, "000000000001.seg"},
		{1732245600, "001732245600.seg"},
		{999999999999, "999999999999.seg"},
		{1000000000000, "1000000000000.seg"}, // wider than the padding: still round trips
	}
	for _, tt := range tests {
		if got := FileName(tt.second); got != tt.name {
			t.Errorf("FileName(%d) = %q, want %q", tt.second, got, tt.name)
		}
		s, ok := ParseFileName(tt.name)
		if !ok || s != tt.second {
			t.Errorf("ParseFileName(%q) = %d, %v; want %d, true", tt.name, s, ok, tt.second)
		}
		if s, ok := ParseFileName("/some/dir/" + tt.name); !ok || s != tt.second {
			t.Errorf("ParseFileName with directory of %q = %d, %v; want %d, true", tt.name, s, ok, tt.second)
		}
	}
}

func TestFileNamesSortByTime(t *testing.T) {
	seconds := []int64{0, 9, 10, 99, 100, 1732245600, 1732245601, 999999999999}
	for i := 1; i < len(seconds); i++ {
		if a, b := FileName(seconds[i-1]), FileName(seconds[i]); a >= b {
			t.Errorf("FileName(%d) = %q does not sort before FileName(%d) = %q", seconds[i-1], a, seconds[i], b)
		}
	}
}

func TestParseFileNameRejects(t *testing.T) {
	for _, name := range []string{
		"",
		".seg",
		"001732245600",
		"001732245600.seg.tmp",
		"001732245600.SEG",
		"abc.seg",
		"-00000000005.seg",
		"1.5.seg",
		"99999999999999999999999.seg", // overflows int64
		"001732245600.log",
	} {
		if s, ok := ParseFileName(name); ok {
			t.Errorf("ParseFileName(%q) = %d, true; want false", name, s)
		}
	}
}

func TestHeaderLayout(t *testing.T) {
	const second = 1732245600
	h := AppendHeader(nil, second)
	if len(h) != HeaderSize {
		t.Fatalf("header is %d bytes, want %d", len(h), HeaderSize)
	}
	if got := string(h[0:4]); got != "DWSG" {
		t.Errorf("magic = %q, want DWSG", got)
	}
	if got := binary.LittleEndian.Uint16(h[4:6]); got != 1 {
		t.Errorf("version = %d, want 1", got)
	}
	if got := binary.LittleEndian.Uint16(h[6:8]); got != 0 {
		t.Errorf("flags = %d, want 0", got)
	}
	if got := int64(binary.LittleEndian.Uint64(h[8:16])); got != second {
		t.Errorf("second = %d, want %d", got, second)
	}
	want := crc32.Checksum(h[:16], crc32.MakeTable(crc32.Castagnoli))
	if got := binary.LittleEndian.Uint32(h[16:20]); got != want {
		t.Errorf("crc = %#08x, want CRC-32C of bytes 0..15 = %#08x", got, want)
	}

	// AppendHeader appends: an existing prefix is kept.
	prefix := []byte("xyz")
	if got := AppendHeader(prefix, second); !bytes.Equal(got[:3], prefix) || !bytes.Equal(got[3:], h) {
		t.Errorf("AppendHeader with prefix = %x, want %x%x", got, prefix, h)
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	for _, second := range []int64{0, 1, 7200, 1732245600, math.MaxInt64, -1, math.MinInt64} {
		got, err := DecodeHeader(AppendHeader(nil, second))
		if err != nil {
			t.Errorf("DecodeHeader(AppendHeader(%d)): %v", second, err)
			continue
		}
		if got != second {
			t.Errorf("DecodeHeader(AppendHeader(%d)) = %d", second, got)
		}
	}
	// Trailing bytes (the records) are ignored.
	b := AppendRecord(AppendHeader(nil, 42), Record{Type: TypeMessage, Index: 1, Payload: []byte("x")})
	if got, err := DecodeHeader(b); err != nil || got != 42 {
		t.Errorf("DecodeHeader of header+record = %d, %v; want 42, nil", got, err)
	}
}

// resealHeader recomputes the header checksum after a test edited bytes 0..15.
func resealHeader(h []byte) []byte {
	binary.LittleEndian.PutUint32(h[16:20], crc32.Checksum(h[:16], castagnoli))
	return h
}

func TestDecodeHeaderErrors(t *testing.T) {
	good := AppendHeader(nil, 1732245600)
	edit := func(f func(h []byte) []byte) []byte {
		return f(append([]byte(nil), good...))
	}
	tests := []struct {
		name    string
		b       []byte
		wantMsg string
	}{
		{"empty", nil, "0 bytes"},
		{"short", good[:HeaderSize-1], "19 bytes"},
		{"wrong magic", edit(func(h []byte) []byte { copy(h, "DWSX"); return resealHeader(h) }), "magic"},
		{"foreign file", []byte("PK\x03\x04 this is a zip archive"), "magic"},
		{"wrong version", edit(func(h []byte) []byte { binary.LittleEndian.PutUint16(h[4:6], 2); return resealHeader(h) }), "format version 2"},
		{"version zero", edit(func(h []byte) []byte { binary.LittleEndian.PutUint16(h[4:6], 0); return resealHeader(h) }), "format version 0"},
		{"bad crc", edit(func(h []byte) []byte { h[19] ^= 0x01; return h }), "checksum"},
		{"second changed without crc", edit(func(h []byte) []byte { h[8] ^= 0x01; return h }), "checksum"},
		{"version changed without crc", edit(func(h []byte) []byte { h[4] = 2; return h }), "checksum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := DecodeHeader(tt.b)
			if !errors.Is(err, ErrBadHeader) {
				t.Fatalf("DecodeHeader = %d, %v; want ErrBadHeader", s, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not mention %q", err, tt.wantMsg)
			}
		})
	}
}

func TestRecordLayout(t *testing.T) {
	r := Record{Type: TypeLease, Index: 0x0102030405060708, Payload: []byte("payload")}
	b := AppendRecord(nil, r)
	if len(b) != r.Size() || r.Size() != FrameHeaderSize+7 {
		t.Fatalf("encoded %d bytes, Size() = %d, want %d", len(b), r.Size(), FrameHeaderSize+7)
	}
	if got := binary.LittleEndian.Uint32(b[0:4]); got != 7 {
		t.Errorf("length = %d, want 7", got)
	}
	if got, want := binary.LittleEndian.Uint32(b[4:8]), crc32.Checksum(b[8:], crc32.MakeTable(crc32.Castagnoli)); got != want {
		t.Errorf("crc = %#08x, want CRC-32C of type, index and payload = %#08x", got, want)
	}
	if b[8] != 3 {
		t.Errorf("type byte = %d, want 3", b[8])
	}
	if got := binary.LittleEndian.Uint64(b[9:17]); got != r.Index {
		t.Errorf("index = %#x, want %#x", got, r.Index)
	}
	if got := string(b[17:]); got != "payload" {
		t.Errorf("payload = %q", got)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte{0xA5, 0x00, 0xFF}, 100000)
	recs := []Record{
		{Type: TypeMessage, Index: 1, Payload: []byte("hello")},
		{Type: TypeMessage, Index: 0, Payload: nil},
		{Type: TypeTombstone, Index: 2, Payload: []byte{0, 0, 0, 0}},
		{Type: TypeLease, Index: math.MaxUint64, Payload: []byte{0xff}},
		{Type: TypeMessage, Index: 1 << 40, Payload: big},
		{Type: TypeTombstone, Index: 7, Payload: []byte{}},
		{Type: TypeLease, Index: 8, Payload: []byte("\x00\x01\x02 binary \xfe\xff")},
	}
	for _, r := range recs {
		t.Run(r.Type.String(), func(t *testing.T) {
			b := AppendRecord(nil, r)
			got, n, err := DecodeRecord(b)
			if err != nil {
				t.Fatalf("DecodeRecord: %v", err)
			}
			if n != len(b) || n != r.Size() {
				t.Errorf("consumed %d bytes, encoded %d, Size() %d", n, len(b), r.Size())
			}
			if got.Type != r.Type || got.Index != r.Index || !bytes.Equal(got.Payload, r.Payload) {
				t.Errorf("decoded {%v %d %d bytes}, want {%v %d %d bytes}", got.Type, got.Index, len(got.Payload), r.Type, r.Index, len(r.Payload))
			}
		})
	}

	// Concatenated records decode one after another, each consuming exactly
	// its own frame.
	var all []byte
	for _, r := range recs {
		all = AppendRecord(all, r)
	}
	rest := all
	for i, r := range recs {
		got, n, err := DecodeRecord(rest)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if got.Type != r.Type || got.Index != r.Index || !bytes.Equal(got.Payload, r.Payload) {
			t.Fatalf("record %d decoded wrongly", i)
		}
		rest = rest[n:]
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes left after decoding every record", len(rest))
	}
}

func TestDecodeRecordPayloadAliasesInput(t *testing.T) {
	b := AppendRecord(nil, Record{Type: TypeMessage, Index: 1, Payload: []byte("abc")})
	b = AppendRecord(b, Record{Type: TypeMessage, Index: 2, Payload: []byte("def")})
	r, n, err := DecodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if &r.Payload[0] != &b[FrameHeaderSize] {
		t.Error("payload does not alias the input")
	}
	if cap(r.Payload) != len(r.Payload) {
		t.Errorf("payload cap %d > len %d: appending to it would overwrite the next frame", cap(r.Payload), len(r.Payload))
	}
	_ = append(r.Payload, 'X')
	if _, _, err := DecodeRecord(b[n:]); err != nil {
		t.Errorf("next record damaged by appending to a payload: %v", err)
	}
}

// rawFrame builds a frame with an arbitrary length field, type and a valid
// checksum over whatever follows the checksum field.
func rawFrame(length uint32, typ byte, index uint64, payload []byte) []byte {
	b := make([]byte, FrameHeaderSize, FrameHeaderSize+len(payload))
	binary.LittleEndian.PutUint32(b[0:4], length)
	b[8] = typ
	binary.LittleEndian.PutUint64(b[9:17], index)
	b = append(b, payload...)
	binary.LittleEndian.PutUint32(b[4:8], crc32.Checksum(b[8:], castagnoli))
	return b
}

func TestDecodeRecordErrors(t *testing.T) {
	good := AppendRecord(nil, Record{Type: TypeMessage, Index: 99, Payload: []byte("hello, world")})
	flip := func(i int) []byte {
		b := append([]byte(nil), good...)
		b[i] ^= 0x40
		return b
	}
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"nil", nil, ErrTruncated},
		{"one byte", good[:1], ErrTruncated},
		{"partial frame header", good[:FrameHeaderSize-1], ErrTruncated},
		{"header only", good[:FrameHeaderSize], ErrTruncated},
		{"partial payload", good[:len(good)-1], ErrTruncated},
		{"length over the input", rawFrame(100, 1, 1, []byte("short")), ErrTruncated},
		{"length over MaxPayload", rawFrame(MaxPayload+1, 1, 1, nil), ErrBadFrame},
		{"length max uint32", rawFrame(math.MaxUint32, 1, 1, nil), ErrBadFrame},
		{"flipped crc", flip(5), ErrChecksum},
		{"flipped type", flip(8), ErrChecksum},
		{"flipped index", flip(12), ErrChecksum},
		{"flipped payload", flip(len(good) - 1), ErrChecksum},
		{"shorter length", append(rawFrame(3, 1, 1, []byte("abcdef"))[:4], good[4:]...), ErrChecksum},
		{"type zero", rawFrame(2, 0, 1, []byte("ab")), ErrBadFrame},
		{"type four", rawFrame(2, 4, 1, []byte("ab")), ErrBadFrame},
		{"type 255", rawFrame(0, 255, 1, nil), ErrBadFrame},
		{"all zero frame", make([]byte, FrameHeaderSize+8), ErrChecksum},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, n, err := DecodeRecord(tt.b)
			if !errors.Is(err, tt.want) {
				t.Fatalf("DecodeRecord = %+v, %d, %v; want %v", r, n, err, tt.want)
			}
			for _, other := range []error{ErrTruncated, ErrChecksum, ErrBadFrame, ErrBadHeader} {
				if other != tt.want && errors.Is(err, other) {
					t.Errorf("error %v also matches %v", err, other)
				}
			}
			if n != 0 || r.Payload != nil || r.Type != 0 || r.Index != 0 {
				t.Errorf("failed decode returned %+v, %d; want zero values", r, n)
			}
		})
	}
}

func TestDecodeRecordMaxPayloadAccepted(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 64 MiB")
	}
	r := Record{Type: TypeMessage, Index: 5, Payload: make([]byte, MaxPayload)}
	b := AppendRecord(nil, r)
	got, n, err := DecodeRecord(b)
	if err != nil {
		t.Fatalf("DecodeRecord of a MaxPayload record: %v", err)
	}
	if n != len(b) || len(got.Payload) != MaxPayload {
		t.Errorf("consumed %d of %d, payload %d bytes", n, len(b), len(got.Payload))
	}
}

func TestCorruptionError(t *testing.T) {
	var err error = &CorruptionError{Path: "/d/000000000042.seg", Offset: 1234, Err: ErrChecksum}
	if got, want := err.Error(), "segment /d/000000000042.seg: corrupt at offset 1234: segment: checksum mismatch"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, ErrChecksum) {
		t.Error("errors.Is(CorruptionError{ErrChecksum}, ErrChecksum) = false")
	}
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Offset != 1234 {
		t.Errorf("errors.As = %v, %+v", errors.As(err, &ce), ce)
	}
}

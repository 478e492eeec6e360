package segment

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Regenerate the golden files with:
//
//	go test ./segment -run Golden -update
var update = flag.Bool("update", false, "regenerate the golden files in testdata/segment")

// goldenDir holds the golden segment images, shared with other packages'
// tests at the repository root.
const goldenDir = "../testdata/segment"

// goldenSecond is the second every golden file holds.
const goldenSecond = 1732245600

// goldenRecords are the records of valid.seg, in order. Every torn or
// corrupt golden file is derived from them.
func goldenRecords() []Record {
	long := make([]byte, 300)
	for i := range long {
		long[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[i%36]
	}
	return []Record{
		{Type: TypeMessage, Index: 101, Payload: []byte("hello world")},
		{Type: TypeTombstone, Index: 102, Payload: []byte{1, 0, 0, 0, 0, 0, 0, 0, 0x65, 0, 0, 0, 0}},
		{Type: TypeLease, Index: 103, Payload: []byte("lease of message 101/0")},
		{Type: TypeMessage, Index: 104, Payload: nil},
		{Type: TypeMessage, Index: 105, Payload: long},
		{Type: TypeLease, Index: 106, Payload: []byte("\x00\x01binary\xfe\xff")},
	}
}

// goldenOffsets returns the offset of each record of valid.seg and the
// length of the file.
func goldenOffsets() (offs []int64, end int64) {
	end = HeaderSize
	for _, r := range goldenRecords() {
		offs = append(offs, end)
		end += int64(r.Size())
	}
	return offs, end
}

// goldenCorruptRecord is the record of corrupt_mid.seg with a flipped byte.
const goldenCorruptRecord = 2

// goldenTornRecord is the record appended, damaged, to the torn files.
var goldenTornRecord = Record{Type: TypeMessage, Index: 107, Payload: []byte("this record was being written when the power went")}

// goldenImages builds every golden file deterministically.
func goldenImages() map[string][]byte {
	valid := AppendHeader(nil, goldenSecond)
	for _, r := range goldenRecords() {
		valid = AppendRecord(valid, r)
	}
	clone := func() []byte { return append([]byte(nil), valid...) }
	torn := AppendRecord(nil, goldenTornRecord)

	// A partial last frame: its header and part of its payload.
	tornTail := append(clone(), torn[:FrameHeaderSize+10]...)

	// A whole last frame whose payload did not all reach the disk.
	tornCRC := append(clone(), torn...)
	tornCRC[len(tornCRC)-1] ^= 0xFF

	// A tail of zeros: space allocated but never written.
	tornZeros := append(clone(), make([]byte, 512)...)

	// A flipped payload byte in a record followed by more records.
	offs, _ := goldenOffsets()
	corrupt := clone()
	corrupt[offs[goldenCorruptRecord]+FrameHeaderSize+3] ^= 0x20

	return map[string][]byte{
		"valid.seg":       valid,
		"torn_tail.seg":   tornTail,
		"torn_crc.seg":    tornCRC,
		"torn_zeros.seg":  tornZeros,
		"corrupt_mid.seg": corrupt,
	}
}

// dumpSegment renders the decoded records of a segment file as text.
func dumpSegment(name string, second int64, entries []Entry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s: decoded by segment.ReadFile; regenerate with go test ./segment -run Golden -update\n", name)
	fmt.Fprintf(&b, "header second=%d records=%d\n", second, len(entries))
	for _, e := range entries {
		fmt.Fprintf(&b, "record offset=%d size=%d type=%s index=%d len=%d payload=%q\n",
			e.Offset, e.Size(), e.Type, e.Index, len(e.Payload), e.Payload)
	}
	return b.String()
}

var regenerate sync.Once

// goldenFile returns the path of a checked-in golden file, regenerating all
// of them first when -update is set.
func goldenFile(t *testing.T, name string) string {
	t.Helper()
	regenerate.Do(func() {
		if !*update {
			return
		}
		if err := writeGoldenFiles(); err != nil {
			t.Fatalf("regenerate golden files: %v", err)
		}
	})
	return filepath.Join(goldenDir, name)
}

func writeGoldenFiles() error {
	if err := os.MkdirAll(goldenDir, 0o755); err != nil {
		return err
	}
	for name, data := range goldenImages() {
		if err := os.WriteFile(filepath.Join(goldenDir, name), data, 0o644); err != nil {
			return err
		}
	}
	valid := filepath.Join(goldenDir, "valid.seg")
	second, entries, err := ReadFile(valid)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(goldenDir, "valid.txt"), []byte(dumpSegment("valid.seg", second, entries)), 0o644)
}

func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(goldenFile(t, name))
	if err != nil {
		t.Fatalf("read golden file (regenerate with -update): %v", err)
	}
	return data
}

// copyGolden copies a golden file into a fresh directory under the name of
// the golden second, so that a test may change it.
func copyGolden(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName(goldenSecond))
	if err := os.WriteFile(path, readGolden(t, name), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGoldenFilesUpToDate checks that the encoder still writes exactly the
// checked-in bytes: a change of the on-disk format must be deliberate.
func TestGoldenFilesUpToDate(t *testing.T) {
	for name, want := range goldenImages() {
		if got := readGolden(t, name); !bytes.Equal(got, want) {
			t.Errorf("%s differs from what the encoder writes now (%d bytes checked in, %d generated); if the format change is deliberate, bump FormatVersion and run with -update", name, len(got), len(want))
		}
	}
}

func TestGoldenDump(t *testing.T) {
	second, entries, err := ReadFile(goldenFile(t, "valid.seg"))
	if err != nil {
		t.Fatalf("ReadFile(valid.seg): %v", err)
	}
	got := dumpSegment("valid.seg", second, entries)
	want := string(readGolden(t, "valid.txt"))
	if got != want {
		t.Errorf("decoded valid.seg differs from valid.txt\n--- got\n%s--- want\n%s", got, want)
	}
}

func TestGoldenValid(t *testing.T) {
	path := goldenFile(t, "valid.seg")
	data := readGolden(t, "valid.seg")
	want := goldenRecords()
	offs, end := goldenOffsets()
	if int64(len(data)) != end {
		t.Fatalf("valid.seg is %d bytes, want %d", len(data), end)
	}

	var got []Entry
	valid, err := Scan(path, data, func(e Entry) error { got = append(got, e); return nil })
	if err != nil || valid != end {
		t.Fatalf("Scan = %d, %v; want %d, nil", valid, err, end)
	}
	checkEntries(t, "Scan", got, want, offs)

	second, entries, err := ReadFile(path)
	if err != nil {
		t.Fatalf("ReadFile: %v", err)
	}
	if second != goldenSecond {
		t.Errorf("ReadFile second = %d, want %d", second, goldenSecond)
	}
	checkEntries(t, "ReadFile", entries, want, offs)

	for i, off := range offs {
		r, err := ReadAt(path, off)
		if err != nil {
			t.Fatalf("ReadAt(%d): %v", off, err)
		}
		checkRecord(t, fmt.Sprintf("ReadAt(%d)", off), r, want[i])
	}

}

func TestGoldenTorn(t *testing.T) {
	want := goldenRecords()
	offs, end := goldenOffsets()
	tests := []struct {
		file      string
		truncated int64
	}{
		{"torn_tail.seg", FrameHeaderSize + 10},
		{"torn_crc.seg", int64(goldenTornRecord.Size())},
		{"torn_zeros.seg", 512},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data := readGolden(t, tt.file)
			if int64(len(data)) != end+tt.truncated {
				t.Fatalf("%s is %d bytes, want %d", tt.file, len(data), end+tt.truncated)
			}
			path := copyGolden(t, tt.file)

			// Scan stops at the torn tail without an error.
			var got []Entry
			valid, err := Scan(path, data, func(e Entry) error { got = append(got, e); return nil })
			if err != nil || valid != end {
				t.Fatalf("Scan = %d, %v; want %d, nil", valid, err, end)
			}
			checkEntries(t, "Scan", got, want, offs)

			// ReadFile does not accept a torn tail: recovery first rolls
			// the file back to the length the index recorded.
			_, _, err = ReadFile(path)
			var ce *CorruptionError
			if !errors.As(err, &ce) || ce.Offset != end || ce.Path != path || !errors.Is(err, ErrTruncated) {
				t.Fatalf("ReadFile before the rollback = %v; want *CorruptionError at %d wrapping ErrTruncated", err, end)
			}

			c, err := NewCache(filepath.Dir(path), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.Truncate(goldenSecond, valid); err != nil {
				t.Fatalf("Truncate to the valid prefix: %v", err)
			}
			assertFileBytes(t, path, data[:end])

			second, entries, err := ReadFile(path)
			if err != nil {
				t.Fatalf("ReadFile after the rollback: %v", err)
			}
			if second != goldenSecond {
				t.Errorf("second = %d, want %d", second, goldenSecond)
			}
			checkEntries(t, "ReadFile after the rollback", entries, want, offs)

			// Appending after the rollback continues at its end.
			extra := Record{Type: TypeMessage, Index: 200, Payload: []byte("after the rollback")}
			off, newEnd, err := c.Append(goldenSecond, []Record{extra})
			if err != nil || off != end || newEnd != end+int64(extra.Size()) {
				t.Fatalf("Append after the rollback = %d, %d, %v; want %d, %d, nil", off, newEnd, err, end, end+int64(extra.Size()))
			}
			_, entries, err = ReadFile(path)
			if err != nil {
				t.Fatalf("ReadFile after append: %v", err)
			}
			checkEntries(t, "ReadFile after append", entries, append(want, extra), append(offs, end))
		})
	}
}

func TestGoldenCorruptMid(t *testing.T) {
	data := readGolden(t, "corrupt_mid.seg")
	path := copyGolden(t, "corrupt_mid.seg")
	want := goldenRecords()
	offs, _ := goldenOffsets()
	badOff := offs[goldenCorruptRecord]

	checkCorrupt := func(what string, err error) {
		t.Helper()
		var ce *CorruptionError
		if !errors.As(err, &ce) {
			t.Fatalf("%s = %v; want *CorruptionError", what, err)
		}
		if ce.Path != path || ce.Offset != badOff {
			t.Errorf("%s: corruption at %s:%d, want %s:%d", what, ce.Path, ce.Offset, path, badOff)
		}
		if !errors.Is(err, ErrChecksum) {
			t.Errorf("%s: %v does not wrap ErrChecksum", what, err)
		}
		if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, fmt.Sprint(badOff)) {
			t.Errorf("%s: message %q does not name the path and offset", what, msg)
		}
	}

	var got []Entry
	valid, err := Scan(path, data, func(e Entry) error { got = append(got, e); return nil })
	checkCorrupt("Scan", err)
	if valid != badOff {
		t.Errorf("Scan valid = %d, want %d", valid, badOff)
	}
	// The records before the damage were delivered, none after it.
	checkEntries(t, "Scan", got, want[:goldenCorruptRecord], offs[:goldenCorruptRecord])

	_, entries, err := ReadFile(path)
	checkCorrupt("ReadFile", err)
	if entries != nil {
		t.Errorf("ReadFile returned %d entries with an error", len(entries))
	}

	_, err = ReadAt(path, badOff)
	checkCorrupt("ReadAt", err)

	// Reading never changes the file.
	assertFileBytes(t, path, data)

	// Records after the damage are still intact and readable by offset.
	for i := goldenCorruptRecord + 1; i < len(want); i++ {
		r, err := ReadAt(path, offs[i])
		if err != nil {
			t.Fatalf("ReadAt(%d) after the damaged record: %v", offs[i], err)
		}
		checkRecord(t, fmt.Sprintf("ReadAt(%d)", offs[i]), r, want[i])
	}
}

func checkRecord(t *testing.T, what string, got, want Record) {
	t.Helper()
	if got.Type != want.Type || got.Index != want.Index || !bytes.Equal(got.Payload, want.Payload) {
		t.Errorf("%s = {%v %d %q}, want {%v %d %q}", what, got.Type, got.Index, got.Payload, want.Type, want.Index, want.Payload)
	}
}

func checkEntries(t *testing.T, what string, got []Entry, want []Record, offs []int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d entries, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i].Offset != offs[i] {
			t.Errorf("%s: entry %d at offset %d, want %d", what, i, got[i].Offset, offs[i])
		}
		checkRecord(t, fmt.Sprintf("%s: entry %d", what, i), got[i].Record, want[i])
	}
}

func assertFileBytes(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: contents changed: %d bytes, want these %d bytes", path, len(got), len(want))
	}
}

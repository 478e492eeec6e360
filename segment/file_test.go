package segment

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
)

// segImage builds a segment file image for second holding recs.
func segImage(second int64, recs ...Record) []byte {
	b := AppendHeader(nil, second)
	for _, r := range recs {
		b = AppendRecord(b, r)
	}
	return b
}

func testRecords(n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{
			Type:    RecordType(1 + i%3),
			Index:   uint64(1000 + i),
			Payload: bytes.Repeat([]byte{byte('a' + i%26)}, i*3),
		}
	}
	return recs
}

func writeSegFile(t *testing.T, dir string, second int64, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, FileName(second))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestScanEveryTornCut(t *testing.T) {
	// Cutting a valid image anywhere inside its last record is a torn tail:
	// Scan keeps every earlier record and reports the end of the last whole
	// one.
	recs := testRecords(4)
	full := segImage(7, recs...)
	lastOff := int64(len(full) - recs[3].Size())
	for cut := lastOff; cut < int64(len(full)); cut++ {
		var n int
		valid, err := Scan("x.seg", full[:cut], func(Entry) error { n++; return nil })
		if err != nil || valid != lastOff || n != 3 {
			t.Errorf("cut at %d: Scan = %d, %v with %d records; want %d, nil with 3", cut, valid, err, n, lastOff)
		}
	}
	valid, err := Scan("x.seg", full, nil)
	if err != nil || valid != int64(len(full)) {
		t.Errorf("Scan(full) = %d, %v; want %d, nil", valid, err, len(full))
	}
}

func TestScanTornChecksumOnlyAtTail(t *testing.T) {
	recs := testRecords(3)
	full := segImage(7, recs...)
	offs := []int64{HeaderSize}
	for _, r := range recs[:2] {
		offs = append(offs, offs[len(offs)-1]+int64(r.Size()))
	}
	for i, off := range offs {
		b := append([]byte(nil), full...)
		b[off+4] ^= 0x01 // the frame's checksum
		valid, err := Scan("x.seg", b, nil)
		if i == len(offs)-1 {
			// The last frame: a torn tail.
			if err != nil || valid != off {
				t.Errorf("bad checksum in last record: Scan = %d, %v; want %d, nil", valid, err, off)
			}
			continue
		}
		var ce *CorruptionError
		if !errors.As(err, &ce) || ce.Offset != off || ce.Path != "x.seg" || !errors.Is(err, ErrChecksum) {
			t.Errorf("bad checksum in record %d: Scan = %d, %v; want *CorruptionError at %d wrapping ErrChecksum", i, valid, err, off)
		}
	}
}

func TestScanCorruption(t *testing.T) {
	recs := testRecords(3)
	full := segImage(7, recs...)
	second := int64(HeaderSize + recs[0].Size())
	tests := []struct {
		name string
		data []byte
		off  int64
		want error
	}{
		{
			name: "bad type in a well-formed last frame",
			data: append(segImage(7, recs[0]), rawFrame(1, 9, 1, []byte("x"))...),
			off:  second,
			want: ErrBadFrame,
		},
		{
			name: "impossible length at the tail",
			data: append(segImage(7, recs[0]), rawFrame(MaxPayload+1, 1, 1, nil)...),
			off:  second,
			want: ErrBadFrame,
		},
		{
			name: "garbage after the records",
			data: append(append([]byte(nil), full...), "garbage after the last record"...),
			off:  int64(len(full)),
			want: ErrBadFrame, // "garb" read as a length is over MaxPayload
		},
		{
			name: "zeroed frame before more records",
			data: func() []byte {
				b := append([]byte(nil), full...)
				clear(b[second : second+int64(recs[1].Size())])
				return b
			}(),
			off:  second,
			want: ErrChecksum,
		},
		{
			name: "foreign header",
			data: append([]byte("NOTASEGMENTFILEHEADER"), full[HeaderSize:]...),
			off:  0,
			want: ErrBadHeader,
		},
		{
			name: "zero header before records",
			data: append(make([]byte, HeaderSize), full[HeaderSize:]...),
			off:  0,
			want: ErrBadHeader,
		},
		{
			name: "short foreign file",
			data: []byte("hello"),
			off:  0,
			want: ErrBadHeader,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Scan("dir/x.seg", tt.data, nil)
			var ce *CorruptionError
			if !errors.As(err, &ce) {
				t.Fatalf("Scan = %v; want *CorruptionError", err)
			}
			if ce.Path != "dir/x.seg" || ce.Offset != tt.off {
				t.Errorf("corruption at %s:%d, want dir/x.seg:%d", ce.Path, ce.Offset, tt.off)
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("error %v does not wrap %v", err, tt.want)
			}
		})
	}
}

func TestScanZeroFiles(t *testing.T) {
	// A file whose header never reached the disk is empty or zeros: no
	// records, nothing valid, no error.
	for _, n := range []int{0, 1, HeaderSize - 1, HeaderSize, HeaderSize + 1, 4096} {
		valid, err := Scan("x.seg", make([]byte, n), func(Entry) error {
			t.Fatal("record in an all-zero file")
			return nil
		})
		if err != nil || valid != 0 {
			t.Errorf("Scan(%d zeros) = %d, %v; want 0, nil", n, valid, err)
		}
	}
}

func TestScanCallbackError(t *testing.T) {
	recs := testRecords(3)
	full := segImage(7, recs...)
	stop := errors.New("stop")
	var seen int
	valid, err := Scan("x.seg", full, func(e Entry) error {
		seen++
		if seen == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("Scan = %v; want the callback's error", err)
	}
	if want := int64(HeaderSize + recs[0].Size()); valid != want {
		t.Errorf("valid = %d, want %d (the offset of the record the callback refused)", valid, want)
	}
	var ce *CorruptionError
	if errors.As(err, &ce) {
		t.Errorf("callback error reported as corruption: %v", err)
	}
}

func TestScanEmptySegment(t *testing.T) {
	valid, err := Scan("x.seg", segImage(7), func(Entry) error { t.Fatal("record in an empty segment"); return nil })
	if err != nil || valid != HeaderSize {
		t.Errorf("Scan(header only) = %d, %v; want %d, nil", valid, err, HeaderSize)
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	recs := testRecords(5)
	path := writeSegFile(t, dir, 99, segImage(99, recs...))
	second, entries, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if second != 99 {
		t.Errorf("second = %d, want 99", second)
	}
	off := int64(HeaderSize)
	var offs []int64
	for _, r := range recs {
		offs = append(offs, off)
		off += int64(r.Size())
	}
	checkEntries(t, "ReadFile", entries, recs, offs)

	// Header only: no records, no error.
	empty := writeSegFile(t, dir, 100, segImage(100))
	if second, entries, err := ReadFile(empty); err != nil || second != 100 || len(entries) != 0 {
		t.Errorf("ReadFile(header only) = %d, %d entries, %v; want 100, 0, nil", second, len(entries), err)
	}

	// A missing file is an I/O error, not corruption.
	_, _, err = ReadFile(filepath.Join(dir, FileName(1)))
	var ce *CorruptionError
	if !errors.Is(err, os.ErrNotExist) || errors.As(err, &ce) {
		t.Errorf("ReadFile(missing) = %v; want a not-exist error", err)
	}
}

// ReadPrefixFS reads the records of a file's first length bytes only: what
// was appended later is not read, a prefix that ends inside a record or
// past the end of the file is an error, and so is a missing file.
func TestReadPrefix(t *testing.T) {
	dir := t.TempDir()
	recs := testRecords(5)
	img := segImage(99, recs...)
	path := writeSegFile(t, dir, 99, img)
	three := int64(len(segImage(99, recs[:3]...)))
	entries, err := ReadPrefixFS(vfs.Default, path, three)
	if err != nil {
		t.Fatal(err)
	}
	off := int64(HeaderSize)
	var offs []int64
	for _, r := range recs[:3] {
		offs = append(offs, off)
		off += int64(r.Size())
	}
	checkEntries(t, "ReadPrefixFS", entries, recs[:3], offs)
	if entries, err := ReadPrefixFS(vfs.Default, path, HeaderSize); err != nil || len(entries) != 0 {
		t.Errorf("ReadPrefixFS(header only) = %d entries, %v; want 0, nil", len(entries), err)
	}
	if entries, err := ReadPrefixFS(vfs.Default, path, int64(len(img))); err != nil || len(entries) != 5 {
		t.Errorf("ReadPrefixFS(whole file) = %d entries, %v; want 5, nil", len(entries), err)
	}
	var ce *CorruptionError
	for _, n := range []int64{three - 1, int64(len(img)) + 1} {
		if _, err := ReadPrefixFS(vfs.Default, path, n); !errors.As(err, &ce) || !errors.Is(err, ErrTruncated) {
			t.Errorf("ReadPrefixFS(%d of %d bytes) = %v; want a truncation", n, len(img), err)
		}
	}
	if _, err := ReadPrefixFS(vfs.Default, filepath.Join(dir, FileName(1)), three); !errors.Is(err, os.ErrNotExist) || errors.As(err, &ce) {
		t.Errorf("ReadPrefixFS(missing) = %v; want a not-exist error", err)
	}
}

func TestReadAtErrors(t *testing.T) {
	dir := t.TempDir()
	recs := testRecords(3)
	data := segImage(5, recs...)
	path := writeSegFile(t, dir, 5, data)

	tests := []struct {
		name string
		off  int64
		want error
	}{
		{"at the end", int64(len(data)), ErrTruncated},
		{"past the end", int64(len(data)) + 100, ErrTruncated},
		{"inside the last frame", int64(len(data)) - 3, ErrTruncated},
		{"the header", 0, ErrBadFrame}, // "DWSG" read as a length is over MaxPayload
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadAt(path, tt.off)
			var ce *CorruptionError
			if !errors.As(err, &ce) || ce.Path != path || ce.Offset != tt.off {
				t.Fatalf("ReadAt(%d) = %v; want *CorruptionError naming %s at %d", tt.off, err, path, tt.off)
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("ReadAt(%d) = %v; want it to wrap %v", tt.off, err, tt.want)
			}
		})
	}

	_, err := ReadAt(filepath.Join(dir, FileName(6)), HeaderSize)
	var ce *CorruptionError
	if !errors.Is(err, os.ErrNotExist) || errors.As(err, &ce) {
		t.Errorf("ReadAt(missing) = %v; want a not-exist error", err)
	}
}

// countingReaderAt counts the reads made of an in-memory image.
type countingReaderAt struct {
	data  []byte
	reads int
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	c.reads++
	return bytes.NewReader(c.data).ReadAt(p, off)
}

func TestReadRecordAtReadAhead(t *testing.T) {
	// Frames around the read-ahead: shorter (one read), exactly as long
	// (one read), longer (a second read for the rest), each also as the
	// file's last record, where the first read stops at the end of the file.
	for _, frame := range []int{FrameHeaderSize, recordReadAhead - 1, recordReadAhead, recordReadAhead + 1, 3 * recordReadAhead} {
		rec := Record{Type: TypeMessage, Index: uint64(frame), Payload: bytes.Repeat([]byte{'p'}, frame-FrameHeaderSize)}
		wantReads := 1
		if frame > recordReadAhead {
			wantReads = 2
		}
		for _, last := range []bool{false, true} {
			recs := []Record{rec}
			if !last {
				recs = append(recs, testRecords(40)...)
			}
			r := &countingReaderAt{data: segImage(3, recs...)}
			got, err := readRecordAt(r, "seg", HeaderSize)
			if err != nil {
				t.Fatalf("frame of %d bytes, last %v: %v", frame, last, err)
			}
			checkRecord(t, fmt.Sprintf("frame of %d bytes, last %v", frame, last), got, rec)
			if r.reads != wantReads {
				t.Errorf("frame of %d bytes, last %v: %d reads, want %d", frame, last, r.reads, wantReads)
			}
		}
		// Cut inside the frame: a truncation, whichever read finds it.
		for _, cut := range []int{1, frame - FrameHeaderSize/2} {
			img := segImage(3, rec)
			r := &countingReaderAt{data: img[:len(img)-cut]}
			if _, err := readRecordAt(r, "seg", HeaderSize); !errors.Is(err, ErrTruncated) {
				t.Errorf("frame of %d bytes cut by %d: %v, want a truncation", frame, cut, err)
			}
		}
	}
}

package segment

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/vfs"
)

// Entry is a decoded record and its offset in the file.
type Entry struct {
	Offset int64
	Record
}

// Scan decodes the segment image data (a whole file) and calls fn for each
// record in order. It returns the length of the valid prefix. A torn tail
// stops the scan and is reported only through the returned length being
// shorter than data; corruption before the tail returns a *CorruptionError
// naming path and the offset. Payloads passed to fn alias data.
func Scan(path string, data []byte, fn func(Entry) error) (valid int64, err error) {
	if len(data) < HeaderSize {
		if allZero(data) || headerPrefix(data) {
			return 0, nil // created but its header never (wholly) reached the disk
		}
		return 0, &CorruptionError{Path: path, Offset: 0, Err: fmt.Errorf("%w: %d bytes", ErrBadHeader, len(data))}
	}
	if _, err := DecodeHeader(data); err != nil {
		if allZero(data) {
			return 0, nil
		}
		return 0, &CorruptionError{Path: path, Offset: 0, Err: err}
	}
	off := HeaderSize
	for off < len(data) {
		rec, n, err := DecodeRecord(data[off:])
		if err != nil {
			if tornTail(data[off:], err) {
				return int64(off), nil
			}
			return int64(off), &CorruptionError{Path: path, Offset: int64(off), Err: err}
		}
		if fn != nil {
			if err := fn(Entry{Offset: int64(off), Record: rec}); err != nil {
				return int64(off), err
			}
		}
		off += n
	}
	return int64(off), nil
}

// tornTail reports whether a decode failure at the start of rest is the
// damage a crash in the middle of an append leaves behind.
func tornTail(rest []byte, err error) bool {
	if errors.Is(err, ErrTruncated) {
		return true
	}
	if allZero(rest) {
		return true
	}
	if errors.Is(err, ErrChecksum) && len(rest) >= 4 {
		// A whole frame whose checksum fails is torn only if it is the last one.
		n := int(uint32(rest[0]) | uint32(rest[1])<<8 | uint32(rest[2])<<16 | uint32(rest[3])<<24)
		return FrameHeaderSize+n >= len(rest)
	}
	return false
}

// headerPrefix reports whether b, shorter than a header, is the start of a
// torn header write: its magic, version and flags bytes match. The second
// is not checked: a header this short names none yet.
func headerPrefix(b []byte) bool {
	h := AppendHeader(nil, 0)[:8]
	return len(b) > 0 && bytes.HasPrefix(h, b[:min(len(b), len(h))])
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// ReadFileFS reads and decodes a whole segment file on the file system fs.
// Any damage, including a torn tail, is an error: the wheel reads only
// files it has rolled back to the length its index records, which ends at
// a whole record.
func ReadFileFS(fs vfs.FS, path string) (second int64, entries []Entry, err error) {
	data, err := readAll(fs, path)
	if err != nil {
		return 0, nil, fmt.Errorf("read segment: %w", err)
	}
	return decodeFile(path, data)
}

// ReadPrefixFS reads and decodes the first length bytes of the segment file
// path, which must end at a whole record: what an index recording length
// covers. Bytes appended past length, even while it reads, are not read,
// so a reader that took length under the writer's lock may read without
// it. A file shorter than length is an error wrapping ErrTruncated; a
// missing one wraps fs.ErrNotExist.
func ReadPrefixFS(fs vfs.FS, path string, length int64) (entries []Entry, err error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read segment: %w", err)
	}
	defer f.Close()
	data := make([]byte, length)
	if n, err := f.ReadAt(data, 0); n < len(data) {
		return nil, &CorruptionError{Path: path, Offset: int64(n), Err: fmt.Errorf("%w: %d bytes, want %d: %v", ErrTruncated, n, length, err)}
	}
	_, entries, err = decodeFile(path, data)
	return entries, err
}

// decodeFile decodes data, the image of the segment file path, every byte
// of which must belong to a whole record.
func decodeFile(path string, data []byte) (second int64, entries []Entry, err error) {
	if len(data) >= HeaderSize {
		second, _ = DecodeHeader(data)
	}
	entries = make([]Entry, 0, len(data)/128)
	valid, err := Scan(path, data, func(e Entry) error {
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	if valid != int64(len(data)) {
		return 0, nil, &CorruptionError{Path: path, Offset: valid, Err: ErrTruncated}
	}
	return second, entries, nil
}

// recordReadAhead is how many bytes readRecordAt asks for in its first
// read. Invariant: a record whose frame fits in it is read with one
// pread(2); a longer one takes a second read for the rest. Leases read a
// message's record on every replica, so the common record (a header, ids,
// a topic and a body of a few hundred bytes) must fit.
const recordReadAhead = 512

// readRecordAt reads the single record at offset off of f, named path.
func readRecordAt(f io.ReaderAt, path string, off int64) (Record, error) {
	buf := make([]byte, recordReadAhead)
	got, err := f.ReadAt(buf, off)
	if got < FrameHeaderSize {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return Record{}, &CorruptionError{Path: path, Offset: off, Err: fmt.Errorf("%w: %v", ErrTruncated, err)}
	}
	n := int(uint32(buf[0]) | uint32(buf[1])<<8 | uint32(buf[2])<<16 | uint32(buf[3])<<24)
	if n > MaxPayload {
		return Record{}, &CorruptionError{Path: path, Offset: off, Err: ErrBadFrame}
	}
	if need := FrameHeaderSize + n; need <= got {
		buf = buf[:need]
	} else {
		// The frame is longer than the first read returned: read the rest.
		buf = append(buf[:got], make([]byte, need-got)...)
		if _, err := f.ReadAt(buf[got:], off+int64(got)); err != nil {
			return Record{}, &CorruptionError{Path: path, Offset: off, Err: fmt.Errorf("%w: %v", ErrTruncated, err)}
		}
	}
	rec, _, err := DecodeRecord(buf)
	if err != nil {
		return Record{}, &CorruptionError{Path: path, Offset: off, Err: err}
	}
	return rec, nil
}

func readAll(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		// One allocation of the right size; ReadFull then EOF check.
		buf := make([]byte, st.Size())
		n, err := io.ReadFull(f, buf)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, err
		}
		buf = buf[:n]
		rest, err := io.ReadAll(f) // grown since the stat
		return append(buf, rest...), err
	}
	return io.ReadAll(f)
}

// truncateFile cuts path to size bytes. vfs has no truncate, so the kept
// prefix is written to a temporary file, synced and renamed over path.
func truncateFile(fs vfs.FS, path string, size int64) error {
	data, err := readAll(fs, path)
	if err != nil {
		return fmt.Errorf("truncate segment: %w", err)
	}
	if int64(len(data)) < size {
		return fmt.Errorf("truncate segment %s: %d bytes, shorter than %d", path, len(data), size)
	}
	return writeFileAtomic(fs, path, data[:size])
}

// writeFileAtomic replaces path with data: write a temporary file, sync it,
// rename it over path and sync the directory.
func writeFileAtomic(fs vfs.FS, path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	if _, err := f.Write(append([]byte(nil), data...)); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := fs.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return SyncDir(fs, fs.PathDir(path))
}

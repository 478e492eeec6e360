package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strconv"
	"strings"
)

// Format constants. See the package documentation for the byte layout.
const (
	Magic           = "DWSG"
	FormatVersion   = 1
	HeaderSize      = 20
	FrameHeaderSize = 17
	// MaxPayload bounds one record's payload; larger lengths are corruption.
	MaxPayload = 64 << 20
	// Ext is the file name extension of segment files.
	Ext = ".seg"
)

// RecordType says what a record means to the wheel.
type RecordType uint8

// Record types.
const (
	TypeMessage   RecordType = 1 // a message due in this second
	TypeTombstone RecordType = 2 // an earlier record of this id no longer lives here
	TypeLease     RecordType = 3 // a reserved message's redelivery, due in this second
)

// String names the type.
func (t RecordType) String() string {
	switch t {
	case TypeMessage:
		return "message"
	case TypeTombstone:
		return "tombstone"
	case TypeLease:
		return "lease"
	default:
		return "type(" + strconv.Itoa(int(t)) + ")"
	}
}

func (t RecordType) valid() bool { return t >= TypeMessage && t <= TypeLease }

// Record is one framed entry of a segment file.
type Record struct {
	Type    RecordType
	Index   uint64 // Raft log index of the command that wrote it
	Payload []byte
}

// Size is the number of bytes the record occupies on disk.
func (r Record) Size() int { return FrameHeaderSize + len(r.Payload) }

// Errors returned by the decoder.
var (
	// ErrTruncated means the input ends inside a frame.
	ErrTruncated = errors.New("segment: truncated record")
	// ErrChecksum means a frame's CRC does not match its contents.
	ErrChecksum = errors.New("segment: checksum mismatch")
	// ErrBadFrame means a frame's length or type is impossible.
	ErrBadFrame = errors.New("segment: malformed frame")
	// ErrBadHeader means the file header is missing, foreign or damaged.
	ErrBadHeader = errors.New("segment: bad file header")
)

// CorruptionError reports damage that is not a torn tail.
type CorruptionError struct {
	Path   string
	Offset int64
	Err    error
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("segment %s: corrupt at offset %d: %v", e.Path, e.Offset, e.Err)
}

// Unwrap returns the underlying decoder error.
func (e *CorruptionError) Unwrap() error { return e.Err }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// FileName returns the file name of the segment holding second.
func FileName(second int64) string {
	return fmt.Sprintf("%012d%s", second, Ext)
}

// ParseFileName returns the second a segment file name holds.
func ParseFileName(name string) (int64, bool) {
	name = filepath.Base(name)
	if !strings.HasSuffix(name, Ext) {
		return 0, false
	}
	s, err := strconv.ParseInt(strings.TrimSuffix(name, Ext), 10, 64)
	if err != nil || s < 0 {
		return 0, false
	}
	return s, true
}

// AppendHeader appends the file header for second to dst.
func AppendHeader(dst []byte, second int64) []byte {
	var h [HeaderSize]byte
	copy(h[0:4], Magic)
	binary.LittleEndian.PutUint16(h[4:6], FormatVersion)
	binary.LittleEndian.PutUint64(h[8:16], uint64(second))
	binary.LittleEndian.PutUint32(h[16:20], crc32.Checksum(h[:16], castagnoli))
	return append(dst, h[:]...)
}

// DecodeHeader parses a file header and returns the second it names.
func DecodeHeader(b []byte) (int64, error) {
	if len(b) < HeaderSize {
		return 0, fmt.Errorf("%w: %d bytes, want %d", ErrBadHeader, len(b), HeaderSize)
	}
	if string(b[0:4]) != Magic {
		return 0, fmt.Errorf("%w: magic %q", ErrBadHeader, b[0:4])
	}
	if crc32.Checksum(b[:16], castagnoli) != binary.LittleEndian.Uint32(b[16:20]) {
		return 0, fmt.Errorf("%w: header checksum mismatch", ErrBadHeader)
	}
	if v := binary.LittleEndian.Uint16(b[4:6]); v != FormatVersion {
		return 0, fmt.Errorf("%w: format version %d, this build reads %d", ErrBadHeader, v, FormatVersion)
	}
	return int64(binary.LittleEndian.Uint64(b[8:16])), nil
}

// AppendRecord appends the framed encoding of r to dst.
func AppendRecord(dst []byte, r Record) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, FrameHeaderSize)...)
	dst = append(dst, r.Payload...)
	f := dst[start:]
	binary.LittleEndian.PutUint32(f[0:4], uint32(len(r.Payload)))
	f[8] = byte(r.Type)
	binary.LittleEndian.PutUint64(f[9:17], r.Index)
	binary.LittleEndian.PutUint32(f[4:8], crc32.Checksum(f[8:], castagnoli))
	return dst
}

// DecodeRecord decodes the frame at the start of b. It returns the record,
// whose payload aliases b, and the number of bytes consumed.
func DecodeRecord(b []byte) (Record, int, error) {
	if len(b) < FrameHeaderSize {
		return Record{}, 0, ErrTruncated
	}
	n := binary.LittleEndian.Uint32(b[0:4])
	if n > MaxPayload {
		return Record{}, 0, fmt.Errorf("%w: payload length %d over %d", ErrBadFrame, n, MaxPayload)
	}
	end := FrameHeaderSize + int(n)
	if len(b) < end {
		return Record{}, 0, ErrTruncated
	}
	if crc32.Checksum(b[8:end], castagnoli) != binary.LittleEndian.Uint32(b[4:8]) {
		return Record{}, 0, ErrChecksum
	}
	t := RecordType(b[8])
	if !t.valid() {
		return Record{}, 0, fmt.Errorf("%w: record type %d", ErrBadFrame, b[8])
	}
	return Record{Type: t, Index: binary.LittleEndian.Uint64(b[9:17]), Payload: b[FrameHeaderSize:end:end]}, end, nil
}

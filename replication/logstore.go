package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/delaywheel/delaywheel/wheel"
)

// logStore reads the Raft log's entries where the previous version kept
// them: a Pebble database of their own (<data>/raft/log), keyed by index.
// A node opens it once, to move the entries into the segments
// (moveOldLog), and then deletes it.
type logStore struct {
	db *pebble.DB
}

// The log's key space: 'e' and the big-endian index → an entry.
const logPrefix = 'e'

// logEntryVersion prefixes every encoded entry.
const logEntryVersion = 1

// logKeyAppend appends the key of index to b.
func logKeyAppend(b []byte, index uint64) []byte {
	return binary.BigEndian.AppendUint64(append(b, logPrefix), index)
}

// openLogStore opens (or creates) the log database in dir.
func openLogStore(dir string, log *slog.Logger) (*logStore, error) {
	db, err := pebble.Open(dir, &pebble.Options{
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             wheel.NewPebbleLogger(log.With("component", "raft-log")),
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w; %s", dir, err, raftLogRemedy)
	}
	return &logStore{db: db}, nil
}

// Close closes the database.
func (s *logStore) Close() error { return s.db.Close() }

// FirstIndex returns the first index in the log, 0 when it is empty.
func (s *logStore) FirstIndex() (uint64, error) { return s.edge(true) }

// LastIndex returns the last index in the log, 0 when it is empty.
func (s *logStore) LastIndex() (uint64, error) { return s.edge(false) }

func (s *logStore) edge(first bool) (uint64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{logPrefix}, UpperBound: []byte{logPrefix + 1}})
	if err != nil {
		return 0, fmt.Errorf("raft log: %w", err)
	}
	var ok bool
	if first {
		ok = it.First()
	} else {
		ok = it.Last()
	}
	var idx uint64
	if ok {
		idx = binary.BigEndian.Uint64(it.Key()[1:])
	}
	if err := it.Close(); err != nil {
		return 0, fmt.Errorf("raft log: %w", err)
	}
	return idx, nil
}

// GetLog reads the entry at index into l.
func (s *logStore) GetLog(index uint64, l *raft.Log) error {
	v, closer, err := s.db.Get(logKeyAppend(make([]byte, 0, 9), index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("raft log: read %d: %w", index, err)
	}
	defer closer.Close()
	if err := decodeLogEntry(v, l); err != nil {
		return fmt.Errorf("raft log: entry %d: %w", index, err)
	}
	l.Index = index
	return nil
}

// An entry's value: the version byte, then the term, the type, the append
// time (Unix nanoseconds, 0 for none), and the data and extensions, each
// length-prefixed; integers are varints (protowire's, which are uvarints).

// errCorruptEntry marks an entry whose bytes do not decode.
var errCorruptEntry = errors.New("corrupt entry")

// decodeLogEntry decodes a value written by appendLogEntry into l, copying
// the data and extensions out of b.
func decodeLogEntry(b []byte, l *raft.Log) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty", errCorruptEntry)
	}
	if b[0] != logEntryVersion {
		return fmt.Errorf("%w: version %d", errCorruptEntry, b[0])
	}
	b = b[1:]
	term, n := protowire.ConsumeVarint(b)
	if n < 0 || n == len(b) {
		return fmt.Errorf("%w: truncated before its type", errCorruptEntry)
	}
	l.Term, l.Type, b = term, raft.LogType(b[n]), b[n+1:]
	at, n := protowire.ConsumeVarint(b)
	if n < 0 || at > math.MaxInt64 {
		return fmt.Errorf("%w: malformed append time", errCorruptEntry)
	}
	b = b[n:]
	var fields [2][]byte
	for i := range fields {
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("%w: malformed data or extensions", errCorruptEntry)
		}
		if len(v) > 0 {
			fields[i] = append([]byte(nil), v...)
		}
		b = b[n:]
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d bytes after its end", errCorruptEntry, len(b))
	}
	l.Data, l.Extensions = fields[0], fields[1]
	l.AppendedAt = time.Time{}
	if at != 0 {
		l.AppendedAt = time.Unix(0, int64(at))
	}
	return nil
}

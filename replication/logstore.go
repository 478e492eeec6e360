package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/sstable"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/delaywheel/delaywheel/wheel"
)

// logStore keeps the Raft log's entries in a Pebble database of their own
// (<data>/raft/log), keyed by index. A StoreLogs is one batch committed
// with a sync of Pebble's write-ahead log: one sequential write and one
// fdatasync, into WAL files Pebble recycles, so the sync does not touch
// file metadata. bolt's commit, which held the entries before, writes the
// B+tree pages a batch dirtied wherever its freelist puts them and then the
// meta page, with an fdatasync after each: about twice the time, on the
// path of every acknowledged write. The term and vote stay in bolt
// (raft.db), which Raft writes once per election.
//
// A truncation (DeleteRange) is durable when it returns: its table is
// synced before it is ingested, and the ingestion is recorded in Pebble's
// synced manifest. The compaction that frees the deleted entries' space runs
// in the background (compactLoop), because Raft truncates from its main
// loop too (a follower's conflicting tail, the log before an installed
// snapshot).
type logStore struct {
	db        *pebble.DB
	dir       string
	deletions atomic.Uint64 // names each deletion's table

	mu      sync.Mutex
	pending [][2][]byte // spans deleted but not compacted yet
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
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
	cache := pebble.NewCache(1 << 20) // reads are rare: Raft's log cache serves recent entries
	defer cache.Unref()
	lv := make([]pebble.LevelOptions, 7)
	for i := range lv {
		lv[i].Compression = pebble.NoCompression // commands are compact binary; bodies are the client's
	}
	el := &pebble.EventListener{}
	wheel.LogWriteStalls(el, log.With("db", "raft-log"))
	db, err := pebble.Open(dir, &pebble.Options{
		Cache:        cache,
		MemTableSize: 4 << 20,
		// Up to four memtables may queue for a flush before writes stop,
		// as for the index: a slow sync must not stall every proposal.
		MemTableStopWritesThreshold: 4,
		MaxOpenFiles:                64,
		Levels:                      lv,
		FormatMajorVersion:          pebble.FormatNewest,
		Logger:                      wheel.NewPebbleLogger(log.With("component", "raft-log")),
		EventListener:               el,
	})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w; %s", dir, err, raftLogRemedy)
	}
	// A crash may have left deletions' tables unlinked from the database.
	stale, err := filepath.Glob(filepath.Join(dir, "*"+deletionSuffix))
	for _, p := range stale {
		if err == nil {
			err = os.Remove(p)
		}
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("raft log: remove a deletion's leftover table: %w", err)
	}
	s := &logStore{db: db, dir: dir, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go s.compactLoop(log)
	return s, nil
}

// Close stops the background compaction and closes the database.
func (s *logStore) Close() error {
	close(s.stop)
	<-s.done
	return s.db.Close()
}

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

// StoreLog stores one entry.
func (s *logStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores entries durably, all or none. Each entry is encoded
// straight into the batch.
func (s *logStore) StoreLogs(logs []*raft.Log) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, l := range logs {
		op := b.SetDeferred(9, logEntrySize(l))
		logKeyAppend(op.Key[:0], l.Index)
		appendLogEntry(op.Value[:0], l)
		if err := op.Finish(); err != nil {
			return fmt.Errorf("raft log: %w", err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("raft log: store %d entries: %w", len(logs), err)
	}
	return nil
}

// DeleteRange deletes the entries min through max, inclusive.
//
// The deletion is a table of its own, holding only the range deletion, which
// is ingested; then compactLoop compacts the deleted span, which drops the
// tables it covers whole. Written through the memtable instead, the deletion
// would share a table with the newest entries, spanning from the oldest
// deleted entry to the newest one, and every compaction of it would rewrite
// all the live entries in between; and Pebble does not drop level-0 tables
// that a deletion covers until a compaction reads them. A steady load of
// 15 KB entries with a snapshot every 4,096 entries wrote 471 MB of
// compaction output for 574 MB of entries that way, and 14 MB this way.
//
// A deletion that overlaps the memtable (a follower's conflicting tail, or
// a head when entries are small) makes the ingestion flush it first.
func (s *logStore) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	start := logKeyAppend(nil, min)
	end := []byte{logPrefix + 1}
	if max < math.MaxUint64 {
		end = logKeyAppend(nil, max+1)
	}
	if err := s.ingestDeletion(start, end); err != nil {
		return fmt.Errorf("raft log: delete %d to %d: %w", min, max, err)
	}
	s.mu.Lock()
	s.pending = append(s.pending, [2][]byte{start, end})
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// compactLoop compacts the spans DeleteRange deleted, one at a time, until
// Close.
func (s *logStore) compactLoop(log *slog.Logger) {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
		}
		for {
			s.mu.Lock()
			if len(s.pending) == 0 {
				s.mu.Unlock()
				break
			}
			span := s.pending[0]
			s.pending = s.pending[1:]
			s.mu.Unlock()
			select {
			case <-s.stop:
				return // the next open's compactions pick the span up
			default:
			}
			if err := s.db.Compact(span[0], span[1], false); err != nil {
				log.Warn("raft log: compacting deleted entries failed; Pebble's own compactions will free them later", "err", err)
			}
		}
	}
}

// deletionSuffix ends the names ingestDeletion writes its tables under.
const deletionSuffix = ".deletion.sst.tmp"

// ingestDeletion writes a table holding only the deletion of [start, end)
// and ingests it. Ingestion links the table into the database; the name it
// was written under is removed either way.
func (s *logStore) ingestDeletion(start, end []byte) error {
	path := filepath.Join(s.dir, fmt.Sprintf("%06d%s", s.deletions.Add(1), deletionSuffix))
	f, err := vfs.Default.Create(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{
		TableFormat: s.db.FormatMajorVersion().MaxTableFormat(),
	})
	if err := w.DeleteRange(start, end); err != nil {
		w.Close()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return s.db.Ingest([]string{path})
}

// An entry's value: the version byte, then the term, the type, the append
// time (Unix nanoseconds, 0 for none), and the data and extensions, each
// length-prefixed; integers are varints (protowire's, which are uvarints).
func appendLogEntry(b []byte, l *raft.Log) []byte {
	b = append(b, logEntryVersion)
	b = protowire.AppendVarint(b, l.Term)
	b = append(b, byte(l.Type))
	b = protowire.AppendVarint(b, appendedAt(l))
	b = protowire.AppendBytes(b, l.Data)
	return protowire.AppendBytes(b, l.Extensions)
}

// logEntrySize is the length appendLogEntry appends.
func logEntrySize(l *raft.Log) int {
	return 2 + protowire.SizeVarint(l.Term) + protowire.SizeVarint(appendedAt(l)) +
		protowire.SizeBytes(len(l.Data)) + protowire.SizeBytes(len(l.Extensions))
}

func appendedAt(l *raft.Log) uint64 {
	if l.AppendedAt.IsZero() || l.AppendedAt.UnixNano() < 0 {
		return 0
	}
	return uint64(l.AppendedAt.UnixNano())
}

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

// migrateBoltLog moves the entries an earlier version kept in bolt into
// the log store. bolt's entries are the log: whatever the log store holds is
// deleted first, then they are copied in synced batches of at most
// migrateChunk bytes, then deleted from bolt. A crash at any point leaves
// bolt's entries to be moved again on the next open; Raft does not start
// before this returns.
func migrateBoltLog(bolt *raftboltdb.BoltStore, s *logStore, log *slog.Logger) error {
	first, err := bolt.FirstIndex()
	if err != nil {
		return fmt.Errorf("raft log migration: %w", err)
	}
	last, err := bolt.LastIndex()
	if err != nil {
		return fmt.Errorf("raft log migration: %w", err)
	}
	if last == 0 {
		return nil
	}
	if err := s.DeleteRange(0, math.MaxUint64); err != nil {
		return fmt.Errorf("raft log migration: %w", err)
	}
	var batch []*raft.Log
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := s.StoreLogs(batch)
		batch, size = batch[:0], 0
		return err
	}
	for i := first; i <= last; i++ {
		l := new(raft.Log)
		switch err := bolt.GetLog(i, l); {
		case errors.Is(err, raft.ErrLogNotFound):
			continue // a gap Raft left (a log store may have them)
		case err != nil:
			return fmt.Errorf("raft log migration: read %d: %w", i, err)
		}
		batch = append(batch, l)
		if size += logEntrySize(l); size >= migrateChunk {
			if err := flush(); err != nil {
				return fmt.Errorf("raft log migration: %w", err)
			}
		}
	}
	if err := flush(); err != nil {
		return fmt.Errorf("raft log migration: %w", err)
	}
	if err := bolt.DeleteRange(first, last); err != nil {
		return fmt.Errorf("raft log migration: delete from raft.db: %w", err)
	}
	log.Info("moved the raft log's entries from raft.db to the log store", "first", first, "last", last)
	return nil
}

// migrateChunk bounds the bytes of entries one migration batch holds.
const migrateChunk = 16 << 20

package replication

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
	walsegment "github.com/hashicorp/raft-wal/segment"
)

// The Raft log's entries live in raft-wal's segment files (<data>/raft/wal):
// a StoreLogs is one append and one fsync into a 64 MiB segment written
// ahead of time (spare.go), and a truncation of the log's head deletes whole segments. The
// term and vote stay in bolt (raft.db), which Raft writes once per election.
//
// Earlier versions kept the entries in a Pebble database (<data>/raft/log)
// and, before that, in raft.db. That database wrote every entry twice
// (its write-ahead log, then a table at each memtable flush) only to delete
// it after the next snapshot, and held two 4 MiB memtables at all times.
// openEntries moves an old log into the segments once, at the first start
// of a newer version.

// DefaultLogSegmentBytes is Config.LogSegmentBytes' default; MinLogSegmentBytes
// and MaxLogSegmentBytes bound it.
const (
	DefaultLogSegmentBytes = 64 << 20 // raft-wal's default
	MinLogSegmentBytes     = 1 << 20
	MaxLogSegmentBytes     = 1 << 30 // raft-wal addresses a segment with 32-bit offsets
)

const (
	walDirName    = "wal"
	oldLogDirName = "log" // the Pebble log store of an earlier version
)

// entries is the Raft log's entries: raft-wal's segments, read only
// within the log's bounds. raft-wal deletes the head of the log by whole
// segments and moves the first index up, but it still reads an entry below
// that index from the segment being written; a leader would then send a
// new follower the log from its start, entries it has already taken a
// snapshot of, instead of the snapshot.
type entries struct {
	*raftwal.WAL
	// commits and solo, when set, answer proposals once a batch is
	// durable and this node is the only voter (commit.go).
	commits *commitWaiters
	solo    *soloVoter
	// spares hands raft-wal its new segments already written (spare.go).
	spares *spareSegments
}

// StoreLogs appends logs durably, then notes configuration entries and,
// on a node that is its cluster's only voter, tells the proposals among
// logs that they are committed.
func (e entries) StoreLogs(logs []*raft.Log) error {
	if err := e.WAL.StoreLogs(logs); err != nil {
		return err
	}
	if e.solo == nil {
		return nil
	}
	from := 0
	for i, l := range logs {
		if l.Type != raft.LogConfiguration {
			continue
		}
		if e.solo.solo() {
			e.commits.notify(logs[from:i])
		}
		e.solo.stored(l)
		from = i + 1
	}
	if e.solo.solo() {
		e.commits.notify(logs[from:])
	}
	return nil
}

// StoreLog appends one entry durably (see StoreLogs).
func (e entries) StoreLog(l *raft.Log) error { return e.StoreLogs([]*raft.Log{l}) }

// DeleteRange deletes the entries from min to max. A deletion of the log's
// tail may take the latest configuration with it, so whether this node is
// the only voter becomes unknown.
func (e entries) DeleteRange(min, max uint64) error {
	last, err := e.LastIndex()
	if err != nil {
		return err
	}
	if err := e.WAL.DeleteRange(min, max); err != nil {
		return err
	}
	if e.solo != nil && max >= last {
		e.solo.truncated()
	}
	return nil
}

// GetLog reads the entry at index into l; raft.ErrLogNotFound below the
// first index.
func (e entries) GetLog(index uint64, l *raft.Log) error {
	first, err := e.FirstIndex()
	if err != nil {
		return err
	}
	if index < first {
		return raft.ErrLogNotFound
	}
	return e.WAL.GetLog(index, l)
}

// openEntries opens the Raft log's entries in raftDir/wal, after moving
// them there from where an earlier version kept them.
func openEntries(raftDir string, bolt *raftboltdb.BoltStore, segmentBytes int, hl hclog.Logger, log *slog.Logger) (entries, error) {
	if err := moveOldLog(raftDir, bolt, hl, log); err != nil {
		return entries{}, err
	}
	dir := filepath.Join(raftDir, walDirName)
	if err := mkdirSynced(dir); err != nil { // a new node's
		return entries{}, fmt.Errorf("raft log: %w", err)
	}
	spares, err := newSpareSegments(dir, segmentBytes, log)
	if err != nil {
		return entries{}, fmt.Errorf("raft log: %w", err)
	}
	w, err := openWAL(dir, hl, spares)
	if err != nil {
		spares.Close()
		return entries{}, err
	}
	return entries{WAL: w, spares: spares}, nil
}

// Close closes the segments, then stops preparing a spare.
func (e entries) Close() error {
	err := e.WAL.Close()
	if e.spares != nil {
		e.spares.Close()
	}
	return err
}

// openWAL opens (or creates) the segments in dir, new ones made from
// spares when spares is not nil.
func openWAL(dir string, hl hclog.Logger, spares *spareSegments) (*raftwal.WAL, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("raft log: %w", err)
	}
	var w *raftwal.WAL
	var err error
	if spares != nil {
		w, err = raftwal.Open(dir, raftwal.WithLogger(hl.Named("wal")), raftwal.WithSegmentSize(int(spares.size)),
			raftwal.WithSegmentFiler(walsegment.NewFiler(dir, spares)))
	} else {
		w, err = raftwal.Open(dir, raftwal.WithLogger(hl.Named("wal")))
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w; %s", dir, err, raftLogRemedy)
	}
	return w, nil
}

// moveOldLog builds raftDir/wal if it does not exist yet, from the entries
// an earlier version left in raft.db or in the Pebble log store, and then
// deletes those. The segments are built in wal.new and renamed into place
// once complete, so a crash at any point leaves either the old log whole
// (and the move starts over on the next open) or the new one whole (and
// what is left of the old one is deleted on the next open). On a new node,
// with neither, it does nothing. Raft does not start before this returns.
func moveOldLog(raftDir string, bolt *raftboltdb.BoltStore, hl hclog.Logger, log *slog.Logger) error {
	dir := filepath.Join(raftDir, walDirName)
	tmp := dir + ".new"
	oldDir := filepath.Join(raftDir, oldLogDirName)
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("raft log: remove a move cut short: %w", err)
	}
	boltFirst, boltLast, err := logBounds(bolt)
	if err != nil {
		return fmt.Errorf("raft log: raft.db: %w", err)
	}
	switch _, err := os.Stat(dir); {
	case err == nil:
		return dropOldLog(oldDir, bolt, boltFirst, boltLast, log)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("raft log: %w", err)
	}
	_, err = os.Stat(oldDir)
	oldExists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("raft log: %w", err)
	}
	if boltLast == 0 && !oldExists {
		return nil // a new node: openEntries creates the segments
	}
	w, err := openWAL(tmp, hl, nil)
	if err != nil {
		return err
	}
	var from string // what held the entries
	switch {
	case boltLast > 0:
		// raft.db still holds entries only if a move of them into the
		// Pebble store was cut short, which cleared that store first:
		// raft.db's are the log.
		from, err = "raft.db", copyLog(bolt, w)
	case oldExists:
		from = oldDir
		var old *logStore
		if old, err = openLogStore(oldDir, log); err == nil {
			err = errors.Join(copyLog(old, w), old.Close())
		}
	}
	if err = errors.Join(err, w.Close()); err != nil {
		return fmt.Errorf("raft log: build %s from %q: %w", tmp, from, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("raft log: %w", err)
	}
	if err := syncDir(raftDir); err != nil {
		return fmt.Errorf("raft log: %w", err)
	}
	log.Info("moved the raft log's entries into segment files", "from", from, "to", dir)
	return dropOldLog(oldDir, bolt, boltFirst, boltLast, log)
}

// dropOldLog deletes what an earlier version's log left once its entries
// are in the segments.
func dropOldLog(oldDir string, bolt *raftboltdb.BoltStore, boltFirst, boltLast uint64, log *slog.Logger) error {
	if boltLast > 0 {
		if err := bolt.DeleteRange(boltFirst, boltLast); err != nil {
			return fmt.Errorf("raft log: delete the moved entries from raft.db: %w", err)
		}
	}
	if _, err := os.Stat(oldDir); err == nil {
		if err := os.RemoveAll(oldDir); err != nil {
			return fmt.Errorf("raft log: delete the moved log store: %w", err)
		}
		log.Info("deleted the raft log's earlier store", "dir", oldDir)
	}
	return nil
}

// logReader is the part of a raft.LogStore a move reads.
type logReader interface {
	FirstIndex() (uint64, error)
	LastIndex() (uint64, error)
	GetLog(index uint64, l *raft.Log) error
}

// logBounds returns a log's first and last index; 0, 0 when it is empty.
func logBounds(s logReader) (first, last uint64, err error) {
	if first, err = s.FirstIndex(); err != nil {
		return 0, 0, err
	}
	if last, err = s.LastIndex(); err != nil {
		return 0, 0, err
	}
	return first, last, nil
}

// copyLog appends every entry of src to dst, in batches of at most
// copyChunk bytes. The segments take only consecutive indexes, so a gap in
// src fails the copy.
func copyLog(src logReader, dst raft.LogStore) error {
	first, last, err := logBounds(src)
	if err != nil || last == 0 {
		return err
	}
	var batch []*raft.Log
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := dst.StoreLogs(batch)
		batch, size = batch[:0], 0
		return err
	}
	for i := first; i <= last; i++ {
		l := new(raft.Log)
		if err := src.GetLog(i, l); err != nil {
			return fmt.Errorf("read entry %d of %d…%d: %w", i, first, last, err)
		}
		batch = append(batch, l)
		if size += len(l.Data) + len(l.Extensions); size >= copyChunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// copyChunk bounds the bytes of entries one copied batch holds.
const copyChunk = 16 << 20

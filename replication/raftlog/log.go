package raftlog

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	raftwal "github.com/hashicorp/raft-wal"
	walsegment "github.com/hashicorp/raft-wal/segment"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel"
)

// Segment sizes: DefaultSegmentBytes is raft-wal's default; MaxSegmentBytes
// is what raft-wal's 32-bit offsets address.
const (
	DefaultSegmentBytes = 64 << 20
	MinSegmentBytes     = 1 << 20
	MaxSegmentBytes     = 1 << 30
)

// Names in the log's directory.
const (
	walDirName    = "wal"
	stableName    = "raft.db"
	damagedRemedy = "this node cannot start from it: remove the node from the cluster, empty its data dir and add it again"
)

// ErrInvalidSize is returned by Open for a segment size outside
// MinSegmentBytes to MaxSegmentBytes.
var ErrInvalidSize = errors.New("raft log: segment size out of range")

// Options configures Open.
type Options struct {
	// SegmentBytes is the size of a segment file (DefaultSegmentBytes when 0).
	SegmentBytes int
	// Logger takes the log's warnings (none when nil).
	Logger *slog.Logger
	// RaftLogger is raft-wal's logger (none when nil).
	RaftLogger hclog.Logger
	// CommitLinger, when positive, is the least time between the starts of
	// two writes: entries proposed meanwhile share the next write and its
	// fsync (linger.go). Zero: every write starts at once.
	CommitLinger time.Duration
	// Clock is what CommitLinger is measured on (the wall clock when nil).
	Clock wheel.Clock

	// spareEvent, when set, is told of each spare prepared or used
	// (tests only).
	spareEvent func(spareEvent)
}

// Log is a node's Raft log: its entries (a raft.LogStore) and its stable
// store.
type Log struct {
	*raftwal.WAL
	stable *raftboltdb.BoltStore
	spares *spareSegments
	window *commitWindow
}

// Open opens (or creates) the log in dir.
func Open(dir string, opts Options) (*Log, error) {
	if opts.SegmentBytes == 0 {
		opts.SegmentBytes = DefaultSegmentBytes
	}
	if opts.SegmentBytes < MinSegmentBytes || opts.SegmentBytes > MaxSegmentBytes {
		return nil, fmt.Errorf("%w: %d bytes, want %d to %d", ErrInvalidSize, opts.SegmentBytes, MinSegmentBytes, MaxSegmentBytes)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.RaftLogger == nil {
		opts.RaftLogger = hclog.NewNullLogger()
	}
	walDir := filepath.Join(dir, walDirName)
	if err := segment.MkdirAllSync(vfs.Default, walDir); err != nil {
		return nil, fmt.Errorf("raft log: %w", err)
	}
	stable, err := openStable(filepath.Join(dir, stableName))
	if err != nil {
		return nil, err
	}
	spares, err := newSpareSegments(walDir, opts.SegmentBytes, opts.Logger, opts.spareEvent)
	if err != nil {
		stable.Close()
		return nil, fmt.Errorf("raft log: %w", err)
	}
	w, err := raftwal.Open(walDir, raftwal.WithLogger(opts.RaftLogger.Named("wal")),
		raftwal.WithSegmentSize(opts.SegmentBytes), raftwal.WithSegmentFiler(walsegment.NewFiler(walDir, spares)))
	if err != nil {
		spares.Close()
		stable.Close()
		return nil, fmt.Errorf("open %s: %w; %s", walDir, err, damagedRemedy)
	}
	return &Log{WAL: w, stable: stable, spares: spares, window: newCommitWindow(opts.CommitLinger, opts.Clock)}, nil
}

// openStable opens the stable store at path. bolt maps the file and trusts
// it: a file cut into the pages it uses makes it fault or panic while it
// opens, so either becomes an error that names the file.
func openStable(path string) (store *raftboltdb.BoltStore, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			store, err = nil, fmt.Errorf("raft log: %s is damaged (opening it failed: %v); %s", path, r, damagedRemedy)
		}
	}()
	store, err = raftboltdb.NewBoltStore(path)
	if err != nil {
		return nil, fmt.Errorf("raft log: %s: %w; %s", path, err, damagedRemedy)
	}
	return store, nil
}

// Stable is Raft's stable store: the current term and vote.
func (l *Log) Stable() raft.StableStore { return l.stable }

// GetLog reads the entry at index into e; raft.ErrLogNotFound below the
// first index. raft-wal deletes the head of the log by whole segments and
// moves the first index up, but still reads an entry below it from the
// segment being written; a leader would then send a new follower entries
// its snapshot covers instead of the snapshot.
func (l *Log) GetLog(index uint64, e *raft.Log) error {
	first, err := l.FirstIndex()
	if err != nil {
		return err
	}
	if index < first {
		return raft.ErrLogNotFound
	}
	return l.WAL.GetLog(index, e)
}

// Close ends a write's wait for the commit window, closes the segments,
// stops preparing a spare, and closes the stable store.
func (l *Log) Close() error {
	l.window.close()
	err := l.WAL.Close()
	l.spares.Close()
	return errors.Join(err, l.stable.Close())
}

package raftlog

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"

	"github.com/delaywheel/delaywheel/segment"
)

// Spare segments. raft-wal preallocates a new segment with fallocate, which
// leaves its blocks unwritten: every append into them changes the file's
// extent map, so the fsync after it commits the file system's journal as
// well as the data, and the Raft log's fsync is what an enqueue waits for.
//
// So the log's segments come from spareSegments: while the node runs, a
// background goroutine writes the next segment's file in full (zeros, the
// same content a preallocated file reads as), a synced chunk at a time with
// a pause between, under a name raft-wal does not list; a new segment is
// that file renamed. A new log's first spare is written as it opens. When
// no spare is ready (a log outgrowing its spare), raft-wal's own
// preallocation is used. The cost is one more write of each segment's
// bytes, done ahead of time, and one spare segment of disk.
//
// Crash safety: a spare is renamed ready only once synced, an unfinished
// one is deleted at the next open, and a renamed spare holds exactly what a
// preallocated segment would (zeros), which raft-wal's recovery already
// handles. The rename of a spare into a segment is synced before raft-wal
// writes into it.

const (
	spareName    = "spare-segment" // a ready spare; no ".wal" suffix, so raft-wal never lists it
	spareTmpName = "spare-segment.tmp"
	spareChunk   = 1 << 20 // bytes of zeros per write and sync
	// sparePause is the rest between two chunks, so that the log's own
	// fsyncs never queue behind more than a chunk's writeback.
	sparePause = 10 * time.Millisecond
)

// spareEvent is what a test hook (Options.spareEvent) is told.
type spareEvent int

const (
	sparePrepared spareEvent = iota // a spare was written and is ready
	spareUsed                       // a segment was made from the spare
)

// spareSegments is the raft-wal file system of the Raft log's segment
// directory: raft-wal's own, except that Create hands out a ready spare.
type spareSegments struct {
	*walfs.FS
	dir  string
	size uint64 // bytes of a segment, as raft-wal asks for them
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	event func(spareEvent) // nil but in tests

	mu        sync.Mutex
	ready     bool // dir/spareName is a synced spare of size bytes
	preparing bool
}

// newSpareSegments opens the spares of dir, whose segments are size bytes:
// it deletes an unfinished spare, keeps a ready one of the right size, and
// starts preparing one otherwise.
// event, when not nil, is told of each spare prepared or used.
func newSpareSegments(dir string, size int, log *slog.Logger, event func(spareEvent)) (*spareSegments, error) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &spareSegments{FS: walfs.New(), dir: dir, size: uint64(size), log: log, ctx: ctx, cancel: cancel, event: event}
	if err := os.Remove(filepath.Join(dir, spareTmpName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		cancel()
		return nil, fmt.Errorf("spare segment: %w", err)
	}
	switch fi, err := os.Stat(filepath.Join(dir, spareName)); {
	case err == nil && fi.Mode().IsRegular() && uint64(fi.Size()) == s.size:
		s.ready = true
	case err == nil:
		if err := os.Remove(filepath.Join(dir, spareName)); err != nil {
			cancel()
			return nil, fmt.Errorf("spare segment of another size: %w", err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		cancel()
		return nil, fmt.Errorf("spare segment: %w", err)
	}
	if !s.ready {
		names, err := os.ReadDir(dir)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("spare segment: %w", err)
		}
		newLog := !slices.ContainsFunc(names, func(e os.DirEntry) bool { return strings.HasSuffix(e.Name(), ".wal") })
		if newLog && s.size <= DefaultSegmentBytes {
			// A new log: raft-wal creates its first segment as it opens,
			// so that one's spare is made now, at full speed, rather than
			// in the background (unless segments are larger than the
			// default, which would hold up a new node's first start).
			err := s.prepare(0)
			s.mu.Lock()
			s.settle(err, "the first segment")
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	s.prepareLocked()
	s.mu.Unlock()
	return s, nil
}

// settle records how preparing a spare ended: ready, or failed, in which
// case the unfinished file is deleted and, unless Close stopped it, a
// warning names what is preallocated instead. s.mu is held.
func (s *spareSegments) settle(err error, instead string) {
	s.preparing = false
	if err != nil {
		os.Remove(filepath.Join(s.dir, spareTmpName))
		if s.ctx.Err() == nil {
			s.log.Warn("raft log: could not prepare a spare segment; "+instead+" is preallocated instead", "err", err)
		}
		return
	}
	s.ready = true
	s.notify(sparePrepared)
}

// notify tells the test hook of ev.
func (s *spareSegments) notify(ev spareEvent) {
	if s.event != nil {
		s.event(ev)
	}
}

// Create creates segment name in dir: the ready spare renamed, when there
// is one of that size, else a file raft-wal's way. Either way the next
// spare starts being prepared. Like raft-wal's, it fails if name exists.
//
// The rename is synced before the segment is handed out: were it lost in a
// crash after raft-wal had written into the file, the spare's name would
// come back holding that data.
func (s *spareSegments) Create(dir, name string, size uint64) (types.WritableFile, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.prepareLocked()
	if dir != s.dir || size != s.size || !s.ready {
		if dir == s.dir && size == s.size && s.preparing {
			s.log.Info("raft log: the spare segment is not written yet; preallocating the next segment instead")
		}
		return s.FS.Create(dir, name, size)
	}
	path := filepath.Join(dir, name)
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("create segment %s: %w", path, fs.ErrExist)
	}
	f, err := s.takeSpare(path)
	if err != nil {
		s.log.Warn("raft log: could not use the spare segment; preallocating the next segment instead", "err", err)
		return s.FS.Create(dir, name, size)
	}
	s.notify(spareUsed)
	if err := segment.SyncDir(vfs.Default, dir); err != nil {
		f.Close()
		return nil, fmt.Errorf("create segment %s from the spare: %w", path, err)
	}
	return f, nil
}

// takeSpare opens the ready spare and renames it to path. On an error the
// spare is no longer counted ready, and path does not exist.
func (s *spareSegments) takeSpare(path string) (*os.File, error) {
	s.ready = false
	spare := filepath.Join(s.dir, spareName)
	f, err := os.OpenFile(spare, os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := os.Rename(spare, path); err != nil {
		f.Close()
		os.Remove(spare) // a fresh one is prepared
		return nil, err
	}
	return f, nil
}

// prepareLocked starts preparing a spare unless one is ready or under way.
func (s *spareSegments) prepareLocked() {
	if s.ready || s.preparing || s.ctx.Err() != nil {
		return
	}
	s.preparing = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := s.prepare(sparePause)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.settle(err, "the next segment")
	}()
}

// prepare writes a spare: zeros, a chunk at a time, each synced, with
// pause between chunks, then renamed ready.
func (s *spareSegments) prepare(pause time.Duration) error {
	tmp := filepath.Join(s.dir, spareTmpName)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	zeros := make([]byte, spareChunk)
	var written uint64
	for written < s.size && err == nil {
		if err = s.ctx.Err(); err != nil {
			break
		}
		n := min(uint64(len(zeros)), s.size-written)
		if _, err = f.WriteAt(zeros[:n], int64(written)); err != nil {
			break
		}
		written += n
		if err = f.Sync(); err != nil || written == s.size || pause == 0 {
			continue
		}
		select {
		case <-s.ctx.Done():
		case <-time.After(pause):
		}
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.dir, spareName))
}

// Close stops a spare being prepared and waits for it to stop. A ready
// spare stays for the next open.
func (s *spareSegments) Close() {
	s.mu.Lock()
	s.cancel() // under mu: no preparation starts after this
	s.mu.Unlock()
	s.wg.Wait()
}

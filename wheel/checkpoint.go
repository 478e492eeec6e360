package wheel

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/wheel/command"
)

// CheckpointLens is the file in a checkpoint's segments directory that lists
// "<second> <length>" for every slot file: a hard-linked file may grow after
// the checkpoint, and only its first length bytes belong to it.
const CheckpointLens = "lengths"

// Checkpoint writes a consistent copy of the store into dir, which must not
// exist: a Pebble checkpoint in dir/index, and hard links of the slot files
// in dir/segments with the lengths the checkpoint covers, all durable when it
// returns. Applies wait while it runs; it costs a sync and one link per slot
// file. It returns the applied index the copy covers.
func (s *Store) Checkpoint(dir string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	if err := s.syncLocked(); err != nil {
		return 0, err
	}
	if err := s.db.Checkpoint(s.fs.PathJoin(dir, "index"), pebble.WithFlushedWAL()); err != nil {
		return 0, fmt.Errorf("checkpoint index: %w", err)
	}
	lens, err := s.segLens()
	if err != nil {
		return 0, err
	}
	segDir := s.fs.PathJoin(dir, "segments")
	if err := segment.MkdirAllSync(s.fs, segDir); err != nil {
		return 0, fmt.Errorf("checkpoint segments: %w", err)
	}
	seconds := make([]int64, 0, len(lens))
	for sec := range lens {
		seconds = append(seconds, sec)
	}
	sort.Slice(seconds, func(i, j int) bool { return seconds[i] < seconds[j] })
	var b strings.Builder
	for _, sec := range seconds {
		name := s.segs.Path(sec)
		if err := s.fs.Link(name, s.fs.PathJoin(segDir, s.fs.PathBase(name))); err != nil {
			return 0, fmt.Errorf("checkpoint segment: %w", err)
		}
		fmt.Fprintf(&b, "%d %d\n", sec, lens[sec].Length)
	}
	f, err := s.fs.Create(s.fs.PathJoin(segDir, CheckpointLens))
	if err != nil {
		return 0, fmt.Errorf("checkpoint lengths: %w", err)
	}
	if _, err := f.Write([]byte(b.String())); err != nil {
		f.Close()
		return 0, fmt.Errorf("checkpoint lengths: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, fmt.Errorf("checkpoint lengths: %w", err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("checkpoint lengths: %w", err)
	}
	// The links and the lengths file are durable once their directory is.
	if err := segment.SyncDir(s.fs, segDir); err != nil {
		return 0, fmt.Errorf("checkpoint segments: %w", err)
	}
	return s.applied, nil
}

// ParseCheckpointLens parses the lengths file of a checkpoint.
func ParseCheckpointLens(data string) (map[int64]int64, error) {
	out := map[int64]int64{}
	for i, line := range strings.Split(strings.TrimSpace(data), "\n") {
		if line == "" {
			continue
		}
		a, b, ok := strings.Cut(line, " ")
		sec, err1 := strconv.ParseInt(a, 10, 64)
		n, err2 := strconv.ParseInt(b, 10, 64)
		if !ok || err1 != nil || err2 != nil || n < 0 {
			return nil, fmt.Errorf("%w: checkpoint lengths line %d: %q", command.ErrCorruptCommand, i+1, line)
		}
		out[sec] = n
	}
	return out, nil
}

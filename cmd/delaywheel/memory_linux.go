package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/wheel"
)

// pageReleaser hands the resident pages of raft.db's memory map back to
// the kernel. bolt maps raft.db and reads it through the map, so every page
// it reads again stays in the process's resident set. raft.db now holds
// only the term and vote, but a node of an earlier version kept the log's
// entries there too (each commit walked the tree to the last leaf, log
// compaction walked every entry it deleted, a restart replayed the entries
// after the snapshot), and moving them out at the first start reads them
// all. Without this, such a node's resident memory grew with the volume of
// its log, not with its work.
//
// It uses MADV_DONTNEED while the node holds the map still (see
// replication.Node.HoldLogMap), on the one range /proc/self/smaps lists for
// raft.db. The map is shared and read-only (bolt writes with pwrite), so
// the kernel only drops the process's page table entries: the pages stay
// in the page cache, unchanged, and the next read maps them back with a
// minor fault and no disk read. (MADV_PAGEOUT would also evict them from
// the page cache, and commits after a snapshot would then wait on disk
// reads.)
//
// Reading smaps costs a few hundred kilobytes of garbage, so each check
// first reads the process's mapped-file total from /proc/self/status, and
// reads smaps only once that total has grown by the threshold since the
// last release.
type pageReleaser struct {
	hold      logMap
	threshold int64 // resident bytes of the log's map that trigger a release
	log       *slog.Logger
	status    func(buf []byte) ([]byte, error)
	smaps     func() ([]byte, error)
	madvise   func(start, length uintptr) error
	buf       []byte // for status
	baseline  int64  // RssFile after the last release; -1 before the first check
	disabled  bool   // the kernel refused the advice, or the map may move
}

// newPageReleaser returns a releaser of the Raft log's map once it keeps
// more than threshold bytes resident.
func newPageReleaser(hold logMap, threshold int64, log *slog.Logger) *pageReleaser {
	return &pageReleaser{
		hold:      hold,
		threshold: threshold,
		log:       log,
		status:    readSelfStatus,
		smaps:     func() ([]byte, error) { return os.ReadFile("/proc/self/smaps") },
		madvise:   madvise,
		buf:       make([]byte, 8<<10),
		baseline:  -1,
	}
}

// readSelfStatus reads /proc/self/status into buf.
func readSelfStatus(buf []byte) ([]byte, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, err
	}
	return buf[:n], nil
}

// rssFile reads RssFile from a /proc/<pid>/status file, in bytes.
func rssFile(status []byte) (int64, error) {
	for line := range bytes.Lines(status) {
		if rest, ok := bytes.CutPrefix(line, []byte("RssFile:")); ok {
			return parseKB(string(rest))
		}
	}
	return 0, errors.New("no RssFile in /proc/self/status")
}

// check releases when the mapped-file total grew by the threshold since the
// last release; it returns the resident bytes of the mappings released.
func (r *pageReleaser) check() (int64, error) {
	st, err := r.status(r.buf)
	if err != nil {
		return 0, fmt.Errorf("read status: %w", err)
	}
	kb, err := rssFile(st)
	if err != nil {
		return 0, err
	}
	file := kb << 10
	if r.baseline >= 0 && file-r.baseline < r.threshold {
		return 0, nil
	}
	released, err := r.releaseOnce()
	if err != nil {
		return released, err
	}
	if released > 0 { // the pages are gone: measure the new floor
		if st, err = r.status(r.buf); err == nil {
			kb, err = rssFile(st)
		}
		if err != nil {
			return released, err
		}
		file = kb << 10
	}
	r.baseline = file
	return released, nil
}

func madvise(start, length uintptr) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, start, length, syscall.MADV_DONTNEED); errno != 0 {
		return errno
	}
	return nil
}

// run releases every interval until ctx ends.
func (r *pageReleaser) run(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() bool {
		if _, err := r.check(); err != nil {
			r.log.Warn("releasing mapped file pages", "err", err)
		}
		return !r.disabled
	})
}

// releaseOnce drops the resident pages of the Raft log's map when they
// hold at least the threshold, and returns how many bytes they held.
func (r *pageReleaser) releaseOnce() (int64, error) {
	var released int64
	err := r.hold(func(path string) error {
		b, err := r.smaps()
		if err != nil {
			return fmt.Errorf("read smaps: %w", err)
		}
		maps, err := parseSmaps(b)
		if err != nil {
			return err
		}
		for _, m := range maps {
			if m.path != path || m.rss < r.threshold {
				continue
			}
			err := r.madvise(m.start, m.end-m.start)
			if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS) {
				r.disabled = true
				r.log.Warn("the kernel refused to drop raft.db's mapped pages; they stay resident", "err", err)
				return nil
			}
			if err != nil {
				return fmt.Errorf("madvise %s: %w", path, err)
			}
			released += m.rss
		}
		return nil
	})
	switch {
	case errors.Is(err, wheel.ErrClosed):
		r.disabled = true
		return released, nil
	case errors.Is(err, replication.ErrLogMapMayMove):
		r.disabled = true
		r.log.Warn("raft.db's mapped pages are no longer released", "err", err)
		return released, nil
	}
	return released, err
}

// mapping is one entry of /proc/<pid>/smaps.
type mapping struct {
	start, end uintptr
	path       string
	rss        int64 // bytes
}

// parseSmaps reads the ranges, file paths and resident sizes of an smaps file.
func parseSmaps(b []byte) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "Rss:"); ok {
			if len(out) == 0 {
				return nil, fmt.Errorf("smaps: Rss before any mapping")
			}
			kb, err := parseKB(rest)
			if err != nil {
				return nil, fmt.Errorf("smaps Rss: %w", err)
			}
			out[len(out)-1].rss = kb << 10
			continue
		}
		m, ok, err := parseMapLine(line)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, m)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("smaps: %w", err)
	}
	return out, nil
}

// parseMapLine parses a mapping's header line ("start-end perms offset dev
// inode [path]"); ok is false for the field lines that follow it.
func parseMapLine(line string) (m mapping, ok bool, err error) {
	rng, rest, found := strings.Cut(line, " ")
	lo, hi, isRange := strings.Cut(rng, "-")
	if !found || !isRange || strings.HasSuffix(rng, ":") {
		return mapping{}, false, nil
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil {
		return mapping{}, false, nil // a field line such as "VmFlags: ..."
	}
	if end < start {
		return mapping{}, false, fmt.Errorf("smaps: range %s ends before it starts", rng)
	}
	// perms, offset, dev and inode, then the path (which may hold spaces).
	for range 4 {
		rest = strings.TrimLeft(rest, " ")
		_, rest, _ = strings.Cut(rest, " ")
	}
	return mapping{start: uintptr(start), end: uintptr(end), path: strings.TrimLeft(rest, " ")}, true, nil
}

// parseKB parses " 123 kB".
func parseKB(s string) (int64, error) {
	f := strings.Fields(s)
	if len(f) != 2 || f[1] != "kB" {
		return 0, fmt.Errorf("%q is not a size in kB", strings.TrimSpace(s))
	}
	return strconv.ParseInt(f[0], 10, 64)
}

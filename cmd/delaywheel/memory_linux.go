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
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// madvPageout is MADV_PAGEOUT (Linux 5.4): reclaim the pages of a range now.
const madvPageout = 21

// pageReleaser hands the resident pages of files under a directory that the
// process maps back to the kernel. The Raft log is such a file: bolt maps
// raft.db and reads it through the map, so every log page it writes and
// reads again (each commit rewrites the last leaf; a restart replays the
// entries after the snapshot) stays in the process's resident set until the
// map is replaced, which only happens when the file grows. Without this, a
// node's resident memory grows with the size of its log, not its work.
//
// It uses MADV_PAGEOUT, never MADV_DONTNEED: the ranges come from
// /proc/self/smaps, and bolt may replace its map between the read and the
// call. PAGEOUT only asks the kernel to reclaim what it can, so a range that
// meanwhile holds something else keeps its contents (anonymous memory is
// swapped out at worst); DONTNEED would zero it.
//
// Reading smaps costs a few hundred kilobytes of garbage, so each check
// first reads the process's mapped-file total from /proc/self/status, and
// reads smaps only once that total has grown by the threshold since the
// last release.
type pageReleaser struct {
	dir       string // with a trailing separator
	threshold int64  // resident bytes of one mapping that trigger a release
	log       *slog.Logger
	status    func(buf []byte) ([]byte, error)
	smaps     func() ([]byte, error)
	madvise   func(start, length uintptr) error
	buf       []byte // for status
	baseline  int64  // RssFile after the last release; -1 before the first check
	disabled  bool   // the kernel refused the advice
}

// newPageReleaser returns a releaser of the mappings of files under dir
// that keep more than threshold bytes resident.
func newPageReleaser(dir string, threshold int64, log *slog.Logger) *pageReleaser {
	return &pageReleaser{
		dir:       filepath.Clean(dir) + string(filepath.Separator),
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
	if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, start, length, madvPageout); errno != 0 {
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

// releaseOnce advises the kernel to reclaim every mapping of a file under
// the directory that holds at least the threshold, and returns the resident
// bytes those mappings held.
func (r *pageReleaser) releaseOnce() (int64, error) {
	b, err := r.smaps()
	if err != nil {
		return 0, fmt.Errorf("read smaps: %w", err)
	}
	maps, err := parseSmaps(b)
	if err != nil {
		return 0, err
	}
	var released int64
	for _, m := range maps {
		if m.rss < r.threshold || !strings.HasPrefix(m.path, r.dir) {
			continue
		}
		err := r.madvise(m.start, m.end-m.start)
		switch {
		case err == nil:
			released += m.rss
		case errors.Is(err, syscall.ENOMEM):
			// Unmapped since smaps was read (bolt replaced its map).
		case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOSYS):
			r.disabled = true
			r.log.Warn("the kernel does not release mapped file pages on request (MADV_PAGEOUT needs Linux 5.4); the Raft log's pages stay resident", "err", err)
			return released, nil
		default:
			return released, fmt.Errorf("madvise %s: %w", m.path, err)
		}
	}
	return released, nil
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

// prefetchFile reads the file at path once, sequentially, so that it is in
// the page cache, and returns the bytes read. A missing file is not an error.
//
// The Raft log needs it when its pages are released: released pages leave
// the page cache too, and a restart reads every entry after the snapshot
// through bolt's map, which faults them in one page at a time (bolt advises
// random access): a slow disk read each, where large sequential reads cost
// a fraction of that. (The kernel caps POSIX_FADV_WILLNEED at its readahead
// window, so the file is read here.)
func prefetchFile(ctx context.Context, path string) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("prefetch: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for ctx.Err() == nil {
		m, err := f.Read(buf)
		n += int64(m)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("prefetch %s: %w", path, err)
		}
	}
	return n, ctx.Err()
}

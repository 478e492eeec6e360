package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/wheel"
)

const smapsFixture = `00400000-00402000 r--p 00000000 fd:00 1234                               /usr/bin/delaywheel
Size:                  8 kB
Rss:                   8 kB
VmFlags: rd mr mw me sd
7f1000000000-7f1040000000 r--s 00000000 fd:00 5678                       /data/raft/raft.db
Size:            1048576 kB
KernelPageSize:        4 kB
Rss:               65536 kB
Pss:               65536 kB
VmFlags: rd sh mr mw me ms rr sd
7f2000000000-7f2000100000 r--s 00000000 fd:00 5679                       /data/raft/small file.db
Size:               1024 kB
Rss:                1024 kB
7f3000000000-7f3000400000 rw-p 00000000 00:00 0
Size:               4096 kB
Rss:                4096 kB
7f4000000000-7f4004000000 r--s 00000000 fd:00 5680                       /data/raftother/raft.db
Size:              65536 kB
Rss:               65536 kB
7f5000000000-7f5004000000 r--s 00000000 fd:00 5681                       /data/raft/old.db (deleted)
Size:              65536 kB
Rss:               32768 kB
`

func TestParseSmaps(t *testing.T) {
	maps, err := parseSmaps([]byte(smapsFixture))
	if err != nil {
		t.Fatal(err)
	}
	want := []mapping{
		{0x400000, 0x402000, "/usr/bin/delaywheel", 8 << 10},
		{0x7f1000000000, 0x7f1040000000, "/data/raft/raft.db", 65536 << 10},
		{0x7f2000000000, 0x7f2000100000, "/data/raft/small file.db", 1024 << 10},
		{0x7f3000000000, 0x7f3000400000, "", 4096 << 10},
		{0x7f4000000000, 0x7f4004000000, "/data/raftother/raft.db", 65536 << 10},
		{0x7f5000000000, 0x7f5004000000, "/data/raft/old.db (deleted)", 32768 << 10},
	}
	if len(maps) != len(want) {
		t.Fatalf("parsed %d mappings, want %d: %+v", len(maps), len(want), maps)
	}
	for i := range want {
		if maps[i] != want[i] {
			t.Errorf("mapping %d = %+v, want %+v", i, maps[i], want[i])
		}
	}
	if _, err := parseSmaps([]byte("Rss: 4 kB\n")); err == nil {
		t.Error("Rss before any mapping parsed")
	}
	if _, err := parseSmaps([]byte("00400000-00402000 r--p 00000000 fd:00 1 /x\nRss: 4 MB\n")); err == nil {
		t.Error("Rss not in kB parsed")
	}
}

type madviseCall struct{ start, length uintptr }

// holdPath is a logMap that holds nothing still and hands over path.
func holdPath(path string) logMap {
	return func(fn func(string) error) error { return fn(path) }
}

func fakeReleaser(threshold int64, smaps string, err error) (*pageReleaser, *[]madviseCall) {
	var calls []madviseCall
	r := newPageReleaser(holdPath("/data/raft/raft.db"), threshold, slog.New(slog.DiscardHandler))
	r.smaps = func() ([]byte, error) { return []byte(smaps), nil }
	r.madvise = func(start, length uintptr) error {
		calls = append(calls, madviseCall{start, length})
		return err
	}
	return r, &calls
}

func TestReleaserReleasesOnlyTheRaftLog(t *testing.T) {
	r, calls := fakeReleaser(8<<20, smapsFixture, nil)
	released, err := r.releaseOnce()
	if err != nil {
		t.Fatal(err)
	}
	// raft.db (64 MiB) only: not the executable, anonymous memory, another
	// file in the directory, a raft.db elsewhere or a deleted file.
	want := []madviseCall{{0x7f1000000000, 0x40000000}}
	if len(*calls) != len(want) || (*calls)[0] != want[0] {
		t.Fatalf("madvise calls %+v, want %+v", *calls, want)
	}
	if released != 65536<<10 {
		t.Fatalf("released %d bytes, want %d", released, 65536<<10)
	}

	r, calls = fakeReleaser(1<<40, smapsFixture, nil)
	if released, err := r.releaseOnce(); err != nil || released != 0 || len(*calls) != 0 {
		t.Fatalf("above the map's residency: released %d, calls %v, err %v", released, *calls, err)
	}
}

func TestReleaserErrors(t *testing.T) {
	// A kernel that refuses the advice disables the releaser.
	r, calls := fakeReleaser(8<<20, smapsFixture, syscall.EINVAL)
	if _, err := r.releaseOnce(); err != nil || len(*calls) != 1 || !r.disabled {
		t.Fatalf("EINVAL: calls %v, err %v, disabled %v", *calls, err, r.disabled)
	}
	// Anything else is an error, and the next check tries again.
	for _, errno := range []error{syscall.EPERM, syscall.ENOMEM} {
		r, _ = fakeReleaser(8<<20, smapsFixture, errno)
		if _, err := r.releaseOnce(); !errors.Is(err, errno) || r.disabled {
			t.Fatalf("%v: err %v, disabled %v", errno, err, r.disabled)
		}
	}
	// A node that closed, or a log that outgrew half its map, stops it
	// without advising anything.
	for _, holdErr := range []error{wheel.ErrClosed, replication.ErrLogMapMayMove} {
		r, calls = fakeReleaser(8<<20, smapsFixture, nil)
		r.hold = func(func(string) error) error { return fmt.Errorf("wrapped: %w", holdErr) }
		if _, err := r.releaseOnce(); err != nil || len(*calls) != 0 || !r.disabled {
			t.Fatalf("hold %v: calls %v, err %v, disabled %v", holdErr, *calls, err, r.disabled)
		}
	}
	// smaps that cannot be read is an error.
	r, _ = fakeReleaser(8<<20, smapsFixture, nil)
	r.smaps = func() ([]byte, error) { return nil, syscall.EACCES }
	if _, err := r.releaseOnce(); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("unreadable smaps: err %v", err)
	}
}

// TestReleaseKeepsMappedData releases a real shared file mapping and reads it
// back: the pages leave the resident set, and what the mapping holds never
// changes.
func TestReleaseKeepsMappedData(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "raft.db")
	want := bytes.Repeat([]byte("delaywheel raft log page "), 40_000) // ~1 MB
	if err := os.WriteFile(path, want, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := syscall.Mmap(int(f.Fd()), 0, len(want), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(data)
	if !bytes.Equal(data, want) { // touches every page
		t.Fatal("mapping differs from the file")
	}
	resident := func() int64 { return mappedRSS(t, path) }
	if before := resident(); before < int64(len(want))/2 {
		t.Fatalf("%d bytes resident after reading all %d", before, len(want))
	}

	r := newPageReleaser(holdPath(path), 1, slog.New(slog.DiscardHandler))
	released, err := r.releaseOnce()
	if err != nil || r.disabled {
		t.Fatalf("release: %v (disabled %v)", err, r.disabled)
	}
	if released <= 0 {
		t.Fatalf("released %d bytes of a mapping whose pages were all read", released)
	}
	if after := resident(); after != 0 {
		t.Fatalf("%d bytes still resident after the release", after)
	}
	if !bytes.Equal(data, want) {
		t.Fatal("mapping changed after its pages were released")
	}
}

// TestReleaserReadsSmapsOnlyAfterGrowth checks the cheap gate: smaps is
// read on the first check, then only once the mapped-file total has grown by
// the threshold since the last release.
func TestReleaserReadsSmapsOnlyAfterGrowth(t *testing.T) {
	const mib = 1 << 20
	fileKB := int64(26 * 1024)
	smapsReads := 0
	r, calls := fakeReleaser(8*mib, smapsFixture, nil)
	r.status = func([]byte) ([]byte, error) {
		return []byte("Name:\tdelaywheel\nVmRSS:\t 99999 kB\nRssAnon:\t 1 kB\nRssFile:\t " + strconv.FormatInt(fileKB, 10) + " kB\n"), nil
	}
	smaps := r.smaps
	r.smaps = func() ([]byte, error) { smapsReads++; return smaps() }

	if _, err := r.check(); err != nil || smapsReads != 1 || len(*calls) != 1 {
		t.Fatalf("first check: err %v, smaps reads %d, madvise calls %d", err, smapsReads, len(*calls))
	}
	fileKB += 7 * 1024 // grown by less than the threshold
	if _, err := r.check(); err != nil || smapsReads != 1 {
		t.Fatalf("after 7 MiB: err %v, smaps reads %d, want 1", err, smapsReads)
	}
	fileKB += 2 * 1024 // 9 MiB since the last release
	if _, err := r.check(); err != nil || smapsReads != 2 || len(*calls) != 2 {
		t.Fatalf("after 9 MiB: err %v, smaps reads %d, madvise calls %d", err, smapsReads, len(*calls))
	}
	if _, err := r.check(); err != nil || smapsReads != 2 {
		t.Fatalf("no growth since: err %v, smaps reads %d, want 2", err, smapsReads)
	}

	r.status = func([]byte) ([]byte, error) { return []byte("Name:\tx\n"), nil }
	if _, err := r.check(); err == nil {
		t.Fatal("a status without RssFile passed")
	}
}

// TestReleaserDropsARealRaftLogsPages runs the releaser against a real
// node whose data dir is given relative to the working directory and
// through a symbolic link, as `--data-dir ./data` may be: the node must
// name its log as /proc/self/smaps does, and the releaser must find the
// map bolt reads it through and drop its pages.
func TestReleaserDropsARealRaftLogsPages(t *testing.T) {
	base := t.TempDir()
	if err := os.Mkdir(filepath.Join(base, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(base)
	c := replication.NewTestCluster(t, 1, func(cfg *replication.Config) {
		cfg.DataDir = filepath.Join("link", cfg.ID)
	})
	node := c.Leader().Node

	var logPath string
	if err := node.HoldLogMap(func(path string) error { logPath = path; return nil }); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(base, "real", "n1", "raft", "raft.db"); logPath != want {
		// t.TempDir may itself sit under a symbolic link.
		if real, err := filepath.EvalSymlinks(want); err != nil || logPath != real {
			t.Fatalf("log path %q, want %q", logPath, want)
		}
	}
	resident := func() int64 { return mappedRSS(t, logPath) }
	if before := resident(); before == 0 {
		t.Fatal("bolt's map of the log holds no resident page (it reads its meta pages on open)")
	}
	r := newPageReleaser(node.HoldLogMap, 1, slog.New(slog.DiscardHandler))
	released, err := r.releaseOnce()
	if err != nil || r.disabled || released == 0 {
		t.Fatalf("release: %d bytes, err %v, disabled %v", released, err, r.disabled)
	}
	// bolt may read a page or two again at once (a commit in flight).
	if after := resident(); after > released/2 && after > 16<<10 {
		t.Fatalf("%d bytes resident after releasing %d", after, released)
	}
	// The node still serves from the log it no longer holds resident.
	due := time.Now().Add(time.Minute).UnixMilli()
	if _, err := c.Leader().Node.Enqueue(t.Context(), []wheel.NewMessage{{Topic: "t", DeliverAtMs: due, MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
}

// mappedRSS returns the resident bytes of this process's maps of path, as
// /proc/self/smaps counts them; it fails the test when there is none.
func mappedRSS(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	maps, err := parseSmaps(b)
	if err != nil {
		t.Fatal(err)
	}
	var rss int64
	found := false
	for _, m := range maps {
		if m.path == path {
			rss += m.rss
			found = true
		}
	}
	if !found {
		t.Fatalf("no map of %s in smaps", path)
	}
	return rss
}

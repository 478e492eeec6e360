package main

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
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

func fakeReleaser(threshold int64, smaps string, err error) (*pageReleaser, *[]madviseCall) {
	var calls []madviseCall
	r := newPageReleaser("/data/raft", threshold, slog.New(slog.DiscardHandler))
	r.smaps = func() ([]byte, error) { return []byte(smaps), nil }
	r.madvise = func(start, length uintptr) error {
		calls = append(calls, madviseCall{start, length})
		return err
	}
	return r, &calls
}

func TestReleaserReleasesOnlyLargeMappingsUnderTheDir(t *testing.T) {
	r, calls := fakeReleaser(8<<20, smapsFixture, nil)
	released, err := r.releaseOnce()
	if err != nil {
		t.Fatal(err)
	}
	// raft.db (64 MiB) and the deleted old.db (32 MiB); not the small file
	// under the threshold, the executable, anonymous memory, or a file in a
	// directory that only shares the prefix.
	want := []madviseCall{{0x7f1000000000, 0x40000000}, {0x7f5000000000, 0x4000000}}
	if len(*calls) != len(want) || (*calls)[0] != want[0] || (*calls)[1] != want[1] {
		t.Fatalf("madvise calls %+v, want %+v", *calls, want)
	}
	if released != (65536+32768)<<10 {
		t.Fatalf("released %d bytes, want %d", released, (65536+32768)<<10)
	}

	r, calls = fakeReleaser(1<<40, smapsFixture, nil)
	if released, err := r.releaseOnce(); err != nil || released != 0 || len(*calls) != 0 {
		t.Fatalf("above every mapping's residency: released %d, calls %v, err %v", released, *calls, err)
	}
}

func TestReleaserErrors(t *testing.T) {
	// A range unmapped since smaps was read is skipped.
	r, calls := fakeReleaser(8<<20, smapsFixture, syscall.ENOMEM)
	if released, err := r.releaseOnce(); err != nil || released != 0 || len(*calls) != 2 || r.disabled {
		t.Fatalf("ENOMEM: released %d, calls %v, err %v, disabled %v", released, *calls, err, r.disabled)
	}
	// A kernel without MADV_PAGEOUT disables the releaser.
	r, calls = fakeReleaser(8<<20, smapsFixture, syscall.EINVAL)
	if _, err := r.releaseOnce(); err != nil || len(*calls) != 1 || !r.disabled {
		t.Fatalf("EINVAL: calls %v, err %v, disabled %v", *calls, err, r.disabled)
	}
	// Anything else is an error.
	r, _ = fakeReleaser(8<<20, smapsFixture, syscall.EPERM)
	if _, err := r.releaseOnce(); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("EPERM: err %v", err)
	}
}

// TestReleaseKeepsMappedData releases a real shared file mapping and reads it
// back: releasing must never change what the mapping holds.
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

	r := newPageReleaser(dir, 1, slog.New(slog.DiscardHandler))
	released, err := r.releaseOnce()
	if err != nil {
		t.Fatal(err)
	}
	if r.disabled {
		t.Skip("this kernel has no MADV_PAGEOUT")
	}
	if released <= 0 {
		t.Fatalf("released %d bytes of a mapping whose pages were all read", released)
	}
	if !bytes.Equal(data, want) {
		t.Fatal("mapping changed after its pages were released")
	}
	n, err := prefetchFile(t.Context(), path)
	if err != nil || n != int64(len(want)) {
		t.Fatalf("prefetch read %d bytes, %v; want %d", n, err, len(want))
	}
	if n, err := prefetchFile(t.Context(), filepath.Join(dir, "missing")); err != nil || n != 0 {
		t.Fatalf("prefetch of a missing file: %d, %v", n, err)
	}
	if strings.HasSuffix(r.dir, "//") {
		t.Fatalf("releaser dir %q", r.dir)
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

	if _, err := r.check(); err != nil || smapsReads != 1 || len(*calls) != 2 {
		t.Fatalf("first check: err %v, smaps reads %d, madvise calls %d", err, smapsReads, len(*calls))
	}
	fileKB += 7 * 1024 // grown by less than the threshold
	if _, err := r.check(); err != nil || smapsReads != 1 {
		t.Fatalf("after 7 MiB: err %v, smaps reads %d, want 1", err, smapsReads)
	}
	fileKB += 2 * 1024 // 9 MiB since the last release
	if _, err := r.check(); err != nil || smapsReads != 2 || len(*calls) != 4 {
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

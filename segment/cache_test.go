package segment

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
)

func newTestCache(t *testing.T, opts Options) *Cache {
	t.Helper()
	c, err := NewCache(filepath.Join(t.TempDir(), "segments"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// openFilesUnder counts this process's open descriptors on files under dir,
// or returns -1 when the platform does not say.
func openFilesUnder(t *testing.T, dir string) int {
	t.Helper()
	if runtime.GOOS != "linux" {
		return -1
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	n := 0
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			n++
		}
	}
	return n
}

// dirtySeconds returns the seconds the cache still owes an fsync.
func dirtySeconds(c *Cache) (seconds int, dir bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.dirty), c.dirDirty
}

func TestCacheAppendAndReadBack(t *testing.T) {
	c := newTestCache(t, Options{})
	const second = 1732245600
	batches := [][]Record{
		{{Type: TypeMessage, Index: 1, Payload: []byte("one")}},
		{{Type: TypeMessage, Index: 2, Payload: []byte("two")}, {Type: TypeLease, Index: 2, Payload: []byte("lease")}},
		{{Type: TypeTombstone, Index: 3, Payload: nil}},
		{},
		{{Type: TypeMessage, Index: 4, Payload: make([]byte, 10000)}},
	}
	wantOff := int64(HeaderSize)
	var all []Record
	var offs []int64
	for i, b := range batches {
		off, end, err := c.Append(second, b)
		if err != nil {
			t.Fatalf("Append batch %d: %v", i, err)
		}
		if off != wantOff {
			t.Errorf("batch %d written at %d, want %d", i, off, wantOff)
		}
		for _, r := range b {
			offs = append(offs, wantOff)
			all = append(all, r)
			wantOff += int64(r.Size())
		}
		if end != wantOff {
			t.Errorf("batch %d: end %d, want %d", i, end, wantOff)
		}
		if size, err := c.Size(second); err != nil || size != end {
			t.Errorf("Size after batch %d = %d, %v; want %d", i, size, err, end)
		}
	}

	path := c.Path(second)
	if want := filepath.Join(c.Dir(), "001732245600.seg"); path != want {
		t.Errorf("Path = %q, want %q", path, want)
	}
	for i, off := range offs {
		r, err := ReadAt(path, off)
		if err != nil {
			t.Fatalf("ReadAt(%d): %v", off, err)
		}
		checkRecord(t, fmt.Sprintf("record %d", i), r, all[i])
	}
	s, entries, err := ReadFile(path)
	if err != nil || s != second {
		t.Fatalf("ReadFile = %d, %v", s, err)
	}
	checkEntries(t, "ReadFile", entries, all, offs)
}

func TestCacheAppendEncoded(t *testing.T) {
	c := newTestCache(t, Options{})
	recs := testRecords(3)
	var buf []byte
	for _, r := range recs {
		buf = AppendRecord(buf, r)
	}
	off, end, err := c.AppendEncoded(5, buf)
	if err != nil || off != HeaderSize || end != HeaderSize+int64(len(buf)) {
		t.Fatalf("AppendEncoded = %d, %d, %v; want %d, %d, nil", off, end, err, HeaderSize, HeaderSize+len(buf))
	}
	_, entries, err := ReadFile(c.Path(5))
	if err != nil || len(entries) != len(recs) {
		t.Fatalf("ReadFile = %d entries, %v", len(entries), err)
	}
}

func TestCacheSizeOfMissingFile(t *testing.T) {
	c := newTestCache(t, Options{})
	if size, err := c.Size(123); err != nil || size != 0 {
		t.Errorf("Size(no file) = %d, %v; want 0, nil", size, err)
	}
}

func TestCacheReopensExistingFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "segs")
	c1, err := NewCache(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r1 := Record{Type: TypeMessage, Index: 1, Payload: []byte("first")}
	if _, _, err := c1.Append(9, []Record{r1}); err != nil {
		t.Fatal(err)
	}
	if err := c1.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}

	c2, err := NewCache(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r2 := Record{Type: TypeMessage, Index: 2, Payload: []byte("second")}
	off, _, err := c2.Append(9, []Record{r2})
	if want := int64(HeaderSize + r1.Size()); err != nil || off != want {
		t.Fatalf("Append to an existing file = %d, %v; want %d", off, err, want)
	}
	_, entries, err := ReadFile(c2.Path(9))
	if err != nil {
		t.Fatal(err)
	}
	checkEntries(t, "ReadFile", entries, []Record{r1, r2}, []int64{HeaderSize, HeaderSize + int64(r1.Size())})
}

// TestCacheLRUBound appends to many more seconds than the cache keeps open,
// revisiting evicted files, and checks that the bound holds at all times and
// that nothing written through an evicted handle is lost.
func TestCacheLRUBound(t *testing.T) {
	const maxOpen, seconds, rounds = 4, 100, 3
	c := newTestCache(t, Options{MaxOpen: maxOpen})
	base := int64(1732245600)

	type written struct {
		off int64
		rec Record
	}
	want := make(map[int64][]written)
	for round := 0; round < rounds; round++ {
		for i := 0; i < seconds; i++ {
			// Visit the seconds in a scattered order so that both fresh and
			// evicted files are appended to.
			s := base + int64((i*37+round*11)%seconds)
			rec := Record{
				Type:    RecordType(1 + (i+round)%3),
				Index:   uint64(round*seconds + i + 1),
				Payload: []byte(fmt.Sprintf("second %d round %d", s, round)),
			}
			off, _, err := c.Append(s, []Record{rec})
			if err != nil {
				t.Fatalf("Append(%d): %v", s, err)
			}
			want[s] = append(want[s], written{off, rec})
			if n := c.OpenHandles(); n > maxOpen {
				t.Fatalf("after appending to second %d: %d open handles, bound %d", s, n, maxOpen)
			}
			if n := openFilesUnder(t, c.Dir()); n > maxOpen {
				t.Fatalf("after appending to second %d: %d descriptors open in %s, bound %d", s, n, c.Dir(), maxOpen)
			}
		}
	}
	if n := c.OpenHandles(); n != maxOpen {
		t.Errorf("OpenHandles = %d after touching %d files, want %d", n, seconds, maxOpen)
	}

	list, err := c.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != seconds {
		t.Fatalf("List has %d files, want %d", len(list), seconds)
	}
	for s, ws := range want {
		path := c.Path(s)
		second, entries, err := ReadFile(path)
		if err != nil {
			t.Fatalf("ReadFile(%d): %v", s, err)
		}
		if second != s || len(entries) != rounds {
			t.Fatalf("ReadFile(%d) = second %d with %d entries; want %d with %d", s, second, len(entries), s, rounds)
		}
		for i, w := range ws {
			if entries[i].Offset != w.off {
				t.Errorf("second %d entry %d at %d, Append said %d", s, i, entries[i].Offset, w.off)
			}
			checkRecord(t, fmt.Sprintf("second %d entry %d", s, i), entries[i].Record, w.rec)
			r, err := ReadAt(path, w.off)
			if err != nil {
				t.Fatalf("ReadAt(%d, %d): %v", s, w.off, err)
			}
			checkRecord(t, fmt.Sprintf("ReadAt(%d, %d)", s, w.off), r, w.rec)
		}
	}
}

func TestCacheSyncCoversEvictedFiles(t *testing.T) {
	const maxOpen, seconds = 2, 10
	c := newTestCache(t, Options{MaxOpen: maxOpen})
	for s := int64(0); s < seconds; s++ {
		if _, _, err := c.Append(100+s, testRecords(2)); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.OpenHandles(); n != maxOpen {
		t.Fatalf("OpenHandles = %d, want %d", n, maxOpen)
	}
	// Every second is owed an fsync, including the eight whose handles were
	// evicted, and so is the directory, which gained ten files.
	if n, dir := dirtySeconds(c); n != seconds || !dir {
		t.Fatalf("before Sync: %d dirty seconds, dir dirty %v; want %d, true", n, dir, seconds)
	}
	if err := c.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if n, dir := dirtySeconds(c); n != 0 || dir {
		t.Fatalf("after Sync: %d dirty seconds, dir dirty %v; want 0, false", n, dir)
	}
	// Syncing evicted files must not leave their descriptors open.
	if n := openFilesUnder(t, c.Dir()); n > maxOpen {
		t.Errorf("%d descriptors open after Sync, bound %d", n, maxOpen)
	}
	// Nothing written since: a second Sync has nothing to do.
	if err := c.Sync(); err != nil {
		t.Fatalf("second Sync: %v", err)
	}
	if n, dir := dirtySeconds(c); n != 0 || dir {
		t.Fatalf("after second Sync: %d dirty seconds, dir dirty %v", n, dir)
	}

	// A write to an existing file dirties it but not the directory.
	if _, _, err := c.Append(100, testRecords(1)); err != nil {
		t.Fatal(err)
	}
	if n, dir := dirtySeconds(c); n != 1 || dir {
		t.Fatalf("after one append: %d dirty seconds, dir dirty %v; want 1, false", n, dir)
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	for s := int64(0); s < seconds; s++ {
		want := 2
		if s == 0 {
			want = 3
		}
		if _, entries, err := ReadFile(c.Path(100 + s)); err != nil || len(entries) != want {
			t.Errorf("ReadFile(%d) = %d entries, %v; want %d", 100+s, len(entries), err, want)
		}
	}
}

// TestCacheSyncSurvivesCrash checks on a strict in-memory file system,
// which forgets everything not synced when it "crashes", that Sync makes
// durable the writes to files whose handles were evicted, the files'
// directory entries, and nothing written after it.
func TestCacheSyncSurvivesCrash(t *testing.T) {
	fs := vfs.NewStrictMem()
	const dir = "/data/segments"
	c, err := NewCache(dir, Options{MaxOpen: 2, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	recs := testRecords(2)
	var want []int64
	for s := int64(100); s < 110; s++ {
		if _, _, err := c.Append(s, recs); err != nil {
			t.Fatal(err)
		}
		want = append(want, s)
	}
	if err := c.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	// Written after the Sync: lost in the crash.
	if _, _, err := c.Append(100, testRecords(1)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Append(500, recs); err != nil {
		t.Fatal(err)
	}

	fs.ResetToSyncedState()

	got, err := ListFS(fs, dir)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("files after the crash = %v, %v; want %v", got, err, want)
	}
	for _, s := range want {
		second, entries, err := ReadFileFS(fs, c.Path(s))
		if err != nil {
			t.Fatalf("ReadFileFS(%d) after the crash: %v", s, err)
		}
		if second != s || len(entries) != len(recs) {
			t.Errorf("%s after the crash: second %d, %d records; want %d, %d", FileName(s), second, len(entries), s, len(recs))
		}
		for i, e := range entries {
			checkRecord(t, fmt.Sprintf("%s record %d", FileName(s), i), e.Record, recs[i])
		}
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestCacheSyncEveryBatch(t *testing.T) {
	c := newTestCache(t, Options{MaxOpen: 2, Sync: SyncEveryBatch})
	recs := testRecords(3)
	for s := int64(1); s <= 5; s++ {
		off, end, err := c.Append(s, recs)
		if err != nil {
			t.Fatalf("Append(%d): %v", s, err)
		}
		if off != HeaderSize {
			t.Errorf("Append(%d) at %d, want %d", s, off, HeaderSize)
		}
		// The file was synced by Append itself: nothing is left for Sync.
		if n, _ := dirtySeconds(c); n != 0 {
			t.Fatalf("after Append(%d) with SyncEveryBatch: %d dirty seconds, want 0", s, n)
		}
		if _, entries, err := ReadFile(c.Path(s)); err != nil || len(entries) != len(recs) {
			t.Fatalf("ReadFile(%d) = %d entries, %v", s, len(entries), err)
		}
		if size, err := c.Size(s); err != nil || size != end {
			t.Errorf("Size(%d) = %d, %v; want %d", s, size, err, end)
		}
	}
	// Nothing is left for Sync, not even the new directory entries.
	if n, dir := dirtySeconds(c); n != 0 || dir {
		t.Errorf("before Sync: %d dirty seconds, dir dirty %v; want 0, false", n, dir)
	}
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestCacheSyncEveryBatchSurvivesCrash checks that with SyncEveryBatch an
// Append is durable when it returns, without any Sync: the file's bytes and,
// for a new file, its directory entry.
func TestCacheSyncEveryBatchSurvivesCrash(t *testing.T) {
	fs := vfs.NewStrictMem()
	const dir = "/data/segments"
	c, err := NewCache(dir, Options{MaxOpen: 2, FS: fs, Sync: SyncEveryBatch})
	if err != nil {
		t.Fatal(err)
	}
	recs := testRecords(3)
	for s := int64(1); s <= 5; s++ {
		for _, r := range recs {
			if _, _, err := c.Append(s, []Record{r}); err != nil {
				t.Fatal(err)
			}
		}
	}

	fs.ResetToSyncedState()

	got, err := ListFS(fs, dir)
	if want := []int64{1, 2, 3, 4, 5}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("files after the crash = %v, %v; want %v", got, err, want)
	}
	for s := int64(1); s <= 5; s++ {
		_, entries, err := ReadFileFS(fs, c.Path(s))
		if err != nil || len(entries) != len(recs) {
			t.Errorf("%s after the crash: %d records, %v; want %d", FileName(s), len(entries), err, len(recs))
		}
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestCacheRemove(t *testing.T) {
	c := newTestCache(t, Options{MaxOpen: 2})
	for _, s := range []int64{10, 20, 30} {
		if _, _, err := c.Append(s, testRecords(1)); err != nil {
			t.Fatal(err)
		}
	}
	// 10 was evicted, 30 is open; remove one of each.
	for _, s := range []int64{10, 30} {
		if err := c.Remove(s); err != nil {
			t.Fatalf("Remove(%d): %v", s, err)
		}
		if _, err := os.Stat(c.Path(s)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Remove(%d): stat = %v, want not exist", s, err)
		}
		if size, err := c.Size(s); err != nil || size != 0 {
			t.Errorf("Size(%d) after Remove = %d, %v; want 0, nil", s, size, err)
		}
	}
	if n := c.OpenHandles(); n != 1 {
		t.Errorf("OpenHandles = %d after removing the open file, want 1", n)
	}
	if got, err := c.List(); err != nil || !reflect.DeepEqual(got, []int64{20}) {
		t.Errorf("List = %v, %v; want [20]", got, err)
	}
	// Removing a missing file is not an error.
	if err := c.Remove(10); err != nil {
		t.Errorf("Remove(missing) = %v", err)
	}
	if err := c.Remove(999); err != nil {
		t.Errorf("Remove(never existed) = %v", err)
	}
	// The removed files are no longer owed an fsync, and Sync does not bring
	// them back.
	if err := c.Sync(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.List(); err != nil || !reflect.DeepEqual(got, []int64{20}) {
		t.Errorf("List after Sync = %v, %v; want [20]", got, err)
	}
	// A removed second starts afresh.
	off, _, err := c.Append(10, testRecords(1))
	if err != nil || off != HeaderSize {
		t.Errorf("Append after Remove = %d, %v; want %d", off, err, HeaderSize)
	}
}

func TestCacheTruncate(t *testing.T) {
	for _, evicted := range []bool{false, true} {
		t.Run(fmt.Sprintf("evicted=%v", evicted), func(t *testing.T) {
			c := newTestCache(t, Options{MaxOpen: 2})
			const second = 77
			a := []Record{{Type: TypeMessage, Index: 1, Payload: []byte("kept one")}, {Type: TypeMessage, Index: 1, Payload: []byte("kept two")}}
			b := []Record{{Type: TypeMessage, Index: 2, Payload: []byte("rolled back")}}
			_, endA, err := c.Append(second, a)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.Append(second, b); err != nil {
				t.Fatal(err)
			}
			if evicted {
				for s := int64(1); s <= 2; s++ {
					if _, _, err := c.Append(second+s, testRecords(1)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := c.Truncate(second, endA); err != nil {
				t.Fatalf("Truncate: %v", err)
			}
			if size, err := c.Size(second); err != nil || size != endA {
				t.Errorf("Size after Truncate = %d, %v; want %d", size, err, endA)
			}
			if st, err := os.Stat(c.Path(second)); err != nil || st.Size() != endA {
				t.Errorf("file after Truncate: %v, %v; want %d bytes", st, err, endA)
			}
			cRec := Record{Type: TypeLease, Index: 3, Payload: []byte("after truncate")}
			off, end, err := c.Append(second, []Record{cRec})
			if err != nil || off != endA || end != endA+int64(cRec.Size()) {
				t.Fatalf("Append after Truncate = %d, %d, %v; want %d, %d", off, end, err, endA, endA+int64(cRec.Size()))
			}
			_, entries, err := ReadFile(c.Path(second))
			if err != nil {
				t.Fatal(err)
			}
			checkEntries(t, "ReadFile", entries, []Record{a[0], a[1], cRec},
				[]int64{HeaderSize, HeaderSize + int64(a[0].Size()), endA})
			if err := c.Sync(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestCacheTruncateToHeaderRemoves(t *testing.T) {
	for _, size := range []int64{0, HeaderSize} {
		c := newTestCache(t, Options{})
		if _, _, err := c.Append(5, testRecords(2)); err != nil {
			t.Fatal(err)
		}
		if err := c.Truncate(5, size); err != nil {
			t.Fatalf("Truncate(%d): %v", size, err)
		}
		if _, err := os.Stat(c.Path(5)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Truncate(%d): stat = %v, want the file removed", size, err)
		}
		if n := c.OpenHandles(); n != 0 {
			t.Errorf("Truncate(%d): %d handles open", size, n)
		}
	}
}

func TestCacheTruncateBeyondEnd(t *testing.T) {
	c := newTestCache(t, Options{})
	_, end, err := c.Append(5, testRecords(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Truncate(5, end+10); err == nil {
		t.Error("Truncate beyond the end of the file succeeded")
	}
	if _, entries, err := ReadFile(c.Path(5)); err != nil || len(entries) != 2 {
		t.Errorf("file after a refused Truncate: %d entries, %v", len(entries), err)
	}
}

func TestCacheListAndListDir(t *testing.T) {
	c := newTestCache(t, Options{MaxOpen: 3})
	seconds := []int64{1732245605, 7, 1732245600, 999999999999, 0, 42, 1732245601}
	for _, s := range seconds {
		if _, _, err := c.Append(s, testRecords(1)); err != nil {
			t.Fatal(err)
		}
	}
	// Files that are not segments are ignored.
	for _, name := range []string{"notes.txt", FileName(8) + ".tmp", "abc.seg", "-00000000001.seg"} {
		if err := os.WriteFile(filepath.Join(c.Dir(), name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := []int64{0, 7, 42, 1732245600, 1732245601, 1732245605, 999999999999}
	got, err := c.List()
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("List = %v, %v; want %v", got, err, want)
	}
	got, err = ListDir(c.Dir())
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ListDir = %v, %v; want %v", got, err, want)
	}

	empty := t.TempDir()
	if got, err := ListDir(empty); err != nil || len(got) != 0 {
		t.Errorf("ListDir(empty) = %v, %v", got, err)
	}
	if _, err := ListDir(filepath.Join(empty, "missing")); err == nil {
		t.Error("ListDir(missing dir) succeeded")
	}
}

// TestSlotReuse checks that a second and the second one wheel revolution
// (7200 one-second slots) later live in different files whose records never
// mix, whichever handles happen to be open.
func TestSlotReuse(t *testing.T) {
	const revolution = 7200
	c := newTestCache(t, Options{MaxOpen: 1})
	s1 := int64(1732245600)
	s2 := s1 + revolution
	if FileName(s1) == FileName(s2) || c.Path(s1) == c.Path(s2) {
		t.Fatalf("seconds %d and %d share file %s", s1, s2, FileName(s1))
	}
	want := map[int64][]Record{}
	for i := 0; i < 6; i++ {
		s := s1
		if i%2 == 1 {
			s = s2
		}
		r := Record{Type: TypeMessage, Index: uint64(i + 1), Payload: []byte(fmt.Sprintf("for %d", s))}
		if _, _, err := c.Append(s, []Record{r}); err != nil {
			t.Fatal(err)
		}
		want[s] = append(want[s], r)
	}
	for _, s := range []int64{s1, s2} {
		second, entries, err := ReadFile(c.Path(s))
		if err != nil {
			t.Fatal(err)
		}
		if second != s {
			t.Errorf("%s: header names %d, want %d", FileName(s), second, s)
		}
		if len(entries) != len(want[s]) {
			t.Fatalf("%s: %d records, want %d", FileName(s), len(entries), len(want[s]))
		}
		for i, e := range entries {
			checkRecord(t, fmt.Sprintf("%s record %d", FileName(s), i), e.Record, want[s][i])
		}
	}

	// Removing one revolution's file leaves the other alone.
	if err := c.Remove(s1); err != nil {
		t.Fatal(err)
	}
	if _, entries, err := ReadFile(c.Path(s2)); err != nil || len(entries) != 3 {
		t.Errorf("after removing %d: %s has %d records, %v", s1, FileName(s2), len(entries), err)
	}

}

// TestCacheConcurrentAppends runs appends from several goroutines to a small
// set of files through a tiny cache; run with -race.
func TestCacheConcurrentAppends(t *testing.T) {
	const workers, batches, files = 8, 40, 5
	c := newTestCache(t, Options{MaxOpen: 2})
	type batch struct {
		second int64
		off    int64
		recs   []Record
	}
	results := make([][]batch, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < batches; i++ {
				s := int64((w + i) % files)
				recs := []Record{
					{Type: TypeMessage, Index: uint64(w*1000 + i), Payload: []byte(fmt.Sprintf("w%d b%d r0", w, i))},
					{Type: TypeLease, Index: uint64(w*1000 + i), Payload: []byte(fmt.Sprintf("w%d b%d r1", w, i))},
				}
				off, _, err := c.Append(s, recs)
				if err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				results[w] = append(results[w], batch{s, off, recs})
				if i%10 == 0 {
					if err := c.Sync(); err != nil {
						t.Errorf("Sync: %v", err)
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	total := 0
	for s := int64(0); s < files; s++ {
		_, entries, err := ReadFile(c.Path(s))
		if err != nil {
			t.Fatal(err)
		}
		total += len(entries)
	}
	if total != workers*batches*2 {
		t.Errorf("%d records on disk, want %d", total, workers*batches*2)
	}
	// Each batch is contiguous at the offset its Append returned.
	for _, rs := range results {
		for _, b := range rs {
			off := b.off
			for _, want := range b.recs {
				got, err := ReadAt(c.Path(b.second), off)
				if err != nil {
					t.Fatal(err)
				}
				checkRecord(t, fmt.Sprintf("second %d offset %d", b.second, off), got, want)
				off += int64(want.Size())
			}
		}
	}
}

func TestCacheReadRecord(t *testing.T) {
	c := newTestCache(t, Options{MaxOpen: 2})
	recs := []Record{{Type: TypeMessage, Index: 7, Payload: []byte("first")}, {Type: TypeLease, Index: 8, Payload: []byte("second")}}
	off, _, err := c.Append(100, recs)
	if err != nil {
		t.Fatal(err)
	}
	second := off + int64(recs[0].Size())
	// Through the open handle, then again after evicting it.
	for round := 0; round < 2; round++ {
		for _, want := range []struct {
			off int64
			rec Record
		}{{off, recs[0]}, {second, recs[1]}} {
			got, err := c.ReadRecord(100, want.off)
			if err != nil || !reflect.DeepEqual(got, want.rec) {
				t.Fatalf("round %d: ReadRecord(100, %d) = %+v, %v; want %+v", round, want.off, got, err, want.rec)
			}
		}
		for s := int64(200); s < 203; s++ { // evicts 100
			if _, _, err := c.Append(s, recs[:1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := c.ReadRecord(100, second+1); err == nil {
		t.Fatal("reading at a bad offset succeeded")
	}
	if _, err := c.ReadRecord(999, HeaderSize); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reading a missing file: %v, want ErrNotExist", err)
	}
	if _, err := os.Stat(c.Path(999)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reading a missing file created it: %v", err)
	}
	if n := c.OpenHandles(); n > 2 {
		t.Fatalf("%d handles open, bound is 2", n)
	}
}

// TestCacheStartsWriteback checks that write-back is started for the files
// appended to, once WritebackBytes have been appended, and not before; and
// that the real call on an OS file leaves its bytes intact.
func TestCacheStartsWriteback(t *testing.T) {
	c := newTestCache(t, Options{WritebackBytes: 100, MaxOpen: 2})
	var kicked []string
	real := c.kick
	c.kick = func(f vfs.File) {
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		kicked = append(kicked, st.Name())
		real(f) // sync_file_range on Linux: must not fail the append
	}
	buf := make([]byte, 40)
	for _, s := range []int64{10, 11, 10} {
		if _, _, err := c.AppendEncoded(s, buf); err != nil {
			t.Fatal(err)
		}
	}
	if len(kicked) != 2 || !slices.Contains(kicked, FileName(10)) || !slices.Contains(kicked, FileName(11)) {
		t.Fatalf("after 120 bytes to two files, write-back started for %v", kicked)
	}
	kicked = nil
	if _, _, err := c.AppendEncoded(12, buf); err != nil {
		t.Fatal(err)
	}
	if len(kicked) != 0 {
		t.Fatalf("write-back started again after 40 bytes: %v", kicked)
	}
	// Files evicted from the handle cache meanwhile are left to Sync.
	for _, s := range []int64{13, 14} {
		if _, _, err := c.AppendEncoded(s, buf); err != nil {
			t.Fatal(err)
		}
	}
	if len(kicked) != 2 || slices.Contains(kicked, FileName(12)) {
		t.Fatalf("write-back started for %v; the file of second 12 was closed", kicked)
	}
	if size, err := c.Size(10); err != nil || size != HeaderSize+80 {
		t.Fatalf("file of second 10 holds %d bytes (%v), want %d", size, err, HeaderSize+80)
	}
}

// TestCacheSyncReportsFileAndDirErrors checks that a Sync whose file and
// directory fsyncs both fail reports both failures and keeps everything it
// did not make durable owed, so the next Sync retries it.
func TestCacheSyncReportsFileAndDirErrors(t *testing.T) {
	errFile := errors.New("injected file fsync failure")
	errDir := errors.New("injected directory fsync failure")
	var failing atomic.Bool // off while the cache is created
	var c *Cache
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op != errorfs.OpFileSync || !failing.Load() {
			return nil
		}
		switch path {
		case c.Path(103):
			return errFile
		case c.Dir():
			return errDir
		}
		return nil
	}))
	c, err := NewCache("segments", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for s := int64(100); s < 108; s++ {
		if _, _, err := c.Append(s, testRecords(1)); err != nil {
			t.Fatal(err)
		}
	}
	failing.Store(true)
	err = c.Sync()
	if !errors.Is(err, errFile) || !errors.Is(err, errDir) {
		t.Fatalf("Sync = %v; want both %q and %q", err, errFile, errDir)
	}
	if n, dir := dirtySeconds(c); n == 0 || !dir {
		t.Fatalf("after failed Sync: %d dirty seconds, dir dirty %v; want the failed file and the directory still owed", n, dir)
	}
	failing.Store(false)
	if err := c.Sync(); err != nil {
		t.Fatalf("retried Sync: %v", err)
	}
	if n, dir := dirtySeconds(c); n != 0 || dir {
		t.Fatalf("after retried Sync: %d dirty seconds, dir dirty %v; want 0, false", n, dir)
	}
}

// BenchmarkCacheReadRecord reads records of a typical size (a message with
// a 100-byte body) from a slot file in the page cache, as a lease does on
// every replica.
func BenchmarkCacheReadRecord(b *testing.B) {
	c, err := NewCache(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	recs := make([]Record, 1000)
	for i := range recs {
		recs[i] = Record{Type: TypeMessage, Index: uint64(i + 1), Payload: bytes.Repeat([]byte{'m'}, 160)}
	}
	off, _, err := c.Append(7, recs)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		k := i % len(recs)
		if _, err := c.ReadRecord(7, off+int64(k*recs[0].Size())); err != nil {
			b.Fatal(err)
		}
	}
}

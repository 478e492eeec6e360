package raftlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// spareCount counts the spare events of a log (Options.spareEvent).
type spareCount struct {
	mu             sync.Mutex
	prepared, used int
}

func (c *spareCount) event(ev spareEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch ev {
	case sparePrepared:
		c.prepared++
	case spareUsed:
		c.used++
	}
}

func (c *spareCount) get() (prepared, used int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.prepared, c.used
}

// openTestLog opens the log in dir with segments of the least size,
// counting its spare events in c (when not nil).
func openTestLog(t *testing.T, dir string, c *spareCount) *Log {
	t.Helper()
	opts := Options{SegmentBytes: MinSegmentBytes}
	if c != nil {
		opts.spareEvent = c.event
	}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testEntry is entry i of the test logs: every field varies with i.
func testEntry(i uint64) *raft.Log {
	l := &raft.Log{Index: i, Term: i / 3, Type: raft.LogType(i % 6), Data: bytes.Repeat([]byte{byte(i)}, int(i%5)*100)}
	if i%2 == 0 {
		l.Extensions = []byte{1, 2, byte(i)}
	}
	if i%3 != 0 {
		l.AppendedAt = time.Unix(1_700_000_000, int64(i)*1000).UTC()
	}
	if len(l.Data) == 0 {
		l.Data = nil
	}
	return l
}

func wantEntries(t *testing.T, s raft.LogStore, from, to uint64) {
	t.Helper()
	for i := from; i <= to; i++ {
		var got raft.Log
		if err := s.GetLog(i, &got); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		want := testEntry(i)
		if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type || !bytes.Equal(got.Data, want.Data) ||
			!bytes.Equal(got.Extensions, want.Extensions) || !got.AppendedAt.Equal(want.AppendedAt) {
			t.Fatalf("entry %d = %+v, want %+v", i, got, *want)
		}
	}
}

func wantBounds(t *testing.T, s raft.LogStore, first, last uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if f != first || l != last {
		t.Fatalf("log spans %d to %d, want %d to %d", f, l, first, last)
	}
}

func storeRange(t *testing.T, s raft.LogStore, from, to uint64) {
	t.Helper()
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, testEntry(i))
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
}

// TestLogBounds covers the entries: read back field for field, a head
// truncation after a snapshot and a tail truncation of a conflict, after
// which the deleted entries are not found (raft-wal alone still reads a
// truncated head from the segment being written), and a reopen.
func TestLogBounds(t *testing.T) {
	dir := t.TempDir()
	e := openTestLog(t, dir, nil)
	storeRange(t, e, 1, 100)
	wantEntries(t, e, 1, 100)
	if err := e.DeleteRange(1, 50); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteRange(91, 100); err != nil {
		t.Fatal(err)
	}
	wantBounds(t, e, 51, 90)
	var l raft.Log
	for _, gone := range []uint64{1, 30, 50, 91, 100} {
		if err := e.GetLog(gone, &l); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("GetLog(%d) of a deleted entry: %v, want raft.ErrLogNotFound", gone, err)
		}
	}
	storeRange(t, e, 91, 120) // the leader's entries replace the conflict
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTestLog(t, dir, nil)
	defer e.Close()
	wantBounds(t, e, 51, 120)
	wantEntries(t, e, 51, 120)
	if err := e.GetLog(50, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(50) after a reopen: %v, want raft.ErrLogNotFound", err)
	}
}

// TestStableKeepsTermAndVote writes the term and vote, and reads them back
// after a reopen.
func TestStableKeepsTermAndVote(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, nil)
	if err := l.Stable().SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	if err := l.Stable().Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, dir, nil)
	defer l.Close()
	if term, err := l.Stable().GetUint64([]byte("CurrentTerm")); err != nil || term != 7 {
		t.Fatalf("term %d, %v; want 7", term, err)
	}
	if v, err := l.Stable().Get([]byte("LastVoteCand")); err != nil || string(v) != "n2" {
		t.Fatalf("vote %q, %v; want n2", v, err)
	}
}

// writeStable creates the stable store in dir with a term and vote, and
// returns its path and size.
func writeStable(t *testing.T, dir string) (string, int64) {
	t.Helper()
	l := openTestLog(t, dir, nil)
	for i := range 50 {
		if err := l.Stable().SetUint64([]byte("CurrentTerm"), uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, stableName)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, fi.Size()
}

// A few bytes off the stable store's end are free space (bolt grows the
// file ahead of use): it opens with its term.
func TestStableTornTail(t *testing.T) {
	dir := t.TempDir()
	path, size := writeStable(t, dir)
	if err := os.Truncate(path, size-5); err != nil {
		t.Fatal(err)
	}
	l := openTestLog(t, dir, nil)
	defer l.Close()
	if term, err := l.Stable().GetUint64([]byte("CurrentTerm")); err != nil || term != 49 {
		t.Fatalf("term %d, %v; want 49", term, err)
	}
}

// A stable store cut into the pages it uses is refused with an error that
// names the file, not a crash.
func TestStableCutShort(t *testing.T) {
	dir := t.TempDir()
	path, size := writeStable(t, dir)
	const keep = 4*4096 + 100 // the two meta pages and a little more
	if size <= keep {
		t.Fatalf("raft.db is only %d bytes", size)
	}
	if err := os.Truncate(path, keep); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, Options{SegmentBytes: MinSegmentBytes})
	if err == nil || !strings.Contains(err.Error(), "raft.db") {
		t.Fatalf("opening a stable store cut into its pages: %v; want an error naming the file", err)
	}
}

func TestOpenRefusesSegmentSize(t *testing.T) {
	for _, size := range []int{MinSegmentBytes - 1, MaxSegmentBytes + 1} {
		if _, err := Open(t.TempDir(), Options{SegmentBytes: size}); !errors.Is(err, ErrInvalidSize) {
			t.Fatalf("segment size %d: %v, want ErrInvalidSize", size, err)
		}
	}
}

package replication

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/transport/api"
)

func openTestLogStore(t *testing.T, dir string) *logStore {
	t.Helper()
	s, err := openLogStore(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s
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

func wantEntry(t *testing.T, s raft.LogStore, i uint64) {
	t.Helper()
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

func wantEntries(t *testing.T, s raft.LogStore, from, to uint64) {
	t.Helper()
	for i := from; i <= to; i++ {
		wantEntry(t, s, i)
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

// TestLogStore covers the LogStore contract as Raft uses it: bounds of an
// empty and a truncated log, entries read back field for field, head and
// tail truncations, and a reopen.
func TestLogStore(t *testing.T) {
	dir := t.TempDir()
	s := openTestLogStore(t, dir)
	wantBounds(t, s, 0, 0)
	var l raft.Log
	if err := s.GetLog(1, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog on an empty log: %v, want ErrLogNotFound", err)
	}
	storeRange(t, s, 1, 40)
	if err := s.StoreLog(testEntry(41)); err != nil {
		t.Fatal(err)
	}
	wantBounds(t, s, 1, 41)
	wantEntries(t, s, 1, 41)
	// Head truncation after a snapshot, tail truncation of a conflict.
	if err := s.DeleteRange(1, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(36, 41); err != nil {
		t.Fatal(err)
	}
	wantBounds(t, s, 11, 35)
	if err := s.GetLog(10, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog of a deleted entry: %v, want ErrLogNotFound", err)
	}
	storeRange(t, s, 36, 50) // the leader's entries replace the conflict
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestLogStore(t, dir)
	defer s.Close()
	wantBounds(t, s, 11, 50)
	wantEntries(t, s, 11, 50)
	if err := s.DeleteRange(45, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	wantBounds(t, s, 11, 44)
	if err := s.DeleteRange(11, 44); err != nil {
		t.Fatal(err)
	}
	wantBounds(t, s, 0, 0)
}

// TestLogStoreDeleteDropsTables checks that deleting the head of the log,
// as Raft does after each snapshot, frees its disk space: the tables the
// deletion covers are dropped, and of the live entries only those in the
// table that straddles the cut (one memtable's worth at most) are rewritten.
func TestLogStoreDeleteDropsTables(t *testing.T) {
	s := openTestLogStore(t, t.TempDir())
	defer s.Close()
	data := make([]byte, 8<<10)
	for i := range data {
		data[i] = byte(i * 7919 % 251) // no run Pebble could make smaller
	}
	const n, keep = 4000, 500
	for i := uint64(1); i <= n; i += 10 {
		var logs []*raft.Log
		for j := i; j < i+10; j++ {
			logs = append(logs, &raft.Log{Index: j, Term: 1, Data: data})
		}
		if err := s.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteRange(1, n-keep); err != nil {
		t.Fatal(err)
	}
	wantBounds(t, s, n-keep+1, n)
	live := int64(keep * len(data))
	WaitFor(t, 30*time.Second, "the deleted entries' tables to be dropped", func() bool {
		return int64(s.db.Metrics().Total().Size) <= live*3/2
	})
	if written := int64(s.db.Metrics().Total().BytesCompacted); written > 5<<20 {
		t.Errorf("compactions wrote %d bytes; more than the one 4 MiB table that straddles the cut", written)
	}
}

// TestLogStoreRemovesLeftoverDeletions checks that a deletion's table that
// a crash left before its ingestion is removed when the store opens.
func TestLogStoreRemovesLeftoverDeletions(t *testing.T) {
	dir := t.TempDir()
	openTestLogStore(t, dir).Close()
	left := filepath.Join(dir, "000007"+deletionSuffix)
	if err := os.WriteFile(left, []byte("half a table"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := openTestLogStore(t, dir)
	defer s.Close()
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover deletion table still there after open: %v", err)
	}
}

// TestLogStoreConcurrentTruncation stores entries while another goroutine
// deletes the log's head, as Raft's main loop and its snapshot goroutine
// do (run it with -race).
func TestLogStoreConcurrentTruncation(t *testing.T) {
	s := openTestLogStore(t, t.TempDir())
	defer s.Close()
	const n = 600
	stored := make(chan uint64, n)
	errs := make(chan error, 1)
	go func() {
		defer close(stored)
		for i := uint64(1); i <= n; i++ {
			if err := s.StoreLogs([]*raft.Log{testEntry(i)}); err != nil {
				errs <- err
				return
			}
			stored <- i
		}
	}()
	var first uint64 = 1
	for i := range stored {
		if i%50 == 0 && i-first > 60 {
			if err := s.DeleteRange(first, i-50); err != nil {
				t.Fatal(err)
			}
			first = i - 49
		}
	}
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	wantBounds(t, s, first, n)
	wantEntries(t, s, first, n)
}

// TestLogStoreTornTail cuts the newest write-ahead log file in the middle of
// its last entry, as a crash during the write leaves it: the store opens
// without that entry, keeps every entry before it intact, and goes on
// storing after it.
func TestLogStoreTornTail(t *testing.T) {
	dir := t.TempDir()
	s := openTestLogStore(t, dir)
	walSize := func() (string, int64) {
		t.Helper()
		wals, err := filepath.Glob(filepath.Join(dir, "*.log"))
		if err != nil || len(wals) == 0 {
			t.Fatalf("no write-ahead log in %s (%v)", dir, err)
		}
		sort.Strings(wals)
		fi, err := os.Stat(wals[len(wals)-1])
		if err != nil {
			t.Fatal(err)
		}
		return wals[len(wals)-1], fi.Size()
	}
	for i := uint64(1); i <= 28; i++ {
		storeRange(t, s, i, i)
	}
	wal, before := walSize()
	storeRange(t, s, 29, 29) // 400 bytes of data
	if w, after := walSize(); w != wal || after < before+400 {
		t.Fatalf("entry 29 went to %s (%d bytes), not %s after %d bytes", w, after, wal, before)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(wal, before+50); err != nil {
		t.Fatal(err)
	}
	s = openTestLogStore(t, dir)
	defer s.Close()
	wantBounds(t, s, 1, 28)
	wantEntries(t, s, 1, 28)
	storeRange(t, s, 29, 31)
	wantEntries(t, s, 29, 31)
}

// TestLogStoreDamaged checks that a log store that cannot be opened is
// refused with an error naming it and the remedy.
func TestLogStoreDamaged(t *testing.T) {
	dir := t.TempDir()
	s := openTestLogStore(t, dir)
	storeRange(t, s, 1, 5)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	manifests, err := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	if err != nil || len(manifests) == 0 {
		t.Fatalf("no manifest in %s (%v)", dir, err)
	}
	for _, m := range manifests {
		if err := os.WriteFile(m, []byte("not a manifest"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err = openLogStore(dir, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "empty its data dir") {
		t.Fatalf("opening a damaged log store: %v; want an error naming %s and the remedy", err, dir)
	}
}

// TestMigrateBoltLog moves the entries an earlier version kept in raft.db:
// they all arrive and replace whatever the log store held, raft.db keeps
// only the term and vote, a second run
// changes nothing, and a run after a crash that lost the deletion from
// raft.db (the entries copied, but still in bolt) copies them again to the
// same effect.
func TestMigrateBoltLog(t *testing.T) {
	dir := t.TempDir()
	bolt, err := openRaftLog(filepath.Join(dir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	if err := bolt.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	storeRange(t, bolt, 5, 300)
	s := openTestLogStore(t, filepath.Join(dir, "log"))
	defer s.Close()
	// Entries of another history in the log store (a downgrade and an
	// upgrade again, say) must not outlive the migration: bolt's are the log.
	storeRange(t, s, 1, 400)
	log := slog.New(slog.DiscardHandler)
	for run := 0; run < 3; run++ {
		if run == 2 {
			storeRange(t, bolt, 5, 300) // the deletion from raft.db was lost
		}
		if err := migrateBoltLog(bolt, s, log); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		wantBounds(t, s, 5, 300)
		wantEntries(t, s, 5, 300)
		wantBounds(t, bolt, 0, 0)
		if term, err := bolt.GetUint64([]byte("CurrentTerm")); err != nil || term != 7 {
			t.Fatalf("run %d: term %d, %v; want 7 kept in raft.db", run, term, err)
		}
	}
}

func enqueueN(t *testing.T, tn *TestNode, topic string, n int) {
	t.Helper()
	body := "x"
	var msgs []api.Message
	for range n {
		msgs = append(msgs, api.Message{Topic: topic, Payload: api.Payload{Body: &body}, DelayMs: ptr(int64(3600_000))})
	}
	enqueue(t, tn.Client, msgs...)
}

func delayedIn(t *testing.T, n *Node, topic string) int64 {
	t.Helper()
	ts, err := n.Topics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ts {
		if c.Topic == topic {
			return c.Delayed
		}
	}
	return 0
}

// TestNodeUpgradesBoltLog starts a node on a data dir whose Raft entries
// are in raft.db, as an earlier version left it: it moves them, and
// resumes at the same log position with its messages.
func TestNodeUpgradesBoltLog(t *testing.T) {
	c := NewTestCluster(t, 1, nil)
	for range 5 {
		enqueueN(t, c.Leader(), "up", 10)
	}
	last := c.Leader().Node.raft.LastIndex()
	cfg := c.Nodes[0].Cfg
	c.Stop(0)

	// Put the entries back into raft.db and remove the log store.
	logDir := filepath.Join(cfg.DataDir, "raft", "log")
	s := openTestLogStore(t, logDir)
	bolt, err := openRaftLog(filepath.Join(cfg.DataDir, "raft", "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	first, _ := s.FirstIndex()
	if stored, _ := s.LastIndex(); stored != last || first == 0 {
		t.Fatalf("log store spans %d to %d, raft ended at %d", first, stored, last)
	}
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if err := bolt.StoreLog(&l); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	bolt.Close()
	if err := os.RemoveAll(logDir); err != nil {
		t.Fatal(err)
	}

	c.Start(0)
	l := c.Leader()
	if got := l.Node.raft.LastIndex(); got < last {
		t.Fatalf("raft resumed at index %d, before its last entry %d", got, last)
	}
	if got := delayedIn(t, l.Node, "up"); got != 50 {
		t.Fatalf("%d messages delayed after the upgrade, want 50", got)
	}
	enqueueN(t, l, "up", 1)
	if got := delayedIn(t, l.Node, "up"); got != 51 {
		t.Fatalf("%d messages delayed after an enqueue on the upgraded node, want 51", got)
	}
}

// FuzzDecodeLogEntry checks that no stored value makes the entry decoder
// panic, that it fails only with errCorruptEntry, and that whatever it
// accepts survives being encoded again.
func FuzzDecodeLogEntry(f *testing.F) {
	for i := uint64(0); i < 8; i++ {
		f.Add(appendLogEntry(nil, testEntry(i)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var l raft.Log
		if err := decodeLogEntry(b, &l); err != nil {
			if !errors.Is(err, errCorruptEntry) {
				t.Fatalf("error %v is not errCorruptEntry", err)
			}
			return
		}
		enc := appendLogEntry(nil, &l)
		if len(enc) != logEntrySize(&l) {
			t.Fatalf("logEntrySize %d, encoded %d bytes", logEntrySize(&l), len(enc))
		}
		var again raft.Log
		if err := decodeLogEntry(enc, &again); err != nil || again.Term != l.Term || again.Type != l.Type ||
			!bytes.Equal(again.Data, l.Data) || !bytes.Equal(again.Extensions, l.Extensions) || !again.AppendedAt.Equal(l.AppendedAt) {
			t.Fatalf("re-encoding %+v decodes to %+v, %v", l, again, err)
		}
	})
}

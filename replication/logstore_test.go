package replication

import (
	"github.com/cockroachdb/pebble"
	"google.golang.org/protobuf/encoding/protowire"

	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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

func wantEntry(t *testing.T, s logReader, i uint64) {
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

func wantEntries(t *testing.T, s logReader, from, to uint64) {
	t.Helper()
	for i := from; i <= to; i++ {
		wantEntry(t, s, i)
	}
}

func wantBounds(t *testing.T, s logReader, first, last uint64) {
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

// storeOld writes entries from…to into the Pebble log store as the
// previous version did: one synced batch.
func storeOld(t *testing.T, s *logStore, from, to uint64) {
	t.Helper()
	b := s.db.NewBatch()
	defer b.Close()
	for i := from; i <= to; i++ {
		if err := b.Set(logKeyAppend(nil, i), appendLogEntry(nil, testEntry(i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// appendLogEntry encodes l as the previous version stored it (see
// decodeLogEntry).
func appendLogEntry(b []byte, l *raft.Log) []byte {
	b = append(b, logEntryVersion)
	b = protowire.AppendVarint(b, l.Term)
	b = append(b, byte(l.Type))
	var at uint64
	if !l.AppendedAt.IsZero() && l.AppendedAt.UnixNano() > 0 {
		at = uint64(l.AppendedAt.UnixNano())
	}
	b = protowire.AppendVarint(b, at)
	b = protowire.AppendBytes(b, l.Data)
	return protowire.AppendBytes(b, l.Extensions)
}

// TestLogStoreReads reads back what the previous version stored: bounds of
// an empty and a full log, and entries field for field.
func TestLogStoreReads(t *testing.T) {
	dir := t.TempDir()
	s := openTestLogStore(t, dir)
	wantBounds(t, s, 0, 0)
	var l raft.Log
	if err := s.GetLog(1, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog on an empty log: %v, want ErrLogNotFound", err)
	}
	storeOld(t, s, 7, 60)
	wantBounds(t, s, 7, 60)
	wantEntries(t, s, 7, 60)
	if err := s.GetLog(61, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog past the end: %v, want ErrLogNotFound", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTestLogStore(t, dir)
	defer s.Close()
	wantBounds(t, s, 7, 60)
	wantEntries(t, s, 7, 60)
}

// TestLogStoreTornTail cuts the newest write-ahead log file in the middle of
// its last entry, as a crash during the write leaves it: the store opens
// without that entry and keeps every entry before it intact, for the move.
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
		storeOld(t, s, i, i)
	}
	wal, before := walSize()
	storeOld(t, s, 29, 29) // 400 bytes of data
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
}

// TestLogStoreDamaged checks that a log store that cannot be opened is
// refused with an error naming it and the remedy.
func TestLogStoreDamaged(t *testing.T) {
	dir := t.TempDir()
	s := openTestLogStore(t, dir)
	storeOld(t, s, 1, 5)
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
		var again raft.Log
		if err := decodeLogEntry(enc, &again); err != nil || again.Term != l.Term || again.Type != l.Type ||
			!bytes.Equal(again.Data, l.Data) || !bytes.Equal(again.Extensions, l.Extensions) || !again.AppendedAt.Equal(l.AppendedAt) {
			t.Fatalf("re-encoding %+v decodes to %+v, %v", l, again, err)
		}
	})
}

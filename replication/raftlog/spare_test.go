package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// spareReady reads whether a spare is ready, under the spares' lock.
func spareReady(s *spareSegments) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// waitSpare waits until a spare is ready.
func waitSpare(t *testing.T, s *spareSegments) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if spareReady(s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no spare segment became ready within 30 s")
		}
		time.Sleep(time.Millisecond)
	}
}

func wantZeros(t *testing.T, path string, size int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != size || !bytes.Equal(b, make([]byte, size)) {
		t.Fatalf("%s: %d bytes, want %d zeros", filepath.Base(path), len(b), size)
	}
}

// TestSpareSegments covers the spares on their own: a new log's first is
// made as they open, a segment created from it is the spare renamed (all
// zeros, full size) and the next is prepared behind it, an existing name
// or another size changes nothing of the spare, and a reopen deletes an
// unfinished spare and one of another size.
func TestSpareSegments(t *testing.T) {
	dir := t.TempDir()
	const size = MinSegmentBytes
	log := slog.New(slog.DiscardHandler)
	c := new(spareCount)
	s, err := newSpareSegments(dir, size, log, c.event)
	if err != nil {
		t.Fatal(err)
	}
	if prepared, _ := c.get(); !spareReady(s) || prepared != 1 {
		t.Fatalf("new log: spare ready %v after %d prepared, want ready after 1", spareReady(s), prepared)
	}
	wantZeros(t, filepath.Join(dir, spareName), size)

	f, err := s.Create(dir, "00000000000000000001-0000000000000001.wal", size)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("entry"), 0); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		t.Fatal(err)
	}
	if _, used := c.get(); used != 1 {
		t.Fatalf("%d segments made from a spare, want 1", used)
	}
	b, err := os.ReadFile(filepath.Join(dir, "00000000000000000001-0000000000000001.wal"))
	if err != nil || len(b) != size || string(b[:5]) != "entry" || !bytes.Equal(b[5:], make([]byte, size-5)) {
		t.Fatalf("segment from the spare: %d bytes (%v), want %d: the write, then zeros", len(b), err, size)
	}
	waitSpare(t, s)
	if prepared, _ := c.get(); prepared != 2 {
		t.Fatalf("%d spares prepared, want 2", prepared)
	}
	wantZeros(t, filepath.Join(dir, spareName), size)

	// An existing name fails, as raft-wal's own Create does, and keeps the spare.
	if _, err := s.Create(dir, "00000000000000000001-0000000000000001.wal", size); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("create over an existing segment: %v, want fs.ErrExist", err)
	}
	// Another size is preallocated raft-wal's way.
	f, err = s.Create(dir, "00000000000000000009-0000000000000002.wal", 4096)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, used := c.get(); !spareReady(s) || used != 1 {
		t.Fatalf("after a create of another size: spare ready %v, %d used; want still ready, 1 used", spareReady(s), used)
	}
	wantZeros(t, filepath.Join(dir, "00000000000000000009-0000000000000002.wal"), 4096)
	s.Close()

	// A ready spare is kept across a reopen; nothing needs preparing.
	c = new(spareCount)
	if s, err = newSpareSegments(dir, size, log, c.event); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if prepared, _ := c.get(); !spareReady(s) || prepared != 0 {
		t.Fatalf("reopen: spare ready %v after %d prepared, want ready after 0", spareReady(s), prepared)
	}

	// An unfinished spare is deleted, and one of another size replaced.
	if err := os.WriteFile(filepath.Join(dir, spareTmpName), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err = newSpareSegments(dir, 2*size, log, nil); err != nil {
		t.Fatal(err)
	}
	waitSpare(t, s)
	s.Close()
	if _, err := os.Stat(filepath.Join(dir, spareTmpName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("an unfinished spare is still there after a reopen (%v)", err)
	}
	wantZeros(t, filepath.Join(dir, spareName), 2*size)
}

// TestSpareSegmentsCloseStopsPreparing checks that Close stops a spare
// being written and leaves no unfinished file behind.
func TestSpareSegmentsCloseStopsPreparing(t *testing.T) {
	dir := t.TempDir()
	// A directory that already holds a segment: the spare is prepared in
	// the background, and it is large enough to be under way at Close.
	if err := os.WriteFile(filepath.Join(dir, "00000000000000000001-0000000000000001.wal"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := newSpareSegments(dir, MaxSegmentBytes, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if spareReady(s) {
		t.Fatal("a 1 GiB spare was ready at once; the test no longer stops one under way")
	}
	for _, name := range []string{spareName, spareTmpName} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s is there after Close stopped its preparation (%v)", name, err)
		}
	}
	// Creating after Close falls back and prepares nothing.
	f, err := s.Create(dir, "00000000000000000002-0000000000000002.wal", MinSegmentBytes)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := os.Stat(filepath.Join(dir, spareTmpName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a spare is being prepared after Close (%v)", err)
	}
}

// TestSpareSegmentsInTheLog runs the Raft log's entries over several
// segments made from spares, and reads them all back after a reopen.
func TestSpareSegmentsInTheLog(t *testing.T) {
	dir := t.TempDir()
	c := new(spareCount)
	e := openTestLog(t, dir, c)
	const n = 30_000 // about 6 MiB of entries
	for from := uint64(1); from <= n; from += 500 {
		storeRange(t, e, from, from+499)
		// Each segment after the first is made from a spare once it is
		// ready; waiting for it keeps the count below exact.
		waitSpare(t, e.spares)
	}
	_, used := c.get()
	segs, err := filepath.Glob(filepath.Join(dir, walDirName, "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) < 4 || used != len(segs) {
		t.Fatalf("%d segments, %d of them from spares; want at least 4, all from spares", len(segs), used)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTestLog(t, dir, nil)
	defer e.Close()
	wantBounds(t, e, 1, n)
	wantEntries(t, e, 1, n)
	storeRange(t, e, n+1, n+10)
	wantEntries(t, e, n-10, n+10)
}

// TestSpareSegmentsFallBack checks that a spare that cannot be used (here,
// gone from disk though counted ready) does not fail the create: the
// segment is preallocated raft-wal's way and a new spare prepared.
func TestSpareSegmentsFallBack(t *testing.T) {
	dir := t.TempDir()
	c := new(spareCount)
	s, err := newSpareSegments(dir, MinSegmentBytes, slog.New(slog.DiscardHandler), c.event)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.Remove(filepath.Join(dir, spareName)); err != nil {
		t.Fatal(err)
	}
	f, err := s.Create(dir, "00000000000000000001-0000000000000001.wal", MinSegmentBytes)
	if err != nil {
		t.Fatalf("create with the spare gone: %v, want raft-wal's preallocation", err)
	}
	f.Close()
	wantZeros(t, filepath.Join(dir, "00000000000000000001-0000000000000001.wal"), MinSegmentBytes)
	waitSpare(t, s)
	if prepared, used := c.get(); prepared != 2 || used != 0 {
		t.Fatalf("%d spares prepared, %d used; want a second one prepared, none used", prepared, used)
	}
}

// TestSpareSegmentsLostCreate reopens a log whose newest segment, created
// from a spare when the one before filled, is gone, as after a crash that
// lost its creation before the batch written into it was durable: raft-wal
// creates it again (from the next spare), and every entry before that
// batch reads back. It also runs the log with no spare ready, so segments
// are preallocated raft-wal's way.
func TestSpareSegmentsLostCreate(t *testing.T) {
	dir := t.TempDir()
	c := new(spareCount)
	e := openTestLog(t, dir, c)
	segments := func() []string {
		t.Helper()
		segs, err := filepath.Glob(filepath.Join(dir, walDirName, "*.wal"))
		if err != nil {
			t.Fatal(err)
		}
		return segs
	}
	var last uint64
	for n := len(segments()); len(segments()) == n; last += 100 {
		waitSpare(t, e.spares)
		storeRange(t, e, last+1, last+100)
	}
	if _, used := c.get(); used < 2 {
		t.Fatalf("%d segments made from spares, want the first and the newest", used)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	segs := segments()
	lost := segs[len(segs)-1]
	// raft-wal rotates in the background: the batch that filled a segment
	// may or may not be followed by one in the new segment before the file
	// shows up. The lost segment's name, BASEINDEX-ID.wal, says where the
	// log must now end.
	var base uint64
	if _, err := fmt.Sscanf(filepath.Base(lost), "%020d-", &base); err != nil || base < 2 {
		t.Fatalf("segment name %s: base index %d, %v", lost, base, err)
	}
	if err := os.Remove(lost); err != nil {
		t.Fatal(err)
	}
	last = base - 1
	c = new(spareCount)
	e = openTestLog(t, dir, c)
	wantBounds(t, e, 1, last)
	wantEntries(t, e, 1, last)
	if len(segments()) != len(segs) {
		t.Fatalf("%d segments after the reopen, want the lost one created again (%d)", len(segments()), len(segs))
	}

	// With preparation stopped, new segments are preallocated.
	e.spares.Close()
	_, usedBefore := c.get()
	n := len(segs)
	for len(segments()) < n+2 {
		storeRange(t, e, last+1, last+100)
		last += 100
	}
	if _, used := c.get(); used > usedBefore+1 { // the spare ready at Close may be used once
		t.Fatalf("%d segments made from spares after preparation stopped, want at most 1", used-usedBefore)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e = openTestLog(t, dir, nil)
	defer e.Close()
	wantBounds(t, e, 1, last)
	wantEntries(t, e, 1, last)
}

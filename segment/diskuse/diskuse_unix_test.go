//go:build unix

package diskuse

import (
	"os"
	"path/filepath"
	"testing"
)

func write(t *testing.T, path string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCounterCountsHardLinksOnce lays out a live store and a snapshot that
// links one of its tables: the snapshot's directory adds only what the live
// store does not hold, and a file linked twice within one directory counts
// once.
func TestCounterCountsHardLinksOnce(t *testing.T) {
	dir := t.TempDir()
	live, snap := filepath.Join(dir, "fsm"), filepath.Join(dir, "raft", "checkpoints", "1")
	write(t, filepath.Join(live, "index", "000001.sst"), 100)
	write(t, filepath.Join(live, "segments", "s"), 23)
	write(t, filepath.Join(snap, "index", "000000.sst"), 1000) // compacted away from the live store since
	if err := os.Link(filepath.Join(live, "index", "000001.sst"), filepath.Join(snap, "index", "000001.sst")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(snap, "index", "000000.sst"), filepath.Join(snap, "copy.sst")); err != nil {
		t.Fatal(err)
	}
	var c Counter
	if n, err := c.Add(live); err != nil || n != 123 {
		t.Fatalf("live store: %d bytes (%v), want 123", n, err)
	}
	if n, err := c.Add(filepath.Join(dir, "raft")); err != nil || n != 1000 {
		t.Fatalf("snapshots after the live store: %d bytes (%v), want 1000, what only they hold", n, err)
	}
	var whole Counter
	if n, err := whole.Add(dir); err != nil || n != 1123 {
		t.Fatalf("whole dir: %d bytes (%v), want 1123, each file once", n, err)
	}
	var none Counter
	if n, err := none.Add(filepath.Join(dir, "missing")); err != nil || n != 0 {
		t.Fatalf("missing dir: %d bytes (%v), want 0 and no error", n, err)
	}
}

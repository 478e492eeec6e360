//go:build unix

package bench

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDirSizeCountsHardLinksOnce checks that a file linked twice under the
// directory, as a snapshot shares a table with the live store, is counted
// once.
func TestDirSizeCountsHardLinksOnce(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "table"), make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "log"), make([]byte, 23), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "snapshot"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "table"), filepath.Join(dir, "snapshot", "table")); err != nil {
		t.Fatal(err)
	}
	if n, err := dirSize(dir); err != nil || n != 123 {
		t.Fatalf("dirSize = %d, %v; want 123, the linked table once", n, err)
	}
}

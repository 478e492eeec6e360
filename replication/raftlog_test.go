package replication

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// writeRaftLog creates a raft log with n entries at path and closes it.
func writeRaftLog(t *testing.T, path string, n int) {
	t.Helper()
	st, err := openRaftLog(path)
	if err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := 1; i <= n; i++ {
		logs = append(logs, &raft.Log{Index: uint64(i), Term: 1, Data: []byte(strings.Repeat("x", 500))})
	}
	if err := st.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRaftLogTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	writeRaftLog(t, path, 200)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// A few bytes off the end: the file is grown ahead of use, so this is
	// free space and the log opens with every entry.
	if err := os.Truncate(path, fi.Size()-5); err != nil {
		t.Fatal(err)
	}
	st, err := openRaftLog(path)
	if err != nil {
		t.Fatalf("a log missing 5 bytes of free tail did not open: %v", err)
	}
	defer st.Close()
	if last, err := st.LastIndex(); err != nil || last != 200 {
		t.Fatalf("last index %d, %v; want 200", last, err)
	}
}

func TestOpenRaftLogCutShort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	writeRaftLog(t, path, 200)
	// Keep the two meta pages and a little more: the pages they point to
	// are gone. Without the check, bolt faults or panics here.
	if err := os.Truncate(path, 4*4096+100); err != nil {
		t.Fatal(err)
	}
	_, err := openRaftLog(path)
	if err == nil || !strings.Contains(err.Error(), "raft.db") || !strings.Contains(err.Error(), "cut short") {
		t.Fatalf("opening a log cut into its pages: %v; want an error naming the file", err)
	}
}

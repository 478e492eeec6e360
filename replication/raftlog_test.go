package replication

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/wheel"
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

// TestHoldLogMap checks what the mapped-page releaser relies on: bolt maps
// the log with the whole reserved size up front (so the map does not move
// as the log grows), HoldLogMap hands over the log's path, and refuses once
// the node is closed.
func TestHoldLogMap(t *testing.T) {
	c := NewTestCluster(t, 1, nil)
	n := c.Leader().Node
	var held string
	if err := n.HoldLogMap(func(path string) error { held = path; return nil }); err != nil {
		t.Fatal(err)
	}
	if filepath.Base(held) != "raft.db" {
		t.Fatalf("held %q, want the raft log", held)
	}
	if runtime.GOOS == "linux" && raftLogMapBytes > 0 {
		maps, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Fatal(err)
		}
		var sizes []uint64
		for line := range strings.Lines(string(maps)) {
			if !strings.HasSuffix(strings.TrimSpace(line), held) {
				continue
			}
			var lo, hi uint64
			if _, err := fmt.Sscanf(line, "%x-%x", &lo, &hi); err != nil {
				t.Fatalf("maps line %q: %v", line, err)
			}
			sizes = append(sizes, hi-lo)
		}
		if len(sizes) != 1 || sizes[0] != raftLogMapBytes {
			t.Fatalf("maps of %s: sizes %v, want one of %d bytes", held, sizes, raftLogMapBytes)
		}
	}
	wantErr := errors.New("from fn")
	if err := n.HoldLogMap(func(string) error { return wantErr }); !errors.Is(err, wantErr) {
		t.Fatalf("fn's error: got %v", err)
	}
	c.Shutdown()
	called := false
	if err := n.HoldLogMap(func(string) error { called = true; return nil }); !errors.Is(err, wheel.ErrClosed) || called {
		t.Fatalf("after close: err %v, fn called %v; want wheel.ErrClosed and no call", err, called)
	}
}

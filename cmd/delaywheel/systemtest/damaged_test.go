package systemtest

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/transport/api"
)

// wantCleanRefusal waits for n, started on damaged files, to exit, and
// fails unless it exited non-zero with a log that names what is damaged
// (one of names) and is an error message, not a Go crash.
func wantCleanRefusal(t *testing.T, n *Server, names ...string) {
	t.Helper()
	select {
	case <-n.Exited():
	case <-time.After(30 * time.Second):
		if err := n.WaitReady(ctxFor(t, time.Second)); err == nil {
			t.Fatalf("%s started and serves on damaged files", n.ID)
		}
		t.Fatalf("%s neither exited nor became ready in 30 s on damaged files; log:\n%s", n.ID, n.LogTail(20))
	}
	log := n.Log()
	if i := strings.LastIndex(log, " start #"); i >= 0 {
		log = log[i:]
	}
	if n.ExitCode() == 0 {
		t.Fatalf("%s exited 0 on damaged files; log:\n%s", n.ID, log)
	}
	for _, crash := range []string{"fatal error:", "panic:", "unexpected fault address", "SIGBUS", "SIGSEGV", "goroutine "} {
		if strings.Contains(log, crash) {
			t.Fatalf("%s crashed (%q) instead of refusing the damaged files with an error; log:\n%s", n.ID, crash, firstLines(log, 12))
		}
	}
	named := false
	for _, name := range names {
		named = named || strings.Contains(log, name)
	}
	if !named {
		t.Fatalf("%s exited with code %d without naming any of %v; log:\n%s", n.ID, n.ExitCode(), names, log)
	}
	t.Logf("%s refused to start (exit code %d):\n%s", n.ID, n.ExitCode(), lastLines(log, 4))
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestDamagedFilesClearErrors damages a stopped node's files beyond what a
// crash can tear, and requires that the node refuse to start with an error
// that names the file, rather than crash or serve wrong data. The remedy
// in a cluster is to replace the node with an empty one
// (TestChaosReplaceNode).
func TestDamagedFilesClearErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("not with -short")
	}
	t.Parallel()

	// The Raft log's segment list (raft-wal's wal-meta.db) overwritten:
	// the node cannot tell which segments hold the log.
	t.Run("RaftLogMetaLost", func(t *testing.T) {
		t.Parallel()
		c := NewCluster(t, binary(t), Options{Nodes: 1})
		n := c.Servers()[0]
		ctx := ctxFor(t, 30*time.Second)
		if _, err := n.Client.Enqueue(ctx, []api.Message{{Topic: "damaged", Payload: api.TextBody("x"), DelayMs: api.Ptr(int64(3_600_000))}}); err != nil {
			t.Fatal(err)
		}
		n.Kill()
		meta := filepath.Join(n.DataDir, "raft", "wal", "wal-meta.db")
		if _, err := os.Stat(meta); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(meta, bytes.Repeat([]byte("not a meta db "), 1000), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		wantCleanRefusal(t, n, "raft log", "wal-meta.db")
	})

	// raft.db, which keeps the term and vote, cut back to its first four
	// pages: bolt's meta pages survive but the pages they point to are
	// gone. bolt maps the file, so reading a missing page is a bus error
	// unless the node checks first.
	t.Run("RaftLogCutIntoItsPages", func(t *testing.T) {
		t.Parallel()
		c := NewCluster(t, binary(t), Options{Nodes: 1})
		n := c.Servers()[0]
		ctx := ctxFor(t, 30*time.Second)
		for i := 0; i < 50; i++ {
			var msgs []api.Message
			for j := 0; j < 20; j++ {
				msgs = append(msgs, api.Message{Topic: "damaged", Payload: api.TextBody(strings.Repeat("x", 200)), DelayMs: api.Ptr(int64(3_600_000))})
			}
			if _, err := n.Client.Enqueue(ctx, msgs); err != nil {
				t.Fatal(err)
			}
		}
		n.Kill()
		db := filepath.Join(n.DataDir, "raft", "raft.db")
		fi, err := os.Stat(db)
		if err != nil {
			t.Fatal(err)
		}
		const keep = 4*4096 + 100
		if fi.Size() <= keep {
			t.Fatalf("raft.db is only %d bytes", fi.Size())
		}
		truncateBy(t, db, fi.Size()-keep)
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		wantCleanRefusal(t, n, "raft.db", "raft log")
	})

	// A segment cut into bytes the snapshots cover: those were synced, so
	// no crash tears them. The snapshots' checkpoints hard-link the live
	// segment files, so they are damaged too and none can be restored.
	// Every snapshot Raft keeps must cover the whole file: Raft falls back
	// to an older snapshot when the newest cannot be opened.
	t.Run("SegmentCutIntoItsSnapshot", func(t *testing.T) {
		t.Parallel()
		c := NewCluster(t, binary(t), Options{Nodes: 1, Flags: SnapshotFlags})
		n := c.Servers()[0]
		ctx := ctxFor(t, 30*time.Second)
		at := NowMs() + 3_600_000
		for i := 0; i < 70; i++ {
			msgs := []api.Message{{Topic: "damaged", Payload: api.TextBody(fmt.Sprint("m", i)), DeliverAtMs: api.Ptr(at)}}
			if _, err := n.Client.Enqueue(ctx, msgs); err != nil {
				t.Fatal(err)
			}
		}
		name := segment.FileName(at / 1000)
		err := Eventually(ctxFor(t, 90*time.Second), 100*time.Millisecond, func() error {
			fi, err := os.Stat(filepath.Join(n.DataDir, "fsm", "segments", name))
			if err != nil {
				return err
			}
			ids, covered := finishedCovers(n.DataDir, name)
			if len(ids) == 0 {
				return fmt.Errorf("no finished snapshot yet")
			}
			for i, id := range ids {
				if covered[i] != fi.Size() {
					return fmt.Errorf("snapshot %s covers %d of %s's %d bytes", id, covered[i], name, fi.Size())
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("no snapshots all covering the segment: %v", err)
		}
		n.Kill()
		truncateBy(t, filepath.Join(n.DataDir, "fsm", "segments", name), 3)
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		wantCleanRefusal(t, n, name)
	})

	// A segment cut into bytes only the newest snapshot covers: Raft
	// cannot open that one and falls back to the older, whose bytes are
	// intact but which ends before the log's first entry (the log was
	// compacted up to the newest). The node must refuse to start, not
	// resume after entries neither holds.
	t.Run("NewestSnapshotCutOlderBehindTheLog", func(t *testing.T) {
		t.Parallel()
		c := NewCluster(t, binary(t), Options{Nodes: 1, Flags: SnapshotFlags})
		n := c.Servers()[0]
		at := NowMs() + 3_600_000
		name := segment.FileName(at / 1000)
		path := filepath.Join(n.DataDir, "fsm", "segments", name)
		// enqueue enqueues 70 messages into the segment and returns its
		// size once the last is applied: an enqueue is answered at commit,
		// before its apply writes the segment, and a read of the message
		// waits for the apply.
		enqueue := func(from int) int64 {
			t.Helper()
			ctx := ctxFor(t, 30*time.Second)
			var last string
			for i := from; i < from+70; i++ {
				msgs := []api.Message{{Topic: "damaged", Payload: api.TextBody(fmt.Sprint("m", i)), DeliverAtMs: api.Ptr(at)}}
				res, err := n.Client.Enqueue(ctx, msgs)
				if err != nil {
					t.Fatal(err)
				}
				last = res[0].ID
			}
			if _, err := n.Client.Get(ctx, last); err != nil {
				t.Fatalf("the last message enqueued: %v", err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			return fi.Size()
		}
		first := enqueue(0)
		err := Eventually(ctxFor(t, 90*time.Second), 100*time.Millisecond, func() error {
			if ids, covered := finishedCovers(n.DataDir, name); len(ids) == 0 || covered[0] != first {
				return fmt.Errorf("finished snapshots %v cover %v of %s's %d bytes", ids, covered, name, first)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		size := enqueue(70)
		err = Eventually(ctxFor(t, 90*time.Second), 100*time.Millisecond, func() error {
			ids, covered := finishedCovers(n.DataDir, name)
			if len(ids) != 2 || covered[0] != size || covered[1] > size-3 {
				return fmt.Errorf("finished snapshots %v cover %v of %s's %d bytes; want the newest all of it, the older less", ids, covered, name, size)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		n.Kill()
		truncateBy(t, path, 3)
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		wantCleanRefusal(t, n, name)
	})
}

// finishedCovers returns the node's finished snapshots, newest first, and
// how many bytes of segment file name each covers.
func finishedCovers(dataDir, name string) (ids []string, covered []int64) {
	covers, finished := checkpointLens(dataDir)
	for id := range covers {
		if finished[id] {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Compare(snapshotIndex(b), snapshotIndex(a)) })
	for _, id := range ids {
		covered = append(covered, covers[id][name])
	}
	return ids, covered
}

// snapshotIndex returns the index in a Raft snapshot id (term-index-ms).
func snapshotIndex(id string) uint64 {
	parts := strings.Split(id, "-")
	if len(parts) != 3 {
		return 0
	}
	i, _ := strconv.ParseUint(parts[1], 10, 64)
	return i
}

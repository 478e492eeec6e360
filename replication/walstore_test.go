package replication

import (
	"github.com/cockroachdb/pebble"

	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/delaywheel/delaywheel/wheel"
)

// oldLayout is a raft directory as an earlier version left it.
type oldLayout struct {
	dir  string
	bolt *raftboltdb.BoltStore
}

func newOldLayout(t *testing.T) *oldLayout {
	t.Helper()
	dir := t.TempDir()
	bolt, err := openRaftLog(filepath.Join(dir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bolt.Close() })
	if err := bolt.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	return &oldLayout{dir: dir, bolt: bolt}
}

// openEntries opens the log's entries in o, with segments of the least size.
func (o *oldLayout) openEntries(t *testing.T) entries {
	t.Helper()
	e, err := openEntries(o.dir, o.bolt, MinLogSegmentBytes, hclog.NewNullLogger(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// pebbleLog writes entries from…to into the Pebble log store.
func (o *oldLayout) pebbleLog(t *testing.T, from, to uint64) {
	t.Helper()
	s := openTestLogStore(t, filepath.Join(o.dir, oldLogDirName))
	storeOld(t, s, from, to)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// open runs openEntries and checks what it leaves: the segments hold
// from…to, raft.db only the term and vote, and no old store or partial
// move remains.
func (o *oldLayout) open(t *testing.T, from, to uint64) {
	t.Helper()
	w, err := openEntries(o.dir, o.bolt, MinLogSegmentBytes, hclog.NewNullLogger(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	wantBounds(t, w, from, to)
	if to > 0 {
		wantEntries(t, w, from, to)
	}
	wantBounds(t, o.bolt, 0, 0)
	if term, err := o.bolt.GetUint64([]byte("CurrentTerm")); err != nil || term != 7 {
		t.Fatalf("term %d, %v; want 7 kept in raft.db", term, err)
	}
	for _, gone := range []string{oldLogDirName, walDirName + ".new"} {
		if _, err := os.Stat(filepath.Join(o.dir, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s left after the move (%v)", gone, err)
		}
	}
}

// TestMoveOldLog moves the entries an earlier version kept in raft.db or
// in the Pebble log store into the segments, whatever point an earlier
// move was cut short at.
func TestMoveOldLog(t *testing.T) {
	t.Run("New", func(t *testing.T) {
		o := newOldLayout(t)
		o.open(t, 0, 0)
		o.open(t, 0, 0)
	})
	t.Run("FromBolt", func(t *testing.T) {
		o := newOldLayout(t)
		storeRange(t, o.bolt, 5, 300)
		o.open(t, 5, 300)
		o.open(t, 5, 300) // a second open changes nothing
	})
	t.Run("FromPebble", func(t *testing.T) {
		o := newOldLayout(t)
		o.pebbleLog(t, 40, 900)
		o.open(t, 40, 900)
	})
	t.Run("BoltOverPebble", func(t *testing.T) {
		// A move from raft.db into the Pebble store was cut short:
		// raft.db's entries are the log, not the store's.
		o := newOldLayout(t)
		o.pebbleLog(t, 1, 400)
		storeRange(t, o.bolt, 5, 300)
		o.open(t, 5, 300)
	})
	t.Run("CutBeforeRename", func(t *testing.T) {
		// Segments half built in wal.new: built again from the old store.
		o := newOldLayout(t)
		o.pebbleLog(t, 10, 500)
		partial, err := openWAL(filepath.Join(o.dir, walDirName+".new"), hclog.NewNullLogger(), nil)
		if err == nil {
			storeRange(t, partial, 10, 20)
			err = partial.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		o.open(t, 10, 500)
	})
	t.Run("CutAfterRename", func(t *testing.T) {
		// The segments are complete but the old stores still hold their
		// entries: the segments are the log, the rest is deleted.
		o := newOldLayout(t)
		storeRange(t, o.bolt, 5, 300)
		o.open(t, 5, 300)
		storeRange(t, o.bolt, 5, 300)
		o.pebbleLog(t, 1, 50)
		o.open(t, 5, 300)
	})
	t.Run("GapRefused", func(t *testing.T) {
		o := newOldLayout(t)
		o.pebbleLog(t, 1, 10)
		s := openTestLogStore(t, filepath.Join(o.dir, oldLogDirName))
		storeOld(t, s, 12, 20)
		s.Close()
		_, err := openEntries(o.dir, o.bolt, MinLogSegmentBytes, hclog.NewNullLogger(), slog.New(slog.DiscardHandler))
		if !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("openEntries over a log with a gap: %v, want raft.ErrLogNotFound", err)
		}
		// Nothing was lost: the old store is still there for a later try.
		if _, err := os.Stat(filepath.Join(o.dir, oldLogDirName)); err != nil {
			t.Fatal(err)
		}
	})
}

func enqueueN(t *testing.T, tn *TestNode, topic string, n int) {
	t.Helper()
	var msgs []wheel.NewMessage
	for range n {
		msgs = append(msgs, msg(topic, "x", time.Hour))
	}
	enqueue(t, tn.Node, msgs...)
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

// TestNodeUpgradesOldLog starts a node on a data dir whose Raft entries
// are where an earlier version kept them (raft.db, or the Pebble log
// store): it moves them, and resumes at the same log position with its
// messages.
func TestNodeUpgradesOldLog(t *testing.T) {
	for _, old := range []string{"raft.db", "pebble"} {
		t.Run(old, func(t *testing.T) {
			c := NewTestCluster(t, 1, nil)
			for range 5 {
				enqueueN(t, c.Leader(), "up", 10)
			}
			last := c.Leader().Node.raft.LastIndex()
			cfg := c.Nodes[0].Cfg
			c.Stop(0)

			// Put the entries back where the earlier version kept them.
			raftDir := filepath.Join(cfg.DataDir, "raft")
			w, err := openWAL(filepath.Join(raftDir, walDirName), hclog.NewNullLogger(), nil)
			if err != nil {
				t.Fatal(err)
			}
			first, stored, err := logBounds(w)
			if err != nil || stored < last || first == 0 {
				t.Fatalf("segments span %d to %d (%v), raft ended at %d", first, stored, err, last)
			}
			// The tick loop may have proposed an Expire between the read
			// of LastIndex and the stop: the segments hold it too.
			last = stored
			if old == "pebble" {
				s := openTestLogStore(t, filepath.Join(raftDir, oldLogDirName))
				b := s.db.NewBatch()
				for i := first; i <= last; i++ {
					var l raft.Log
					if err := w.GetLog(i, &l); err != nil {
						t.Fatal(err)
					}
					if err := b.Set(logKeyAppend(nil, i), appendLogEntry(nil, &l), nil); err != nil {
						t.Fatal(err)
					}
				}
				err = errors.Join(b.Commit(pebble.Sync), b.Close(), s.Close())
			} else {
				var bolt *raftboltdb.BoltStore
				if bolt, err = openRaftLog(filepath.Join(raftDir, "raft.db")); err == nil {
					err = errors.Join(copyLog(w, bolt), bolt.Close())
				}
			}
			if err := errors.Join(err, w.Close(), os.RemoveAll(filepath.Join(raftDir, walDirName))); err != nil {
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
			if _, err := os.Stat(filepath.Join(raftDir, oldLogDirName)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the Pebble log store is still there after the upgrade (%v)", err)
			}
		})
	}
}

// TestEntriesBounds covers the LogStore contract as Raft uses it on the
// segments: entries read back field for field, a head truncation after a
// snapshot and a tail truncation of a conflict, after which the deleted
// entries are not found (raft-wal alone still reads a truncated head from
// the segment being written), and a reopen.
func TestEntriesBounds(t *testing.T) {
	o := newOldLayout(t)
	open := func() entries { return o.openEntries(t) }
	e := open()
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
	e = open()
	defer e.Close()
	wantBounds(t, e, 51, 120)
	wantEntries(t, e, 51, 120)
	if err := e.GetLog(50, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(50) after a reopen: %v, want raft.ErrLogNotFound", err)
	}
}

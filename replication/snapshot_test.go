package replication_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	. "github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel/model"
	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

// A follower that misses entries compacted out of the leader's log catches
// up by installing a snapshot, and ends with the same state.
func TestLaggingFollowerCatchesUpBySnapshot(t *testing.T) {
	c := repltest.NewCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotThreshold = 32
		cfg.TrailingLogs = 8
		cfg.SnapshotInterval = 200 * time.Millisecond
	})
	leader := c.Leader()
	lagging := -1
	for i, tn := range c.Nodes {
		if tn != leader {
			lagging = i
			break
		}
	}
	c.Stop(lagging)
	var ids []model.ID
	for i := 0; i < 200; i++ {
		m := msg(fmt.Sprintf("t%d", i%3), "b", 10*time.Minute+time.Duration(i)*time.Millisecond)
		m.Key = fmt.Sprintf("k%d", i)
		res := enqueue(t, leader.Node, m)
		ids = append(ids, res[0].ID)
	}
	nettest.WaitFor(t, nettest.Patience, "leader snapshot past the stopped follower", func() bool {
		return leader.Node.Raft().Stats()["last_snapshot_index"] != "0"
	})
	c.Start(lagging)
	ctx := context.Background()
	want, _ := leader.Node.Topics(ctx)
	f := c.Nodes[lagging]
	nettest.WaitFor(t, 30*time.Second, "follower to converge", func() bool {
		got, err := f.Node.Topics(ctx)
		return err == nil && reflect.DeepEqual(got, want)
	})
	for _, id := range ids {
		if _, err := f.Node.Get(ctx, id); err != nil {
			t.Fatalf("follower lacks %s: %v", id, err)
		}
	}
}

// A node whose store is gone (or behind its snapshot) restores its own
// latest snapshot at start — a reference to a kept checkpoint — and then
// replays the log after it. Old checkpoints are pruned with their snapshots.
func TestRestartRestoresLocalSnapshotWhenStoreIsGone(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	l := c.Leader()
	var ids []model.ID
	for round := 0; round < 3; round++ {
		for i := 0; i < 20; i++ {
			res := enqueue(t, l.Node, msg("s", "b", time.Hour+time.Duration(i)*time.Millisecond))
			ids = append(ids, res[0].ID)
		}
		if err := l.Node.Raft().Snapshot().Error(); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
	}
	// Entries after the last snapshot must come back from the log.
	res := enqueue(t, l.Node, msg("s", "after", 0))
	ids = append(ids, res[0].ID)
	ckpts, _ := os.ReadDir(filepath.Join(l.Cfg.DataDir, "raft", "checkpoints"))
	if len(ckpts) > 2 {
		t.Fatalf("%d checkpoints kept, want at most 2 (the retained snapshots)", len(ckpts))
	}
	// The checkpoints link the live store's files: the raft disk metric
	// leaves those to the index's and segments' figures.
	reg := prometheus.NewRegistry()
	reg.MustRegister(l.Node.Collector())
	var every int64
	filepath.WalkDir(filepath.Join(l.Cfg.DataDir, "raft"), func(_ string, d fs.DirEntry, err error) error {
		if info, ierr := d.Info(); err == nil && ierr == nil && info.Mode().IsRegular() {
			every += info.Size()
		}
		return nil
	})
	if got := metricValue(t, reg, "delaywheel_disk_bytes", map[string]string{"kind": "raft"}); got <= 0 || got >= float64(every) {
		t.Fatalf("raft disk bytes %v, want above 0 and below %d, the files under raft/ counted once per link", got, every)
	}
	c.Stop(0)
	if err := os.RemoveAll(filepath.Join(l.Cfg.DataDir, "fsm")); err != nil {
		t.Fatal(err)
	}
	c.Start(0)
	l = c.Leader()
	for _, id := range ids {
		if _, err := l.Node.Get(context.Background(), id); err != nil {
			t.Fatalf("after restoring the local snapshot, %s: %v", id, err)
		}
	}
}

// A snapshot taken when the last entries the state machine saw change no
// state (a barrier, a configuration) has an index above the store's
// applied index, yet the store covers it: a restart keeps the store as it
// is, rather than moving it aside as damaged and restoring the snapshot.
func TestRestartKeepsStoreCoveringSnapshotOfNoOps(t *testing.T) {
	// A clock that stands still: nothing proposes a command after the barrier.
	c := repltest.NewCluster(t, 1, func(cfg *Config) { cfg.Clock = wheeltest.NewFakeClock(time.Now()) })
	l := c.Leader()
	res := enqueue(t, l.Node, msg("s", "b", time.Hour))
	if err := l.Node.Raft().Barrier(0).Error(); err != nil {
		t.Fatal(err)
	}
	if err := l.Node.Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	c.Stop(0)
	c.Start(0)
	l = c.Leader()
	if aside, _ := filepath.Glob(filepath.Join(l.Cfg.DataDir, "fsm.damaged-*")); len(aside) > 0 {
		t.Fatalf("the store was moved aside as %v and the snapshot restored", aside)
	}
	if _, err := l.Node.Get(context.Background(), res[0].ID); err != nil {
		t.Fatalf("after restart, %s: %v", res[0].ID, err)
	}
}

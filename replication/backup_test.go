package replication_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	. "github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

func TestBackupRestoreRoundTrip(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	n := c.Leader().Node
	ctx := context.Background()
	var ids []model.ID
	for _, delay := range []time.Duration{time.Minute, 3 * time.Hour, 48 * time.Hour} { // wheel, overflow, far overflow
		m := msg("a", "d", delay)
		m.Key, m.Headers, m.Priority = "k"+delay.String(), map[string]string{"h": "v"}, 3
		res := enqueue(t, n, m)
		ids = append(ids, res[0].ID)
	}
	// A dead message.
	m := msg("b", "dead", 0)
	m.MaxAttempts = 1
	res := enqueue(t, n, m)
	got := reserve(t, n, "b", 1, 5*time.Second)
	if len(got) != 1 {
		t.Fatalf("reserve: %+v", got)
	}
	if _, err := n.Nack(ctx, []model.Receipt{got[0].Receipt}, 0); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, res[0].ID)

	var buf bytes.Buffer
	if _, err := n.Backup(ctx, &buf); err != nil {
		t.Fatalf("backup: %v", err)
	}
	want := map[model.ID]wheel.View{}
	for _, id := range ids {
		v, err := n.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = v
	}
	wantTopics, _ := n.Topics(ctx)

	dir := filepath.Join(t.TempDir(), "restored")
	raftAddr := nettest.FreeAddr(t)
	if _, err := RestoreBackup(bytes.NewReader(buf.Bytes()), dir, "r1", raftAddr); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if _, err := RestoreBackup(bytes.NewReader(buf.Bytes()), dir, "r1", raftAddr); err == nil {
		t.Fatal("restore into a used data dir must fail")
	}
	rc := repltest.StartCluster(t, Config{ID: "r1", DataDir: dir, RaftAddr: raftAddr, RedeliveryBackoff: -1})
	rn := rc.Leader().Node
	// The restored node's store is new: it takes the snapshot, and no
	// store is set aside as damaged.
	if aside, _ := filepath.Glob(filepath.Join(dir, "fsm.damaged-*")); len(aside) > 0 {
		t.Fatalf("a restored node set a store aside as damaged: %v", aside)
	}
	for _, id := range ids {
		v, err := rn.Get(ctx, id)
		if err != nil {
			t.Fatalf("restored %s: %v", id, err)
		}
		if !reflect.DeepEqual(v, want[id]) {
			t.Errorf("restored %s:\n got %+v\nwant %+v", id, v, want[id])
		}
	}
	gotTopics, _ := rn.Topics(ctx)
	if !reflect.DeepEqual(gotTopics, wantTopics) {
		t.Errorf("topics: got %+v want %+v", gotTopics, wantTopics)
	}
	// New messages get ids that do not collide with restored ones.
	res = enqueue(t, rn, msg("a", "new", 0))
	for _, id := range ids {
		if res[0].ID == id {
			t.Fatalf("new id %s collides with a restored one", id)
		}
	}
	// The key index came back too: the same key dedupes.
	m = msg("a", "x", 0)
	m.Key = "k" + time.Minute.String()
	dup := enqueue(t, rn, m)
	if !dup[0].Duplicate || dup[0].ID != ids[0] {
		t.Fatalf("dedupe after restore: %+v", dup)
	}
}

// The checkpoints a snapshot or a backup takes in the data dir are
// temporary: a node that stopped while one was taken (killed, or while a
// client read a backup) removes them when it starts again, as they hold
// links to slot files the store has since dropped.
func TestRestartRemovesLeftoverCheckpoints(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	res := enqueue(t, c.Leader().Node, msg("a", "later", 3*time.Hour))
	c.Stop(0)
	dir := c.Nodes[0].Cfg.DataDir
	var left []string
	for _, name := range []string{"backup-123", "snapshot-456"} {
		p := filepath.Join(dir, name, "cp", "segments")
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "0000000001.seg"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		left = append(left, filepath.Join(dir, name))
	}
	c.Start(0)
	n := c.Leader().Node
	for _, p := range left {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there after the restart (stat: %v)", p, err)
		}
	}
	if v, err := n.Get(context.Background(), res[0].ID); err != nil || v.State != wheel.StateDelayed {
		t.Fatalf("after restart: %+v %v", v, err)
	}
}

// A data dir a restore did not finish (a crash or kill during it leaves
// its mark) is refused by a node, naming the mark, rather than served as
// if it held the whole backup; a finished restore leaves no mark, and a
// failed one takes its mark away.
func TestUnfinishedRestoreRefused(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	n := c.Leader().Node
	enqueue(t, n, msg("a", "x", time.Minute))
	var buf bytes.Buffer
	if _, err := n.Backup(t.Context(), &buf); err != nil {
		t.Fatalf("backup: %v", err)
	}
	dir := t.TempDir()
	raftAddr := nettest.FreeAddr(t)
	if _, err := RestoreBackup(bytes.NewReader(buf.Bytes()[:buf.Len()/2]), dir, "r1", raftAddr); err == nil {
		t.Fatal("restore of half a backup succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "restore-incomplete")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed restore left its mark: %v", err)
	}
	if _, err := RestoreBackup(bytes.NewReader(buf.Bytes()), dir, "r1", raftAddr); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "restore-incomplete")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a finished restore left its mark: %v", err)
	}
	// What a crash before the end leaves: the mark beside the restored data.
	if err := os.WriteFile(filepath.Join(dir, "restore-incomplete"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := OpenGroups(Config{ID: "r1", DataDir: dir, RaftAddr: raftAddr}, 1)
	if !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), "restore-incomplete") {
		t.Fatalf("open of a data dir holding an unfinished restore: %v", err)
	}
}

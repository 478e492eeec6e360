package replication_test

import (
	"bytes"
	"context"
	"path/filepath"
	"reflect"
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

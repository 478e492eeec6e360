package replication

import (
	"bytes"
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
)

func TestBackupRestoreRoundTrip(t *testing.T) {
	c := NewTestCluster(t, 1, nil)
	cl := c.Leader().Client
	ctx := context.Background()
	var ids []string
	for _, delay := range []int64{60_000, 3 * 3600 * 1000, 48 * 3600 * 1000} { // wheel, overflow, far overflow
		res := enqueue(t, cl, api.Message{Topic: "a", Payload: api.TextBody("d"), DelayMs: ptr(delay), Key: "k" + time.Duration(delay).String(),
			Headers: map[string]string{"h": "v"}, Priority: 3})
		ids = append(ids, res[0].ID)
	}
	// A dead message.
	res := enqueue(t, cl, api.Message{Topic: "b", Payload: api.TextBody("dead"), MaxAttempts: ptr(int32(1))})
	got := reserve(t, cl, "b", 1, 5*time.Second)
	if len(got) != 1 {
		t.Fatalf("reserve: %+v", got)
	}
	if _, err := cl.Nack(ctx, []string{got[0].Receipt}, 0); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, res[0].ID)

	var buf bytes.Buffer
	if _, err := cl.Backup(ctx, &buf); err != nil {
		t.Fatalf("backup: %v", err)
	}
	want := map[string]api.MessageView{}
	for _, id := range ids {
		v, err := cl.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = v
	}
	wantTopics, _ := cl.Topics(ctx)

	dir := filepath.Join(t.TempDir(), "restored")
	raftAddr := FreeAddr(t)
	if _, err := RestoreBackup(bytes.NewReader(buf.Bytes()), dir, "r1", raftAddr); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if _, err := RestoreBackup(bytes.NewReader(buf.Bytes()), dir, "r1", raftAddr); err == nil {
		t.Fatal("restore into a used data dir must fail")
	}
	rc := StartTestCluster(t, Config{ID: "r1", DataDir: dir, RaftAddr: raftAddr, RedeliveryBackoff: -1})
	rcl := rc.Leader().Client
	for _, id := range ids {
		v, err := rcl.Get(ctx, id)
		if err != nil {
			t.Fatalf("restored %s: %v", id, err)
		}
		if !reflect.DeepEqual(v, want[id]) {
			t.Errorf("restored %s:\n got %+v\nwant %+v", id, v, want[id])
		}
	}
	gotTopics, _ := rcl.Topics(ctx)
	if !reflect.DeepEqual(gotTopics, wantTopics) {
		t.Errorf("topics: got %+v want %+v", gotTopics, wantTopics)
	}
	// New messages get ids that do not collide with restored ones.
	res = enqueue(t, rcl, api.Message{Topic: "a", Payload: api.TextBody("new")})
	for _, id := range ids {
		if res[0].ID == id {
			t.Fatalf("new id %s collides with a restored one", id)
		}
	}
	// The key index came back too: the same key dedupes.
	dup := enqueue(t, rcl, api.Message{Topic: "a", Payload: api.TextBody("x"), Key: "k" + time.Duration(60_000).String()})
	if !dup[0].Duplicate || dup[0].ID != ids[0] {
		t.Fatalf("dedupe after restore: %+v", dup)
	}
}

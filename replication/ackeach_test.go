package replication_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// AckEach acks its receipts as one log entry and tells of each whether it
// took effect: a receipt that no longer holds its message changes nothing.
func TestAckEachAnswersEachReceipt(t *testing.T) {
	n, clock, _ := heldNode(t)
	ctx := t.Context()
	due := clock.Now().UnixMilli() - 5
	msgs := make([]command.NewMessage, 3)
	for i := range msgs {
		msgs[i] = command.NewMessage{Topic: "t", Body: []byte{'a' + byte(i)}, DeliverAtMs: due, MaxAttempts: 3}
	}
	if _, err := n.Enqueue(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	ds, err := n.Reserve(ctx, "t", 3, time.Second, time.Minute)
	if err != nil || len(ds) != 3 {
		t.Fatalf("reserve: %d deliveries, %v", len(ds), err)
	}
	stale := ds[2].Receipt
	stale.Nonce++
	if _, err := n.Settled(ctx); err != nil { // the reserve's lease entry is in
		t.Fatal(err)
	}
	before := n.Raft().LastIndex()
	done, err := n.AckEach(ctx, []model.Receipt{ds[0].Receipt, ds[1].Receipt, stale})
	if err != nil || !slices.Equal(done, []bool{true, true, false}) {
		t.Fatalf("AckEach = %v, %v; want [true true false]", done, err)
	}
	if after := n.Raft().LastIndex(); after != before+1 {
		t.Fatalf("AckEach took log entries %d to %d; want one", before+1, after)
	}
	for _, d := range ds[:2] {
		if _, err := n.Get(ctx, d.ID); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("acked message %s: %v; want not found", d.ID, err)
		}
	}
	if v, err := n.Get(ctx, ds[2].ID); err != nil || v.State != wheel.StateReserved {
		t.Fatalf("message of the stale receipt: %+v, %v; want still reserved", v, err)
	}
}

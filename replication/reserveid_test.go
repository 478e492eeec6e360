package replication_test

import (
	"errors"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// The leader leases a message due in an hour by its id, and again once it
// is dead; every node then reads it reserved, and its receipt acks it. A follower refuses the
// call, as it does every write; a topic with a webhook is not found.
func TestReserveIDOnTheLeader(t *testing.T) {
	c := repltest.NewCluster(t, 3, nil)
	leader, f := c.Leader().Node, c.Follower().Node
	res := enqueue(t, leader, msg("t", "later", time.Hour))
	id := res[0].ID
	if _, err := f.ReserveID(t.Context(), id, 0); !errors.Is(err, model.ErrNotLeader) {
		t.Fatalf("ReserveID on a follower: %v, want not leader", err)
	}
	d, err := leader.ReserveID(t.Context(), id, 0)
	if err != nil || d.Message.ID != id || d.Attempt != 1 || string(d.Body) != "later" {
		t.Fatalf("ReserveID: %+v %v", d, err)
	}
	// Dead: redriven and leased by one entry, which every node applies.
	if dl, err := leader.DeadLetter(t.Context(), []model.Receipt{d.Receipt}); err != nil || dl.Done != 1 {
		t.Fatalf("dead letter: %+v %v", dl, err)
	}
	d, err = leader.ReserveID(t.Context(), id, 0)
	if err != nil || d.Message.ID != id || d.Attempt != 1 {
		t.Fatalf("ReserveID of a dead message: %+v %v", d, err)
	}
	applied, _ := leader.Indexes()
	for _, n := range c.Nodes {
		n.Node.ReadAfter(applied)
		if v, err := n.Node.Get(t.Context(), id); err != nil || v.State != wheel.StateReserved || v.Receipt != d.Receipt.Nonce {
			t.Fatalf("node %s reads %s %v, want reserved", n.Cfg.ID, v.State, err)
		}
	}
	if _, err := leader.ReserveID(t.Context(), id, 0); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("ReserveID of a reserved message: %v, want not found", err)
	}
	if ack, err := leader.Ack(t.Context(), []model.Receipt{d.Receipt}); err != nil || ack.Done != 1 {
		t.Fatalf("ack: %+v %v", ack, err)
	}

	if err := leader.SetWebhook(t.Context(), command.Webhook{Topic: "hooked", URL: "http://127.0.0.1:1", TimeoutMs: 1000, MaxConcurrency: 1}); err != nil {
		t.Fatal(err)
	}
	hooked := enqueue(t, leader, msg("hooked", "x", time.Hour))
	if _, err := leader.ReserveID(t.Context(), hooked[0].ID, 0); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("ReserveID of a webhook's message: %v, want not found", err)
	}
}

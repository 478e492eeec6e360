package replication

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// When the Raft apply queue is full, enqueues answer 429 with Retry-After
// and change nothing.
func TestBackPressureAnswers429(t *testing.T) {
	c := NewTestCluster(t, 1, func(cfg *Config) { cfg.MaxPendingApply = 8 })
	l := c.Leader()
	l.Node.pending.Add(8) // the queue is as deep as allowed
	_, err := l.Client.Enqueue(context.Background(), []api.Message{{Topic: "bp", Payload: api.TextBody("x")}})
	var e *client.Error
	if !errors.As(err, &e) || e.Status != 429 || e.Code != "overloaded" || e.RetryAfter <= 0 {
		t.Fatalf("want 429 overloaded with Retry-After, got %v", err)
	}
	if topics, _ := l.Client.Topics(context.Background()); len(topics) != 0 {
		t.Fatalf("a rejected enqueue changed state: %+v", topics)
	}
	l.Node.pending.Add(-8)
	enqueue(t, l.Client, api.Message{Topic: "bp", Payload: api.TextBody("x")})
}

// A leader shut down cleanly (SIGTERM path: step down, drain, close) loses
// no acknowledged message, and a new leader serves within an election.
func TestGracefulLeaderShutdownLosesNothing(t *testing.T) {
	c := NewTestCluster(t, 3, nil)
	leader := c.Leader()
	var ids []string
	for i := 0; i < 50; i++ {
		res := enqueue(t, leader.Client, api.Message{Topic: "g", Payload: api.TextBody(fmt.Sprint(i)), DelayMs: ptr(int64(60_000))})
		ids = append(ids, res[0].ID)
	}
	idx := 0
	for i, tn := range c.Nodes {
		if tn == leader {
			idx = i
		}
	}
	stopped := time.Now()
	c.Stop(idx)
	nl := c.Leader()
	t.Logf("new leader %s serving %v after the old one began shutting down", nl.Cfg.ID, time.Since(stopped))
	for _, id := range ids {
		if _, err := nl.Client.Get(context.Background(), id); err != nil {
			t.Fatalf("acknowledged message %s lost: %v", id, err)
		}
	}
	enqueue(t, nl.Client, api.Message{Topic: "g", Payload: api.TextBody("after")})
}

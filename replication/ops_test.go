package replication_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// When the Raft apply queue is full, enqueues answer ErrOverloaded and
// change nothing.
func TestBackPressureOverloaded(t *testing.T) {
	c := repltest.NewCluster(t, 1, func(cfg *Config) { cfg.MaxPendingApply = 8 })
	l := c.Leader()
	l.Node.Pending().Add(8) // the queue is as deep as allowed
	_, err := l.Node.Enqueue(context.Background(), []command.NewMessage{msg("bp", "x", 0)})
	if !errors.Is(err, model.ErrOverloaded) {
		t.Fatalf("want ErrOverloaded, got %v", err)
	}
	if topics, _ := l.Node.Topics(context.Background()); len(topics) != 0 {
		t.Fatalf("a rejected enqueue changed state: %+v", topics)
	}
	l.Node.Pending().Add(-8)
	enqueue(t, l.Node, msg("bp", "x", 0))
}

// A leader shut down cleanly (SIGTERM path: step down, drain, close) loses
// no acknowledged message, and a new leader serves within an election.
func TestGracefulLeaderShutdownLosesNothing(t *testing.T) {
	c := repltest.NewCluster(t, 3, nil)
	leader := c.Leader()
	var ids []model.ID
	for i := 0; i < 50; i++ {
		res := enqueue(t, leader.Node, msg("g", fmt.Sprint(i), time.Minute))
		ids = append(ids, res[0].ID)
	}
	idx := 0
	for i, tn := range c.Nodes {
		if tn == leader {
			idx = i
		}
	}
	c.Stop(idx)
	nl := c.Leader()
	for _, id := range ids {
		if _, err := nl.Node.Get(context.Background(), id); err != nil {
			t.Fatalf("acknowledged message %s lost: %v", id, err)
		}
	}
	enqueue(t, nl.Node, msg("g", "after", 0))
}

package replication_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// TestReadsWithoutLeaderAreUnavailable: a node that knows no leader cannot
// tell whether its state is current, so it answers the reads of messages,
// topics, schedules and webhooks ErrUnavailable (503) rather than from its
// state (a not-found could be a message it never saw); the operator's views
// of its local wheel still answer. Once a leader is back, so are the reads.
func TestReadsWithoutLeaderAreUnavailable(t *testing.T) {
	c := repltest.NewCluster(t, 3, nil)
	l := c.Leader()
	id := enqueue(t, l.Node, msg("reads", "b", time.Hour))[0].ID
	ctx := context.Background()
	if _, err := l.Node.Get(ctx, id); err != nil {
		t.Fatalf("with a leader: %v", err)
	}
	var stopped []int
	for i, tn := range c.Nodes {
		if tn != l {
			c.Stop(i)
			stopped = append(stopped, i)
		}
	}
	nettest.WaitFor(t, 30*time.Second, "the cut-off leader to know no leader", func() bool {
		_, lid := l.Node.Raft().LeaderWithID()
		return lid == ""
	})
	reads := map[string]func() error{
		"Get":       func() error { _, err := l.Node.Get(ctx, id); return err },
		"GetByKey":  func() error { _, err := l.Node.GetByKey(ctx, "reads", "k"); return err },
		"Topics":    func() error { _, err := l.Node.Topics(ctx); return err },
		"Dead":      func() error { _, err := l.Node.Dead(ctx, "reads", 10); return err },
		"Schedule":  func() error { _, err := l.Node.Schedule(ctx, "s"); return err },
		"Schedules": func() error { _, err := l.Node.Schedules(ctx, "", 10); return err },
		"Webhook":   func() error { _, err := l.Node.Webhook(ctx, "reads"); return err },
	}
	for name, read := range reads {
		if err := read(); !errors.Is(err, model.ErrUnavailable) {
			t.Errorf("%s without a leader: %v, want ErrUnavailable", name, err)
		}
	}
	if _, err := l.Node.Wheel(ctx); err != nil {
		t.Errorf("the wheel view without a leader: %v", err)
	}
	c.Start(stopped[0])
	c.Leader()
	nettest.WaitFor(t, 30*time.Second, "the node to read again", func() bool {
		_, err := l.Node.Get(ctx, id)
		return err == nil
	})
}

package transport_test

import (
	"testing"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

func TestSubscribeAcksInBackground(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	sub := e.c.Subscribe(ctx, "sub", client.SubscribeOptions{MaxInflight: 10})
	e.mustEnqueue(texts(50, "sub")...)
	transporttest.Receive(t, sub, 50)
	check(t, "close", sub.Close(ctx))
	equal(t, "no error", sub.Err(), error(nil))
	ts, err := e.c.Topics(ctx)
	check(t, "topics", err)
	equal(t, "every delivery acked", ts[0], api.TopicCounts{Topic: "sub"})
}

func TestSubscribeRefusedForGood(t *testing.T) {
	e := newEnv(t)
	sub := e.c.Subscribe(t.Context(), "sub", client.SubscribeOptions{MaxInflight: 200000})
	for range sub.Deliveries() {
		t.Fatal("a delivery on a refused stream")
	}
	if !client.HasCode(sub.Err(), api.CodeInvalidArgument) {
		t.Fatalf("err = %v, want invalid_argument", sub.Err())
	}
}

func TestSubscribeReconnectsAfterLeaderChange(t *testing.T) {
	c := startCluster(t, 3, transporttest.Options{})
	ctx := t.Context()
	i := c.FollowerIndex()
	follower := c.Nodes[i]
	sub := follower.Client.Subscribe(ctx, "lc", client.SubscribeOptions{})
	defer sub.Close(ctx)
	_, err := c.Leader().Client.Enqueue(ctx, texts(1, "lc"))
	check(t, "enqueue", err)
	transporttest.Receive(t, sub, 1)

	leader := handOver(t, c)
	if leader == follower {
		// The subscription's node leads now: it serves the stream itself.
		t.Log("the subscribed node was elected")
	}
	_, err = leader.Client.Enqueue(ctx, texts(1, "lc"))
	check(t, "enqueue after the leader change", err)
	transporttest.Receive(t, sub, 1)
}

// handOver makes the leader step down and returns the next leader.
func handOver(t *testing.T, c *transporttest.Cluster) *transporttest.Node {
	t.Helper()
	old := c.Leader()
	old.Node.StepDown()
	var leader *transporttest.Node
	old.Eventually(t, "another leader", func() bool {
		leader = c.Leader()
		return leader != old
	})
	return leader
}

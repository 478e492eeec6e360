package replication

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

func ptr[T any](v T) *T { return &v }

func enqueue(t *testing.T, cl *client.Client, msgs ...api.Message) []api.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cl.Enqueue(ctx, msgs)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return res
}

func reserve(t *testing.T, cl *client.Client, topic string, max int, wait time.Duration) []api.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait+10*time.Second)
	defer cancel()
	d, err := cl.Reserve(ctx, topic, api.ReserveRequest{Max: ptr(max), WaitMs: wait.Milliseconds()})
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	return d
}

func TestSingleNodeLifecycle(t *testing.T) {
	c := NewTestCluster(t, 1, nil)
	cl := c.Leader().Client
	body := "hello"
	res := enqueue(t, cl, api.Message{Topic: "orders", Payload: api.Payload{Body: &body}, DelayMs: ptr(int64(300)), Key: "k1"})
	dup := enqueue(t, cl, api.Message{Topic: "orders", Payload: api.Payload{Body: &body}, Key: "k1"})
	if !dup[0].Duplicate || dup[0].ID != res[0].ID {
		t.Fatalf("dedupe by key: %+v vs %+v", dup, res)
	}
	got := reserve(t, cl, "orders", 10, 10*time.Second)
	if len(got) != 1 || got[0].ID != res[0].ID || got[0].Attempt != 1 {
		t.Fatalf("reserve: %+v", got)
	}
	recv := time.Now().UnixMilli()
	if recv < got[0].DeliverAtMs {
		t.Fatalf("delivered %d ms early", got[0].DeliverAtMs-recv)
	}
	ack, err := cl.Ack(context.Background(), []string{got[0].Receipt})
	if err != nil || ack.Acked != 1 {
		t.Fatalf("ack: %+v %v", ack, err)
	}
	if _, err := cl.Get(context.Background(), res[0].ID); !client.HasCode(err, "not_found") {
		t.Fatalf("get after ack: %v", err)
	}
}

func TestThreeNodesForwardAndFailover(t *testing.T) {
	c := NewTestCluster(t, 3, nil)
	leader := c.Leader()
	f := c.Follower()
	WaitFor(t, 10*time.Second, "follower knows leader's http address", func() bool {
		_, _, known := f.Node.LeaderHTTP()
		return known
	})
	body := "x"
	res := enqueue(t, f.Client, api.Message{Topic: "t", Payload: api.Payload{Body: &body}, DelayMs: ptr(int64(200))})
	got := reserve(t, f.Client, "t", 1, 10*time.Second)
	if len(got) != 1 || got[0].ID != res[0].ID {
		t.Fatalf("reserve via follower: %+v", got)
	}
	if _, err := f.Client.Ack(context.Background(), []string{got[0].Receipt}); err != nil {
		t.Fatal(err)
	}

	// A message due after the leader dies is delivered by the new leader.
	res = enqueue(t, leader.Client, api.Message{Topic: "t", Payload: api.Payload{Body: &body}, DelayMs: ptr(int64(1500))})
	for i, tn := range c.Nodes {
		if tn == leader {
			c.Stop(i)
		}
	}
	nl := c.Leader()
	if nl == leader {
		t.Fatal("old leader still leads")
	}
	got = reserve(t, nl.Client, "t", 1, 15*time.Second)
	if len(got) != 1 || got[0].ID != res[0].ID {
		t.Fatalf("after failover: %+v", got)
	}
	if now := time.Now().UnixMilli(); now < got[0].DeliverAtMs {
		t.Fatalf("early by %d ms", got[0].DeliverAtMs-now)
	}
}

func TestRestartKeepsState(t *testing.T) {
	c := NewTestCluster(t, 1, nil)
	body := "later"
	res := enqueue(t, c.Leader().Client, api.Message{Topic: "a", Payload: api.Payload{Body: &body}, DelayMs: ptr(int64(3 * 3600 * 1000))})
	c.Stop(0)
	c.Start(0)
	l := c.Leader()
	v, err := l.Client.Get(context.Background(), res[0].ID)
	if err != nil || v.State != "delayed" {
		t.Fatalf("after restart: %+v %v", v, err)
	}
	var apiErr *client.Error
	_, err = l.Client.Get(context.Background(), "000000000000000000000001")
	if !errors.As(err, &apiErr) || apiErr.Status != 404 {
		t.Fatalf("unknown id: %v", err)
	}
}

// Replication to followers is not pipelined: hashicorp/raft's pipeline can
// deadlock after a follower answers Success=false (see Open).
func TestReplicationNotPipelined(t *testing.T) {
	c := NewTestCluster(t, 1, nil)
	n := c.Leader().Node
	_, err := n.trans.AppendEntriesPipeline("n2", raft.ServerAddress(FreeAddr(t)))
	if !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("AppendEntriesPipeline: %v, want raft.ErrPipelineReplicationNotSupported", err)
	}
}

package systemtest

import (
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// TestGRPCViaFollower calls a follower's gRPC API, which each node reports
// in its own cluster view: the follower forwards the leader's calls to the
// leader's gRPC API and answers reads itself.
func TestGRPCViaFollower(t *testing.T) {
	t.Parallel()
	c := NewCluster(t, binary(t), Options{Nodes: 3})
	ctx := ctxFor(t, 60*time.Second)
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	follower := c.Others(leader)[0]
	own, err := follower.Client.ClusterLocal(ctx)
	if err != nil || own.GRPCAddr == "" {
		t.Fatalf("the follower's own view %+v: %v", own, err)
	}
	g, err := client.NewGRPC("grpc://" + own.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	topic := uniqueTopic(t, "grpc")
	res, err := g.Enqueue(ctx, []api.Message{{Topic: topic, Payload: api.TextBody("via a follower"), Key: "k"}})
	if err != nil || len(res) != 1 || res[0].Duplicate {
		t.Fatalf("enqueue at the follower: %+v %v", res, err)
	}
	v, err := leader.Client.Get(ctx, res[0].ID)
	if err != nil || v.Body == nil || *v.Body != "via a follower" {
		t.Fatalf("the message at the leader: %+v %v", v, err)
	}
	ds, err := g.Reserve(ctx, topic, api.ReserveRequest{WaitMs: 5000})
	if err != nil || len(ds) != 1 || ds[0].ID != res[0].ID {
		t.Fatalf("reserve at the follower: %+v %v", ds, err)
	}
	if a, err := g.Ack(ctx, []string{ds[0].Receipt}); err != nil || a.Acked != 1 {
		t.Fatalf("ack at the follower: %+v %v", a, err)
	}
	cl, err := g.Cluster(ctx)
	if err != nil || len(cl.Nodes) != 3 || cl.Self != follower.ID {
		t.Fatalf("cluster at the follower: %+v %v", cl, err)
	}
}

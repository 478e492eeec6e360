package grpcserver_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

// The gRPC API does not route calls to a topic's or an id's group: on a
// node of many groups it refuses every call, naming --groups, rather than
// serve them all from group 0.
func TestGroupsRefused(t *testing.T) {
	c := transporttest.StartGroups(t, 1, 3, transporttest.Options{})
	kn := c.Nodes[0]
	conn := serveGRPC(t, kn, transporttest.GroupsBackend{Node: kn.Node, Groups: kn.Groups}, nil)
	cl := pb.NewDelaywheelClient(conn)
	ctx := authed(t.Context(), token)
	_, err := cl.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "t", Body: []byte("x")}}})
	wantCode(t, "enqueue", err, codes.FailedPrecondition, "--groups 3")
	_, err = cl.Topics(ctx, &pb.TopicsRequest{})
	wantCode(t, "topics", err, codes.FailedPrecondition, "--groups 3")
	sub, err := cl.Subscribe(ctx)
	if err == nil {
		_, err = sub.Recv()
	}
	wantCode(t, "subscribe", err, codes.FailedPrecondition, "--groups 3")
}

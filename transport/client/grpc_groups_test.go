package client_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/transport/grpcserver"
	"github.com/delaywheel/delaywheel/transport/transporttest"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// topicOfGroup returns a topic of group g, of groups.
func topicOfGroup(g, groups int) string {
	for i := 0; ; i++ {
		if topic := fmt.Sprintf("split.%d", i); model.GroupOf(topic, groups) == g {
			return topic
		}
	}
}

// TestGRPCSplitEnqueueNotRepeated: a batch over two groups sent to a node
// that leads one of them and does not forward the other's part is
// answered NOT_LEADER naming that group once its own part is enqueued.
// The client must not send the batch again to the next node it knows,
// which would enqueue the first part a second time.
func TestGRPCSplitEnqueueNotRepeated(t *testing.T) {
	t.Parallel() // a cluster spends its start waiting for an election
	c := transporttest.StartGroups(t, 2, 2, transporttest.Options{})
	c.Spread(t)
	serve := func(kn *transporttest.Node, forward bool) string {
		addr, _ := transporttest.ServeGRPC(t, grpcserver.Config{HTTP: transport.Config{Clock: kn.Clock.Now}, Forward: forward},
			transport.GroupBackends(kn.Groups)...)
		return addr
	}
	l0 := c.Leader(0)
	g, err := client.NewGRPC("grpc://" + serve(l0, false) + "," + serve(c.Leader(1), true))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	t0, t1 := topicOfGroup(0, 2), topicOfGroup(1, 2)
	_, err = g.Enqueue(ctx, []api.Message{{Topic: t0}, {Topic: t1}})
	if !client.HasCode(err, api.CodeUnavailable) || !strings.Contains(err.Error(), "group 1: ") {
		t.Fatalf("enqueue over two groups, one not led by the node asked: %v; want unavailable naming group 1", err)
	}
	ts, err := l0.Client.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range ts {
		if tc.Topic == t0 && tc.Delayed+tc.Ready != 1 {
			t.Fatalf("topic %s holds %d messages after one enqueue of one: %+v", t0, tc.Delayed+tc.Ready, tc)
		}
	}
}

package grpcserver_test

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/transport/grpcserver"
	"github.com/delaywheel/delaywheel/transport/transporttest"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// groupsGRPC is a cluster of many Raft groups, each node behind a gRPC
// server that forwards a group's calls to that group's leader, at the
// gRPC address its member record holds.
type groupsGRPC struct {
	c       *transporttest.GroupsCluster
	clients []pb.DelaywheelClient
	conns   []string // each node's gRPC address
}

// startGroupsGRPC starts 3 nodes of groups Raft groups, each led by its
// preferred node (GroupsCluster.Spread), with a gRPC server a node.
//
// The tests send each call once and name the leaders Spread left, so the
// leaderships must hold for the whole test. All the nodes share one
// process: on a busy machine it can stall for half a second, past the
// default timeouts (a leader steps down once a quorum has not answered
// for half a heartbeat timeout), and every group would elect again,
// answering meanwhile that it knows no leader. The timeouts here outlast
// such a stall.
func startGroupsGRPC(t *testing.T, groups int) *groupsGRPC {
	t.Helper()
	lns := map[string]net.Listener{}
	for i := range 3 {
		lns[fmt.Sprintf("n%d", i+1)] = transporttest.ListenGRPC(t)
	}
	c := transporttest.StartGroups(t, 3, groups, transporttest.Options{Replication: func(cfg *replication.Config) {
		cfg.GRPCAddr = lns[cfg.ID].Addr().String()
		cfg.HeartbeatTimeout, cfg.ElectionTimeout = 2*time.Second, 2*time.Second
	}})
	c.Spread(t)
	gg := &groupsGRPC{c: c}
	for _, kn := range c.Nodes {
		groups := transport.GroupBackends(kn.Groups)
		view := transport.NewServer(transport.Config{Clock: kn.Clock.Now}, groups...)
		addr, _ := transporttest.ServeGRPCOn(t, lns[kn.ID], grpcserver.Config{
			HTTP: transport.Config{Clock: kn.Clock.Now, AuthToken: token}, ReadyInterval: 10 * time.Millisecond,
			Cluster: view.ClusterView, Forward: true}, groups...)
		gg.clients = append(gg.clients, pb.NewDelaywheelClient(dial(t, addr)))
		gg.conns = append(gg.conns, addr)
	}
	return gg
}

// index returns the index in the cluster's nodes of the node with id.
func (gg *groupsGRPC) index(t *testing.T, id string) int {
	t.Helper()
	for i, kn := range gg.c.Nodes {
		if kn.ID == id {
			return i
		}
	}
	t.Fatalf("no node %s", id)
	return -1
}

// topicOf returns a topic of group g, of groups.
func topicOf(g, groups int) string {
	for i := 0; ; i++ {
		if topic := fmt.Sprintf("orders.%d", i); model.GroupOf(topic, groups) == g {
			return topic
		}
	}
}

// A batch over every group enqueued through a node that leads one of
// them is split by group, each part taken by its group's leader, the
// results in the batch's order with ids naming their topic's group; the
// node reads them at once, and any node gets and cancels them by id. The
// topics of every group are listed together.
func TestGroupsEnqueueSpansGroups(t *testing.T) {
	const groups = 3
	gg := startGroupsGRPC(t, groups)
	ctx := authed(t.Context(), token)
	leaders := gg.c.Leaders()
	now := gg.c.Nodes[0].Clock.Now().UnixMilli()
	via := gg.index(t, leaders[0]) // leads group 0, follows 1 and 2
	var msgs []*pb.Message
	for i := range 12 {
		msgs = append(msgs, &pb.Message{Topic: topicOf(i%groups, groups), Body: fmt.Appendf(nil, "m%d", i), DelayMs: proto64(60000)})
	}
	res := get(gg.clients[via].Enqueue(ctx, &pb.EnqueueRequest{Messages: msgs}))(t, "enqueue over every group")
	if len(res.Results) != len(msgs) {
		t.Fatalf("%d results for %d messages", len(res.Results), len(msgs))
	}
	for i, r := range res.Results {
		id, err := model.ParseID(r.Id)
		if err != nil {
			t.Fatalf("result %d: %v", i, err)
		}
		if g := model.GroupOf(msgs[i].Topic, groups); id.Group() != g {
			t.Fatalf("result %d: id %s names group %d; its topic %s is group %d's", i, r.Id, id.Group(), msgs[i].Topic, g)
		}
		if r.DeliverAtMs != now+60000 {
			t.Fatalf("result %d due at %d", i, r.DeliverAtMs)
		}
		// The node the batch went through reads it at once.
		v := get(gg.clients[via].Get(ctx, &pb.GetRequest{Id: r.Id}))(t, "get "+r.Id+" where it was enqueued")
		if v.Topic != msgs[i].Topic || string(v.Body) != string(msgs[i].Body) {
			t.Fatalf("get %s: %v", r.Id, v)
		}
		// Held by its group's leader, where the part was forwarded.
		leader := gg.c.Nodes[gg.index(t, leaders[id.Group()])]
		leader.Eventually(t, "message "+r.Id+" at its group's leader", func() bool {
			_, err := leader.Groups.Node(id.Group()).Store().Get(id)
			return err == nil
		})
	}
	// Each part went to its group's leader's gRPC address, which the
	// node the batch went through holds in its record of that leader.
	for g := 1; g < groups; g++ {
		m, _, _ := gg.c.Nodes[via].Groups.Node(g).Leader()
		if want := gg.conns[gg.index(t, leaders[g])]; m.GRPCAddr != want {
			t.Errorf("group %d's leader as the node records it: %+v; want gRPC at %s", g, m, want)
		}
	}

	// One message of another group alone, through the same node.
	one := get(gg.clients[via].Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: topicOf(2, groups)}}}))(t, "enqueue to group 2")
	if id, _ := model.ParseID(one.Results[0].Id); id.Group() != 2 {
		t.Fatalf("id %s of a group 2 topic", one.Results[0].Id)
	}

	// Cancel by id and by key, and reschedule, through another node.
	other := gg.clients[(via+1)%3]
	for i := range groups {
		id := res.Results[i].Id
		rs := get(other.Reschedule(ctx, &pb.RescheduleRequest{Id: id, DelayMs: proto64(5000)}))(t, "reschedule "+id)
		if rs.DeliverAtMs != now+5000 {
			t.Fatalf("rescheduled %s to %d", id, rs.DeliverAtMs)
		}
		if cn := get(other.Cancel(ctx, &pb.CancelRequest{Id: id}))(t, "cancel "+id); cn.Id != id || cn.State != "cancelled" {
			t.Fatalf("cancelled %v", cn)
		}
		_, err := other.Get(ctx, &pb.GetRequest{Id: id})
		wantCode(t, "get a cancelled message", err, codes.NotFound, "")
	}
	keyed := get(gg.clients[via].Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{
		{Topic: topicOf(1, groups), Key: "k", DelayMs: proto64(1000)}, {Topic: topicOf(2, groups), Key: "k", DelayMs: proto64(1000)},
	}}))(t, "enqueue with keys")
	for i, g := range []int{1, 2} {
		cn := get(other.Cancel(ctx, &pb.CancelRequest{Topic: topicOf(g, groups), Key: "k"}))(t, "cancel by key")
		if cn.Id != keyed.Results[i].Id {
			t.Fatalf("cancel by key in group %d: %v, want %s", g, cn, keyed.Results[i].Id)
		}
	}

	// Every node lists the topics of every group, by name.
	for i, cl := range gg.clients {
		gg.c.Nodes[i].Eventually(t, "node "+gg.c.Nodes[i].ID+" to list every group's topics", func() bool {
			tp, err := cl.Topics(ctx, &pb.TopicsRequest{})
			if err != nil || len(tp.Topics) != groups {
				return false
			}
			return slices.IsSortedFunc(tp.Topics, func(a, b *pb.TopicCounts) int { return strings.Compare(a.Topic, b.Topic) })
		})
	}
}

// Messages of every group are reserved through a node that leads one
// group, and acked, touched and nacked through another in one call each,
// the receipts split by group.
func TestGroupsReserveAndSettleSpanGroups(t *testing.T) {
	const groups = 3
	gg := startGroupsGRPC(t, groups)
	ctx := authed(t.Context(), token)
	var msgs []*pb.Message
	for i := range 6 {
		msgs = append(msgs, &pb.Message{Topic: topicOf(i%groups, groups), Body: []byte("x")})
	}
	res := get(gg.clients[0].Enqueue(ctx, &pb.EnqueueRequest{Messages: msgs}))(t, "enqueue")
	var receipts []string
	for g := range groups {
		for got := 0; got < 2; {
			d := get(gg.clients[1].Reserve(ctx, &pb.ReserveRequest{Topic: topicOf(g, groups), Max: proto32(int32(2 - got)), WaitMs: 5000}))(t, "reserve")
			for _, m := range d.Messages {
				if !slices.ContainsFunc(res.Results, func(r *pb.Result) bool { return r.Id == m.Id }) {
					t.Fatalf("reserved %s, not enqueued", m.Id)
				}
				receipts = append(receipts, m.Receipt)
				got++
			}
		}
	}
	if s := get(gg.clients[2].Touch(ctx, &pb.ReceiptsRequest{Receipts: receipts}))(t, "touch"); s.Done != 6 || s.Stale != 0 {
		t.Fatalf("touched %v", s)
	}
	if s := get(gg.clients[2].Ack(ctx, &pb.ReceiptsRequest{Receipts: receipts[:3]}))(t, "ack"); s.Done != 3 || s.Stale != 0 {
		t.Fatalf("acked %v", s)
	}
	if s := get(gg.clients[0].Nack(ctx, &pb.NackRequest{Receipts: receipts, DelayMs: 1000}))(t, "nack"); s.Done != 3 || s.Stale != 3 {
		t.Fatalf("nacked %v, want 3 done and the 3 acked stale", s)
	}
	if s := get(gg.clients[1].Ack(ctx, &pb.ReceiptsRequest{Receipts: receipts}))(t, "ack again"); s.Done != 0 || s.Stale != 6 {
		t.Fatalf("acked again %v", s)
	}
	// The cluster view names every group and its leader; every node serves
	// once each of its groups is ready.
	cl := get(gg.clients[1].Cluster(ctx, &pb.ClusterRequest{}))(t, "cluster")
	leaders := gg.c.Leaders()
	if len(cl.Groups) != groups {
		t.Fatalf("cluster groups %v", cl.Groups)
	}
	for g, gs := range cl.Groups {
		if int(gs.Group) != g || gs.Leader != leaders[g] {
			t.Fatalf("cluster group %d: %v, want leader %s", g, gs, leaders[g])
		}
	}
	for i, kn := range gg.c.Nodes {
		h := healthpb.NewHealthClient(dial(t, gg.conns[i]))
		kn.AdvanceUntil(t, 100*time.Millisecond, kn.ID+" to serve health in every group", func() bool {
			st, err := h.Check(ctx, &healthpb.HealthCheckRequest{Service: grpcserver.ServiceName})
			return err == nil && st.Status == healthpb.HealthCheckResponse_SERVING
		})
	}
}

// A Subscribe stream is served by its topic's group's leader: opened at
// another node, it is passed on there (deliveries down, acks up, the
// leader's refusals as they are); a stream another node already passed on
// is refused NOT_LEADER, naming the group's leader, and not passed again.
func TestGroupsSubscribe(t *testing.T) {
	const groups = 3
	gg := startGroupsGRPC(t, groups)
	ctx := authed(t.Context(), token)
	leaders := gg.c.Leaders()
	topic := topicOf(1, groups)
	at, other := gg.index(t, leaders[1]), gg.index(t, leaders[0])
	loop := metadata.AppendToOutgoingContext(ctx, grpcserver.ForwardedKey, "1")
	err := subscribeErr(loop, gg.clients[other], topic)
	st := wantCode(t, "a passed-on subscribe at another group's leader", err, codes.Unavailable, "not the leader")
	if info := errorInfo(st); info == nil || info.Reason != grpcserver.ReasonNotLeader || info.Metadata[grpcserver.MetaLeaderHTTP] != gg.c.Nodes[at].Addr {
		t.Fatalf("error info %v, want group 1's leader at %s", info, gg.c.Nodes[at].Addr)
	}

	for _, via := range []int{at, other} {
		sub := get(gg.clients[via].Subscribe(ctx))(t, "subscribe")
		get(0, sub.Send(&pb.SubscribeRequest{Topic: topic}))(t, "open the stream")
		res := get(gg.clients[other].Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: topic, Body: []byte("hi")}}}))(t, "enqueue")
		d := get(sub.Recv())(t, "a delivery")
		if len(d.Messages) != 1 || d.Messages[0].Id != res.Results[0].Id {
			t.Fatalf("delivered through node %d: %v, want %s", via, d.Messages, res.Results[0].Id)
		}
		get(0, sub.Send(&pb.SubscribeRequest{Ack: []string{d.Messages[0].Receipt}}))(t, "ack up the stream")
		gg.c.Nodes[at].Eventually(t, "the acked message gone", func() bool {
			_, err := gg.clients[at].Get(ctx, &pb.GetRequest{Id: res.Results[0].Id})
			return err != nil
		})
		// A receipt of another group ends the stream INVALID_ARGUMENT.
		foreign := "000000000000000100000000.dff9db1391163e6f" // group 0
		get(0, sub.Send(&pb.SubscribeRequest{Ack: []string{foreign}}))(t, "ack of another group")
		for {
			if _, err := sub.Recv(); err != nil {
				wantCode(t, "ack of another group", err, codes.InvalidArgument, "ack[0]: receipt names group 0; this stream's topic is in group 1")
				break
			}
		}
	}
}

// An id, a receipt or a group this cluster does not have is refused,
// naming the field and the range.
func TestGroupsOutOfRange(t *testing.T) {
	const groups = 3
	gg := startGroupsGRPC(t, groups)
	ctx := authed(t.Context(), token)
	c := gg.clients[0]
	const id = "000000000000000a05000000" // group 5
	want := "id: message id " + id + " names group 5; this cluster has groups 0 to 2"
	_, err := c.Get(ctx, &pb.GetRequest{Id: id})
	wantCode(t, "get", err, codes.InvalidArgument, want)
	_, err = c.Cancel(ctx, &pb.CancelRequest{Id: id})
	wantCode(t, "cancel", err, codes.InvalidArgument, want)
	_, err = c.Reschedule(ctx, &pb.RescheduleRequest{Id: id, DelayMs: proto64(5)})
	wantCode(t, "reschedule", err, codes.InvalidArgument, want)
	_, err = c.Get(ctx, &pb.GetRequest{Id: "zz"})
	wantCode(t, "malformed id", err, codes.InvalidArgument, "id: must be a message id")
	_, err = c.Ack(ctx, &pb.ReceiptsRequest{Receipts: []string{"000000000000000100000000.dff9db1391163e6f", id + ".dff9db1391163e6f"}})
	wantCode(t, "ack", err, codes.InvalidArgument, "receipts[1]: receipt names group 5; this cluster has groups 0 to 2")
	_, err = c.Wheel(ctx, &pb.WheelRequest{Group: 9})
	wantCode(t, "wheel", err, codes.InvalidArgument, "group: must be between 0 and 2 (this cluster has 3 groups), got 9")
	_, err = c.Slot(ctx, &pb.SlotRequest{Group: -1})
	wantCode(t, "slot", err, codes.InvalidArgument, "group: must be between 0 and 2 (this cluster has 3 groups), got -1")
	// A batch over many groups is validated whole before any part is sent.
	_, err = c.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: topicOf(1, groups)}, {Topic: topicOf(2, groups)}, {Topic: "bad topic"}}})
	wantCode(t, "a bad message in a batch over many groups", err, codes.InvalidArgument, "messages[2].topic")

	// Each group's wheel is its own.
	res := get(c.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: topicOf(2, groups), DelayMs: proto64(5000)}}}))(t, "enqueue")
	gg.c.Nodes[0].Eventually(t, "the message in group 2's wheel at node 0", func() bool {
		w, err := c.Wheel(ctx, &pb.WheelRequest{Group: 2})
		return err == nil && len(w.Nonempty) == 1
	})
	w := get(c.Wheel(ctx, &pb.WheelRequest{Group: 2}))(t, "wheel of group 2")
	sl := get(c.Slot(ctx, &pb.SlotRequest{Group: 2, Slot: w.Nonempty[0].Slot, Records: true}))(t, "slot of group 2")
	if !slices.ContainsFunc(sl.Records, func(r *pb.SlotRecord) bool { return r.Id == res.Results[0].Id }) {
		t.Fatalf("slot of group 2: %v", sl.Records)
	}
	if w0 := get(c.Wheel(ctx, &pb.WheelRequest{}))(t, "wheel of group 0"); len(w0.Nonempty) != 0 {
		t.Fatalf("group 0's wheel holds %v", w0.Nonempty)
	}

	// A node that cannot forward answers the part of a group it does not
	// lead NOT_LEADER, naming the group and its leader; the part of the
	// group it leads is done.
	leaders := gg.c.Leaders()
	at := gg.index(t, leaders[0])
	kn := gg.c.Nodes[at]
	lone := pb.NewDelaywheelClient(serveGRPC(t, kn, transport.GroupBackends(kn.Groups), nil))
	_, err = lone.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: topicOf(0, groups), Key: "done"}, {Topic: topicOf(1, groups)}}})
	st := wantCode(t, "a part this node cannot forward", err, codes.Unavailable, "group 1: this node is not the leader")
	if info := errorInfo(st); info == nil || info.Metadata[grpcserver.MetaLeaderHTTP] != gg.c.Nodes[gg.index(t, leaders[1])].Addr {
		t.Fatalf("error info %v, want group 1's leader", info)
	}
	if cn := get(lone.Cancel(ctx, &pb.CancelRequest{Topic: topicOf(0, groups), Key: "done"}))(t, "cancel the part that was done"); cn.Id == "" {
		t.Fatalf("cancelled %v", cn)
	}
}

package grpcserver_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/transport/transporttest"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// A buried message is dead at once, whatever its attempts left: the dead
// letters list it and a redrive makes it ready again. A receipt whose
// lease is over, or that names no lease, is stale; a malformed one, or
// none, is refused.
func TestBury(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	c := pb.NewDelaywheelClient(serveGRPC(t, kn, nil, nil))
	ctx := authed(t.Context(), token)

	get(c.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{
		{Topic: "t", Body: []byte("one"), MaxAttempts: proto32(5)},
		{Topic: "t", Body: []byte("two"), MaxAttempts: proto32(5)},
	}}))(t, "enqueue")
	d := get(c.Reserve(ctx, &pb.ReserveRequest{Topic: "t", Max: proto32(2), TtrMs: proto64(60000)}))(t, "reserve")
	if len(d.Messages) != 2 {
		t.Fatalf("reserved %v", d.Messages)
	}
	buried, other := d.Messages[0], d.Messages[1]
	if s := get(c.Bury(ctx, &pb.ReceiptsRequest{Receipts: []string{buried.Receipt}}))(t, "bury"); s.Done != 1 || s.Stale != 0 {
		t.Fatalf("buried %v", s)
	}
	dead := get(c.DeadLetters(ctx, &pb.DeadLettersRequest{Topic: "t"}))(t, "dead letters")
	if len(dead.Messages) != 1 || dead.Messages[0].Id != buried.Id || dead.Messages[0].State != "dead" || string(dead.Messages[0].Body) != string(buried.Body) {
		t.Fatalf("dead letters after the bury: %v; want %s alone", dead.Messages, buried.Id)
	}
	if v := get(c.Get(ctx, &pb.GetRequest{Id: other.Id}))(t, "get the other"); v.State != "reserved" {
		t.Fatalf("the message not buried is %v; want reserved", v)
	}
	// Once buried, its receipt settles nothing: bury and ack are stale.
	if s := get(c.Bury(ctx, &pb.ReceiptsRequest{Receipts: []string{buried.Receipt}}))(t, "bury again"); s.Done != 0 || s.Stale != 1 {
		t.Fatalf("buried again %v", s)
	}
	if s := get(c.Ack(ctx, &pb.ReceiptsRequest{Receipts: []string{buried.Receipt}}))(t, "ack of the buried"); s.Done != 0 || s.Stale != 1 {
		t.Fatalf("acked after the bury %v", s)
	}
	// A well-formed receipt of no lease (a nonce the node never handed
	// out) is stale too, and the message it names stays as it is.
	id, err := model.ParseID(other.Id)
	if err != nil {
		t.Fatal(err)
	}
	forged := model.Receipt{ID: id, Nonce: 1}.String()
	if forged == other.Receipt {
		forged = model.Receipt{ID: id, Nonce: 2}.String()
	}
	if s := get(c.Bury(ctx, &pb.ReceiptsRequest{Receipts: []string{forged}}))(t, "bury of no lease"); s.Done != 0 || s.Stale != 1 {
		t.Fatalf("buried without a lease %v", s)
	}
	_, err = c.Bury(ctx, &pb.ReceiptsRequest{Receipts: []string{other.Receipt, "not-a-receipt"}})
	wantCode(t, "bury of a malformed receipt", err, codes.InvalidArgument, "receipts[1]")
	_, err = c.Bury(ctx, &pb.ReceiptsRequest{})
	wantCode(t, "bury of none", err, codes.InvalidArgument, "receipts")
	if v := get(c.Get(ctx, &pb.GetRequest{Id: other.Id}))(t, "get the other"); v.State != "reserved" {
		t.Fatalf("after refused and stale buries the other message is %v; want reserved", v)
	}
	// The buried message is redriven to ready and reserved again.
	if r := get(c.Redrive(ctx, &pb.RedriveRequest{Topic: "t", Ids: []string{buried.Id}}))(t, "redrive"); r.Redriven != 1 {
		t.Fatalf("redriven %v", r)
	}
	again := get(c.Reserve(ctx, &pb.ReserveRequest{Topic: "t", WaitMs: 10}))(t, "reserve the redriven")
	if len(again.Messages) != 1 || again.Messages[0].Id != buried.Id {
		t.Fatalf("reserved after the redrive %v; want %s", again.Messages, buried.Id)
	}
}

// A bury whose receipts are of every group, sent through one node, is
// split by group, each part buried by its group's leader; the node that
// was sent it lists each among its topic's dead letters at once. A
// receipt of a group the cluster lacks is refused, naming it.
func TestGroupsBury(t *testing.T) {
	const groups = 3
	gg := startGroupsGRPC(t, groups)
	ctx := authed(t.Context(), token)
	var msgs []*pb.Message
	for g := range groups {
		msgs = append(msgs, &pb.Message{Topic: topicOf(g, groups), Body: []byte("x"), MaxAttempts: proto32(5)})
	}
	get(gg.clients[0].Enqueue(ctx, &pb.EnqueueRequest{Messages: msgs}))(t, "enqueue")
	var receipts, ids []string
	for g := range groups {
		d := get(gg.clients[1].Reserve(ctx, &pb.ReserveRequest{Topic: topicOf(g, groups), WaitMs: 5000}))(t, "reserve")
		if len(d.Messages) != 1 {
			t.Fatalf("reserved of group %d: %v", g, d.Messages)
		}
		receipts, ids = append(receipts, d.Messages[0].Receipt), append(ids, d.Messages[0].Id)
	}
	if s := get(gg.clients[2].Bury(ctx, &pb.ReceiptsRequest{Receipts: receipts}))(t, "bury"); s.Done != groups || s.Stale != 0 {
		t.Fatalf("buried %v", s)
	}
	for g := range groups {
		dead := get(gg.clients[2].DeadLetters(ctx, &pb.DeadLettersRequest{Topic: topicOf(g, groups)}))(t, "dead letters")
		if len(dead.Messages) != 1 || dead.Messages[0].Id != ids[g] {
			t.Fatalf("dead letters of group %d: %v; want %s", g, dead.Messages, ids[g])
		}
	}
	const id = "000000000000000a05000000" // group 5
	_, err := gg.clients[0].Bury(ctx, &pb.ReceiptsRequest{Receipts: []string{receipts[0], id + ".dff9db1391163e6f"}})
	wantCode(t, "bury of group 5", err, codes.InvalidArgument, "receipts[1]: receipt names group 5; this cluster has groups 0 to 2")
}

package grpcserver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/transport/grpcserver"
	"github.com/delaywheel/delaywheel/transport/transporttest"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

const token = "s3cret"

// serveGRPC starts the gRPC API of kn's node (on b when set) and returns a
// connection to it; the server stops at the end of the test.
func serveGRPC(t *testing.T, kn *transporttest.Node, groups []transport.Backend, edit func(*grpcserver.Config)) *grpc.ClientConn {
	t.Helper()
	if groups == nil {
		groups = []transport.Backend{kn.Node}
	}
	cfg := grpcserver.Config{HTTP: transport.Config{Clock: kn.Clock.Now, AuthToken: token}, ReadyInterval: 10 * time.Millisecond}
	if edit != nil {
		edit(&cfg)
	}
	addr, _ := transporttest.ServeGRPC(t, cfg, groups...)
	return dial(t, addr)
}

// dial connects to addr in plaintext until the end of the test.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func authed(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// get returns v, failing the test with what when err is set:
// get(c.Get(ctx, req))(t, "get").
func get[T any](v T, err error) func(t *testing.T, what string) T {
	return func(t *testing.T, what string) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

// wantCode checks err's code and that its message holds want.
func wantCode(t *testing.T, what string, err error, code codes.Code, want string) *status.Status {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code || !strings.Contains(st.Message(), want) {
		t.Fatalf("%s: %v, want %v containing %q", what, err, code, want)
	}
	return st
}

func TestEveryCall(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	c := pb.NewDelaywheelClient(serveGRPC(t, kn, nil, nil))
	ctx := authed(t.Context(), token)

	res := get(c.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{
		{Topic: "t", Body: []byte{0xff, 0}, DelayMs: proto64(60000), Key: "k1", Priority: -2, Headers: map[string]string{"h": "v"}},
		{Topic: "t", Body: []byte("now"), MaxAttempts: proto32(1), TtrMs: proto64(1)},
		{Topic: "t", Key: "k1", DelayMs: proto64(5)},
	}}))(t, "enqueue")
	if len(res.Results) != 3 || !res.Results[2].Duplicate || res.Results[2].Id != res.Results[0].Id {
		t.Fatalf("results %v", res.Results)
	}
	if got := res.Results[0].DeliverAtMs; got != transporttest.StartMs+60000 {
		t.Fatalf("due %d", got)
	}
	v := get(c.Get(ctx, &pb.GetRequest{Id: res.Results[0].Id}))(t, "get")
	if v.State != "delayed" || string(v.Body) != "\xff\x00" || v.Headers["h"] != "v" || v.Priority != -2 || v.Key != "k1" {
		t.Fatalf("view %v", v)
	}
	rs := get(c.Reschedule(ctx, &pb.RescheduleRequest{Id: res.Results[0].Id, DeliverAtMs: proto64(transporttest.StartMs + 1000)}))(t, "reschedule")
	if rs.DeliverAtMs != transporttest.StartMs+1000 {
		t.Fatalf("rescheduled %v", rs)
	}
	cn := get(c.Cancel(ctx, &pb.CancelRequest{Topic: "t", Key: "k1"}))(t, "cancel by key")
	if cn.Id != res.Results[0].Id || cn.State != "cancelled" {
		t.Fatalf("cancelled %v", cn)
	}
	// The second message is due now: reserve, touch, nack, reserve, ack.
	d := get(c.Reserve(ctx, &pb.ReserveRequest{Topic: "t", Max: proto32(5), TtrMs: proto64(60000)}))(t, "reserve")
	if len(d.Messages) != 1 || string(d.Messages[0].Body) != "now" || d.Messages[0].Receipt == "" {
		t.Fatalf("reserved %v", d.Messages)
	}
	receipt := []string{d.Messages[0].Receipt}
	if s := get(c.Touch(ctx, &pb.ReceiptsRequest{Receipts: receipt}))(t, "touch"); s.Done != 1 {
		t.Fatalf("touched %v", s)
	}
	if s := get(c.Nack(ctx, &pb.NackRequest{Receipts: receipt}))(t, "nack"); s.Done != 1 {
		t.Fatalf("nacked %v", s)
	}
	// max_attempts 1: the nacked message is dead.
	var dead *pb.DeadLettersResponse
	kn.AdvanceUntil(t, 100*time.Millisecond, "the nacked message dead", func() bool {
		dead = get(c.DeadLetters(ctx, &pb.DeadLettersRequest{Topic: "t"}))(t, "dead letters")
		return len(dead.Messages) == 1
	})
	if dead.Messages[0].State != "dead" {
		t.Fatalf("dead %v", dead.Messages)
	}
	// An empty list names none (a filter that matched nothing); all with
	// ids is refused; all moves every dead message.
	if r := get(c.Redrive(ctx, &pb.RedriveRequest{Topic: "t"}))(t, "redrive of no ids"); r.Redriven != 0 {
		t.Fatalf("redriven without ids or all: %v", r)
	}
	_, err := c.Redrive(ctx, &pb.RedriveRequest{Topic: "t", All: true, Ids: []string{dead.Messages[0].Id}})
	wantCode(t, "redrive of all and ids", err, codes.InvalidArgument, "ids: 1 given with all set")
	if still := get(c.DeadLetters(ctx, &pb.DeadLettersRequest{Topic: "t"}))(t, "dead letters"); len(still.Messages) != 1 {
		t.Fatalf("dead after refused redrives: %v", still.Messages)
	}
	// A limit set to 0 is out of range, as HTTP's ?limit=0; left out, the default.
	_, err = c.DeadLetters(ctx, &pb.DeadLettersRequest{Topic: "t", Limit: proto.Int32(0)})
	wantCode(t, "dead letters, limit 0", err, codes.InvalidArgument, "limit: must be between 1 and 1000, got 0")
	if r := get(c.Redrive(ctx, &pb.RedriveRequest{Topic: "t", All: true}))(t, "redrive"); r.Redriven != 1 {
		t.Fatalf("redriven %v", r)
	}
	d = get(c.Reserve(ctx, &pb.ReserveRequest{Topic: "t", WaitMs: 10}))(t, "reserve again")
	if len(d.Messages) != 1 {
		t.Fatalf("reserved again %v", d.Messages)
	}
	if s := get(c.Ack(ctx, &pb.ReceiptsRequest{Receipts: []string{d.Messages[0].Receipt}}))(t, "ack"); s.Done != 1 {
		t.Fatalf("acked %v", s)
	}
	if s := get(c.Ack(ctx, &pb.ReceiptsRequest{Receipts: []string{d.Messages[0].Receipt}}))(t, "ack again"); s.Stale != 1 {
		t.Fatalf("acked again %v", s)
	}
	more := get(c.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "u", DelayMs: proto64(5000)}}}))(t, "enqueue")
	if cn := get(c.Cancel(ctx, &pb.CancelRequest{Id: more.Results[0].Id}))(t, "cancel by id"); cn.Id != more.Results[0].Id {
		t.Fatalf("cancelled %v", cn)
	}
	get(c.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "u", DelayMs: proto64(5000)}}}))(t, "enqueue")
	tp := get(c.Topics(ctx, &pb.TopicsRequest{}))(t, "topics")
	if len(tp.Topics) == 0 {
		t.Fatalf("topics %v", tp)
	}
	w := get(c.Wheel(ctx, &pb.WheelRequest{}))(t, "wheel")
	if w.Slots != wheel.Slots || len(w.Nonempty) == 0 {
		t.Fatalf("wheel %v", w)
	}
	sl := get(c.Slot(ctx, &pb.SlotRequest{Slot: w.Nonempty[0].Slot, Records: true}))(t, "slot")
	if sl.Slot != w.Nonempty[0].Slot || len(sl.Records) == 0 {
		t.Fatalf("slot %v", sl)
	}
	cl := get(c.Cluster(ctx, &pb.ClusterRequest{}))(t, "cluster")
	if cl.Self != kn.ID || len(cl.Nodes) != 1 {
		t.Fatalf("cluster %v", cl)
	}
}

func TestErrorCodes(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	reg := prometheus.NewRegistry()
	c := pb.NewDelaywheelClient(serveGRPC(t, kn, nil, func(cfg *grpcserver.Config) {
		cfg.HTTP.Limits.MaxBatch = 2
		cfg.HTTP.Registerer = reg
	}))
	ctx := authed(t.Context(), token)

	_, err := c.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "t"}, {Topic: "bad topic"}}})
	st := wantCode(t, "bad topic", err, codes.InvalidArgument, "messages[1].topic: must be 1 to 200 characters")
	if info := errorInfo(st); info == nil || info.Reason != "invalid_argument" || info.Domain != grpcserver.Domain {
		t.Fatalf("error info %v", info)
	}
	_, err = c.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "t"}, {Topic: "t"}, {Topic: "t"}}})
	wantCode(t, "batch over the limit", err, codes.ResourceExhausted, "messages: 3 entries are over the limit of 2")
	if n := callsCounted(t, reg, "Enqueue", "InvalidArgument"); n != 1 {
		t.Fatalf("%v invalid enqueues counted, want 1", n)
	}
	_, err = c.Get(ctx, &pb.GetRequest{Id: "nope"})
	wantCode(t, "malformed id", err, codes.InvalidArgument, "id: must be a message id")
	_, err = c.Get(ctx, &pb.GetRequest{Id: "000000000000000100000000"})
	wantCode(t, "unknown id", err, codes.NotFound, "")
	_, err = c.Cancel(ctx, &pb.CancelRequest{Id: "000000000000000100000000", Topic: "t", Key: "k"})
	wantCode(t, "cancel by id and key", err, codes.InvalidArgument, "topic, key: must be empty when cancelling by id")
	_, err = c.Cancel(ctx, &pb.CancelRequest{Key: "k"})
	wantCode(t, "cancel by key without a topic", err, codes.InvalidArgument, "topic: required to cancel by key")
	_, err = c.Slot(ctx, &pb.SlotRequest{Slot: -1})
	wantCode(t, "unknown slot", err, codes.NotFound, "slot -1: no such slot")
	_, err = c.Reschedule(ctx, &pb.RescheduleRequest{Id: "000000000000000100000000"})
	wantCode(t, "reschedule without a time", err, codes.InvalidArgument, `set one of "delay_ms" or "deliver_at_ms"`)

	res := get(c.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "t"}}}))(t, "enqueue")
	get(c.Reserve(ctx, &pb.ReserveRequest{Topic: "t"}))(t, "reserve")
	_, err = c.Reschedule(ctx, &pb.RescheduleRequest{Id: res.Results[0].Id, DelayMs: proto64(5)})
	wantCode(t, "reschedule a reserved message", err, codes.FailedPrecondition, "reserved")

	// A backend that is overloaded answers RESOURCE_EXHAUSTED with a retry delay.
	oc := pb.NewDelaywheelClient(serveGRPC(t, kn, []transport.Backend{overloaded{kn.Node}}, nil))
	_, err = oc.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "t"}}})
	st = wantCode(t, "overloaded", err, codes.ResourceExhausted, "")
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, isRetry := d.(*errdetails.RetryInfo); isRetry {
			retry = r
		}
	}
	if retry == nil || retry.RetryDelay.AsDuration() != time.Second {
		t.Fatalf("retry info %v in %v", retry, st.Details())
	}
	if info := errorInfo(st); info == nil || info.Reason != "overloaded" {
		t.Fatalf("error info %v", info)
	}
}

// TestEnqueueRefusesUnsendableHeaders: a header HTTP cannot carry, or one
// the HTTP client sets itself, is refused at enqueue as over HTTP, naming
// it, and nothing is stored; a token sent without its scheme is told so.
func TestEnqueueRefusesUnsendableHeaders(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	c := pb.NewDelaywheelClient(serveGRPC(t, kn, nil, nil))
	ctx := authed(t.Context(), token)
	for _, tc := range []struct{ name, value, want string }{
		{"X A", "v", `messages[1].headers["X A"]: name is not an HTTP token`},
		{"X-A:", "v", `messages[1].headers["X-A:"]: name is not an HTTP token`},
		{"X-A", "a\r\nInjected: 1", `messages[1].headers["X-A"]: value holds a character HTTP does not allow`},
		{"X-A", "a\nb", `messages[1].headers["X-A"]: value holds`},
		{"X-A", "a\x00b", `messages[1].headers["X-A"]: value holds`},
		{"Host", "example.com", `messages[1].headers["Host"]: name is reserved`},
		{"content-length", "5", `messages[1].headers["content-length"]: name is reserved`},
		{"Transfer-Encoding", "chunked", `messages[1].headers["Transfer-Encoding"]: name is reserved`},
		{"CONNECTION", "close", `messages[1].headers["CONNECTION"]: name is reserved`},
		{"Trailer", "X", `messages[1].headers["Trailer"]: name is reserved`},
	} {
		_, err := c.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{
			{Topic: "t", Headers: map[string]string{"X-Ok": "v"}},
			{Topic: "t", Headers: map[string]string{"X-Ok": "v", tc.name: tc.value}},
		}})
		wantCode(t, fmt.Sprintf("header %q: %q", tc.name, tc.value), err, codes.InvalidArgument, tc.want)
	}
	if tp := get(c.Topics(ctx, &pb.TopicsRequest{}))(t, "topics"); len(tp.Topics) != 0 {
		t.Fatalf("refused enqueues stored %v", tp.Topics)
	}
	_, err := c.Topics(metadata.AppendToOutgoingContext(t.Context(), "authorization", token), &pb.TopicsRequest{})
	st := wantCode(t, "token without its scheme", err, codes.Unauthenticated, `authorization: expected "Bearer <token>"`)
	if strings.Contains(st.Message(), token) {
		t.Fatalf("the refusal echoes the token: %q", st.Message())
	}
}

// callsCounted is the count of calls of method answered with code.
func callsCounted(t *testing.T, reg *prometheus.Registry, method, code string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "delaywheel_grpc_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["method"] == method && labels["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// subscribeErr opens a Subscribe stream of topic and returns the error it
// ends with.
func subscribeErr(ctx context.Context, c pb.DelaywheelClient, topic string) error {
	st, err := c.Subscribe(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&pb.SubscribeRequest{Topic: topic}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	for {
		if _, err := st.Recv(); err != nil {
			return err
		}
	}
}

// overloaded refuses every enqueue as a node whose log is full does.
type overloaded struct{ transport.Backend }

func (overloaded) Enqueue(context.Context, []command.NewMessage) ([]wheel.Enqueued, error) {
	return nil, fmt.Errorf("%w: too many entries waiting to be applied", model.ErrOverloaded)
}

func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, isInfo := d.(*errdetails.ErrorInfo); isInfo {
			return info
		}
	}
	return nil
}

// calls calls every method of the service once, with an empty request.
func calls(c pb.DelaywheelClient) map[string]func(ctx context.Context) error {
	return map[string]func(ctx context.Context) error{
		"Enqueue":     func(ctx context.Context) error { _, err := c.Enqueue(ctx, &pb.EnqueueRequest{}); return err },
		"Get":         func(ctx context.Context) error { _, err := c.Get(ctx, &pb.GetRequest{}); return err },
		"Cancel":      func(ctx context.Context) error { _, err := c.Cancel(ctx, &pb.CancelRequest{}); return err },
		"Reschedule":  func(ctx context.Context) error { _, err := c.Reschedule(ctx, &pb.RescheduleRequest{}); return err },
		"Reserve":     func(ctx context.Context) error { _, err := c.Reserve(ctx, &pb.ReserveRequest{}); return err },
		"Ack":         func(ctx context.Context) error { _, err := c.Ack(ctx, &pb.ReceiptsRequest{}); return err },
		"Nack":        func(ctx context.Context) error { _, err := c.Nack(ctx, &pb.NackRequest{}); return err },
		"Touch":       func(ctx context.Context) error { _, err := c.Touch(ctx, &pb.ReceiptsRequest{}); return err },
		"Bury":        func(ctx context.Context) error { _, err := c.Bury(ctx, &pb.ReceiptsRequest{}); return err },
		"Topics":      func(ctx context.Context) error { _, err := c.Topics(ctx, &pb.TopicsRequest{}); return err },
		"DeadLetters": func(ctx context.Context) error { _, err := c.DeadLetters(ctx, &pb.DeadLettersRequest{}); return err },
		"Redrive":     func(ctx context.Context) error { _, err := c.Redrive(ctx, &pb.RedriveRequest{}); return err },
		"Wheel":       func(ctx context.Context) error { _, err := c.Wheel(ctx, &pb.WheelRequest{}); return err },
		"Slot":        func(ctx context.Context) error { _, err := c.Slot(ctx, &pb.SlotRequest{}); return err },
		"Cluster":     func(ctx context.Context) error { _, err := c.Cluster(ctx, &pb.ClusterRequest{}); return err },
	}
}

func TestAuthOnEveryCall(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	conn := serveGRPC(t, kn, nil, nil)
	all := calls(pb.NewDelaywheelClient(conn))
	if n := len(pb.Delaywheel_ServiceDesc.Methods); len(all) != n {
		t.Fatalf("the test calls %d methods, the service has %d", len(all), n)
	}
	for name, call := range all {
		wantCode(t, name+" without a token", call(t.Context()), codes.Unauthenticated, "missing bearer token")
		wantCode(t, name+" with a wrong token", call(authed(t.Context(), "wrong")), codes.Unauthenticated, "wrong bearer token")
		if err := call(authed(t.Context(), token)); status.Code(err) == codes.Unauthenticated {
			t.Fatalf("%s with the token: %v", name, err)
		}
	}
	// The Subscribe stream too.
	sc := pb.NewDelaywheelClient(conn)
	for _, tc := range []struct {
		ctx  context.Context
		want string
	}{{t.Context(), "missing bearer token"}, {authed(t.Context(), "wrong"), "wrong bearer token"}} {
		wantCode(t, "Subscribe: "+tc.want, subscribeErr(tc.ctx, sc, "t"), codes.Unauthenticated, tc.want)
	}
	// Health and reflection stay open.
	h := get(healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: grpcserver.ServiceName}))(t, "health")
	if h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v", h.Status)
	}
	rc := get(reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context()))(t, "reflection")
	get(0, rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}))(t, "list services")
	resp := get(rc.Recv())(t, "reflection answer")
	found := false
	for _, s := range resp.GetListServicesResponse().GetService() {
		found = found || s.Name == grpcserver.ServiceName
	}
	if !found {
		t.Fatalf("reflection lists %v", resp)
	}
}

func TestFollower(t *testing.T) {
	t.Parallel() // a cluster spends its start waiting for an election
	// Each node records the gRPC address it listens on.
	lns := map[string]net.Listener{}
	for i := range 3 {
		lns[fmt.Sprintf("n%d", i+1)] = transporttest.ListenGRPC(t)
	}
	cl := transporttest.StartCluster(t, 3, transporttest.Options{Replication: func(c *replication.Config) {
		c.GRPCAddr = lns[c.ID].Addr().String()
	}})
	leader, f := cl.Leader(), cl.Follower()
	laddr, _ := transporttest.ServeGRPCOn(t, lns[leader.ID], grpcserver.Config{
		HTTP: transport.Config{Clock: leader.Clock.Now, AuthToken: token}, ReadyInterval: 10 * time.Millisecond}, leader.Node)
	lc := pb.NewDelaywheelClient(dial(t, laddr))
	fc := pb.NewDelaywheelClient(serveGRPC(t, f, nil, nil))
	ctx := authed(t.Context(), token)
	res := get(lc.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "t", DelayMs: proto64(1000)}}}))(t, "enqueue at the leader")

	// A follower that does not forward answers the leader's calls
	// NOT_LEADER, naming the leader's HTTP address.
	_, err := fc.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "t"}}})
	st := wantCode(t, "enqueue at a follower", err, codes.Unavailable, "not the leader")
	info := errorInfo(st)
	if info == nil || info.Reason != grpcserver.ReasonNotLeader || info.Metadata[grpcserver.MetaLeaderHTTP] != leader.Addr {
		t.Fatalf("error info %v, want the leader at %s", info, leader.Addr)
	}
	for _, name := range []string{"Cancel", "Reschedule", "Reserve", "Ack", "Nack", "Touch", "Bury", "Redrive"} {
		wantCode(t, name+" at a follower", calls(fc)[name](ctx), codes.Unavailable, "not the leader")
	}
	// Reads are answered by the follower from its own state.
	f.Eventually(t, "the follower to hold the message", func() bool {
		_, err := fc.Get(ctx, &pb.GetRequest{Id: res.Results[0].Id})
		return err == nil
	})
	get(fc.Topics(ctx, &pb.TopicsRequest{}))(t, "topics at a follower")
	wantCode(t, "Subscribe at a follower", subscribeErr(ctx, fc, "t"), codes.Unavailable, "not the leader")
	if v := get(fc.Cluster(ctx, &pb.ClusterRequest{}))(t, "cluster at a follower"); v.Self != f.ID || len(v.Nodes) != 3 {
		t.Fatalf("cluster %v", v)
	}

	// A follower that forwards finds the leader's gRPC address in its
	// member record and forwards to it; the leader's refusals come back
	// as they are.
	if m, _, _ := f.Node.Leader(); m.GRPCAddr != laddr {
		t.Fatalf("the follower's record of the leader: %+v; want gRPC at %s", m, laddr)
	}
	fwd := pb.NewDelaywheelClient(serveGRPC(t, f, nil, func(c *grpcserver.Config) { c.Forward = true }))
	fres := get(fwd.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "t", Key: "k"}}}))(t, "enqueue forwarded")
	if len(fres.Results) != 1 || fres.Results[0].Duplicate {
		t.Fatalf("forwarded enqueue %v", fres)
	}
	get(lc.Get(ctx, &pb.GetRequest{Id: fres.Results[0].Id}))(t, "the forwarded message at the leader")
	// The follower answers a forwarded write once it holds it: the caller
	// reads its enqueue, then its lease, at the follower at once.
	due := get(fwd.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "own"}}}))(t, "enqueue due now, forwarded")
	get(fc.Get(ctx, &pb.GetRequest{Id: due.Results[0].Id}))(t, "the forwarded enqueue at the follower")
	rr := get(fwd.Reserve(ctx, &pb.ReserveRequest{Topic: "own", WaitMs: 5000}))(t, "reserve forwarded")
	if len(rr.GetMessages()) != 1 || rr.GetMessages()[0].GetId() != due.Results[0].Id {
		t.Fatalf("forwarded reserve %v", rr)
	}
	if v := get(fc.Get(ctx, &pb.GetRequest{Id: due.Results[0].Id}))(t, "the forwarded lease at the follower"); v.State != "reserved" || v.Attempts != 1 {
		t.Fatalf("at the follower after its forwarded reserve: %v; want reserved, attempt 1", v)
	}
	// A bury is forwarded too, and the follower then lists the message
	// among its dead letters at once.
	if s := get(fwd.Bury(ctx, &pb.ReceiptsRequest{Receipts: []string{rr.GetMessages()[0].GetReceipt()}}))(t, "bury forwarded"); s.Done != 1 {
		t.Fatalf("forwarded bury %v", s)
	}
	if dl := get(fc.DeadLetters(ctx, &pb.DeadLettersRequest{Topic: "own"}))(t, "dead letters at the follower"); len(dl.Messages) != 1 || dl.Messages[0].Id != due.Results[0].Id {
		t.Fatalf("dead letters at the follower after its forwarded bury: %v; want %s", dl.Messages, due.Results[0].Id)
	}
	_, err = fwd.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "bad topic"}}})
	wantCode(t, "bad topic forwarded", err, codes.InvalidArgument, "messages[0].topic")
	if c := get(fwd.Cancel(ctx, &pb.CancelRequest{Topic: "t", Key: "k"}))(t, "cancel forwarded"); c.Id != fres.Results[0].Id {
		t.Fatalf("cancelled %v", c)
	}
	_, err = fwd.Enqueue(authed(t.Context(), "wrong"), &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "t"}}})
	wantCode(t, "wrong token at the forwarding follower", err, codes.Unauthenticated, "wrong bearer token")
	// A Subscribe is passed on to the leader: deliveries down, acks up, and
	// a half-close ends it once the ack is settled.
	sub := get(fwd.Subscribe(ctx))(t, "subscribe at the forwarding follower")
	get(0, sub.Send(&pb.SubscribeRequest{Topic: "fs"}))(t, "open the stream")
	sres := get(lc.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "fs"}}}))(t, "enqueue for the stream")
	d := get(sub.Recv())(t, "a delivery through the follower")
	if len(d.Messages) != 1 || d.Messages[0].Id != sres.Results[0].Id {
		t.Fatalf("delivered %v, want %s", d.Messages, sres.Results[0].Id)
	}
	get(0, sub.Send(&pb.SubscribeRequest{Ack: []string{d.Messages[0].Receipt}}))(t, "ack up the passed-on stream")
	get(0, sub.CloseSend())(t, "half-close")
	if _, err := sub.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("the passed-on stream after its half-close: %v; want it ended OK", err)
	}
	_, err = lc.Get(ctx, &pb.GetRequest{Id: sres.Results[0].Id})
	wantCode(t, "the message acked through the follower", err, codes.NotFound, "")
	// A call another node forwarded is not forwarded again.
	loop := metadata.AppendToOutgoingContext(ctx, grpcserver.ForwardedKey, "1")
	_, err = fwd.Enqueue(loop, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "t"}}})
	wantCode(t, "a forwarded call at a follower", err, codes.Unavailable, "not the leader")
}

// TestShutdownEndsLongPolls checks that Serve ends a waiting reserve with
// UNAVAILABLE and returns.
func TestShutdownEndsLongPolls(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	b := waiting{Backend: kn.Node, started: make(chan struct{}, 1)}
	c, stop := serveStoppable(t, kn, b)
	polled := make(chan error, 1)
	go func() {
		_, err := c.Reserve(t.Context(), &pb.ReserveRequest{Topic: "t", WaitMs: 60000})
		polled <- err
	}()
	<-b.started
	errc := make(chan error, 1)
	go func() { errc <- stop() }()
	wantCode(t, "long-poll at shutdown", <-polled, codes.Unavailable, "shutting down")
	if err := <-errc; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// serveStoppable serves b without a token until stop, which returns what
// Serve returned.
func serveStoppable(t *testing.T, kn *transporttest.Node, b transport.Backend) (c pb.DelaywheelClient, stop func() error) {
	t.Helper()
	addr, stop := transporttest.ServeGRPC(t, grpcserver.Config{HTTP: transport.Config{Clock: kn.Clock.Now}}, b)
	return pb.NewDelaywheelClient(dial(t, addr)), stop
}

// waiting tells when a reserve reached the backend.
type waiting struct {
	transport.Backend
	started chan struct{}
}

func (w waiting) Reserve(ctx context.Context, topic string, n int, wait, ttr time.Duration) ([]model.Delivery, error) {
	w.started <- struct{}{}
	return w.Backend.Reserve(ctx, topic, n, wait, ttr)
}

func proto64(v int64) *int64 { return &v }
func proto32(v int32) *int32 { return &v }

// TestShutdownEndsStreams checks that Serve ends an open Subscribe with
// UNAVAILABLE and returns.
func TestShutdownEndsStreams(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	c, stop := serveStoppable(t, kn, kn.Node)
	st, err := c.Subscribe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.SubscribeRequest{Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	get(c.Enqueue(t.Context(), &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "t"}}}))(t, "enqueue")
	if r := get(st.Recv())(t, "the first delivery"); len(r.Messages) != 1 {
		t.Fatalf("deliveries %v", r.Messages)
	}
	errc := make(chan error, 1)
	go func() { errc <- stop() }()
	for {
		if _, err := st.Recv(); err != nil {
			wantCode(t, "stream at shutdown", err, codes.Unavailable, "shutting down")
			break
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

// heldAcks is a backend whose acks wait until release is closed.
type heldAcks struct {
	transport.Backend
	release chan struct{}
	calls   chan struct{}
}

func (h heldAcks) Ack(ctx context.Context, rs []model.Receipt) (command.Counted, error) {
	h.calls <- struct{}{}
	<-h.release
	return h.Backend.Ack(ctx, rs)
}

// subscribeTo opens a Subscribe stream of topic with a window of window.
func subscribeTo(t *testing.T, ctx context.Context, c pb.DelaywheelClient, topic string, window int32) pb.Delaywheel_SubscribeClient {
	t.Helper()
	st := get(c.Subscribe(ctx))(t, "subscribe to "+topic)
	get(0, st.Send(&pb.SubscribeRequest{Topic: topic, MaxInflight: proto32(window)}))(t, "open the stream of "+topic)
	return st
}

// TestSubscribeAckFreesTheWindowAsRead: an ack sent up a Subscribe stream
// frees the stream's window as soon as the server reads it, so the next
// delivery comes while the ack itself still waits to be proposed.
func TestSubscribeAckFreesTheWindowAsRead(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	b := heldAcks{Backend: kn.Node, release: make(chan struct{}), calls: make(chan struct{}, 4)}
	release := sync.OnceFunc(func() { close(b.release) })
	t.Cleanup(release)
	c := pb.NewDelaywheelClient(serveGRPC(t, kn, []transport.Backend{b}, nil))
	ctx, cancel := context.WithTimeout(authed(t.Context(), token), 10*time.Second)
	defer cancel()
	get(c.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "w", Body: []byte("1")}, {Topic: "w", Body: []byte("2")}}}))(t, "enqueue")
	st := subscribeTo(t, ctx, c, "w", 1)
	first := get(st.Recv())(t, "the first delivery")
	if len(first.Messages) != 1 {
		t.Fatalf("first answer %v; want one delivery (window 1)", first.Messages)
	}
	if err := st.Send(&pb.SubscribeRequest{Ack: []string{first.Messages[0].Receipt}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.calls: // the ack reached the backend, which holds it
	case <-ctx.Done():
		t.Fatal("the ack never reached the backend")
	}
	second := get(st.Recv())(t, "the second delivery")
	if len(second.Messages) != 1 || second.Messages[0].Id == first.Messages[0].Id {
		t.Fatalf("second answer %v; want the other message while the ack is held", second.Messages)
	}
	release()
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
}

// TestSubscribeHalfCloseEnds: closing the send side is a Subscribe's
// graceful end. The acks sent before it are settled, the deliveries not
// acked go back to ready, and the stream ends OK.
func TestSubscribeHalfCloseEnds(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	c := pb.NewDelaywheelClient(serveGRPC(t, kn, nil, nil))
	ctx, cancel := context.WithTimeout(authed(t.Context(), token), 10*time.Second)
	defer cancel()
	get(c.Enqueue(ctx, &pb.EnqueueRequest{Messages: []*pb.Message{{Topic: "h", Body: []byte("1")}, {Topic: "h", Body: []byte("2")}}}))(t, "enqueue")
	st := subscribeTo(t, ctx, c, "h", 2)
	var ds []*pb.Delivery
	for len(ds) < 2 {
		ds = append(ds, get(st.Recv())(t, "deliveries").Messages...)
	}
	if err := st.Send(&pb.SubscribeRequest{Ack: []string{ds[0].Receipt}}); err != nil {
		t.Fatal(err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the half-close: %v; want the stream ended OK", err)
	}
	_, err := c.Get(ctx, &pb.GetRequest{Id: ds[0].Id})
	wantCode(t, "the acked message", err, codes.NotFound, "")
	var again *pb.ReserveResponse
	kn.Eventually(t, "the unacked delivery ready again", func() bool {
		again = get(c.Reserve(ctx, &pb.ReserveRequest{Topic: "h"}))(t, "reserve")
		return len(again.Messages) == 1
	})
	if again.Messages[0].Id != ds[1].Id {
		t.Fatalf("ready again: %v; want %s", again.Messages[0].Id, ds[1].Id)
	}
}

// TestNackNamesTheReceiptsFirst: a Nack whose receipts and delay are both
// bad is refused naming the receipts, as POST /v1/nack names them.
func TestNackNamesTheReceiptsFirst(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	c := pb.NewDelaywheelClient(serveGRPC(t, kn, nil, nil))
	ctx := authed(t.Context(), token)

	_, err := c.Nack(ctx, &pb.NackRequest{Receipts: []string{"x"}, DelayMs: -1})
	wantCode(t, "malformed receipt, negative delay", err, codes.InvalidArgument, `receipts[0]: "x" is not a receipt`)
	_, err = c.Nack(ctx, &pb.NackRequest{DelayMs: -1})
	wantCode(t, "no receipts, negative delay", err, codes.InvalidArgument, "receipts: must hold 1 to 10000 entries")
	_, err = c.Nack(ctx, &pb.NackRequest{Receipts: []string{"000000000000000a05000000.00000000000000ab"}, DelayMs: -1})
	wantCode(t, "receipt of a group the cluster lacks, negative delay", err, codes.InvalidArgument, "receipts[0]: receipt names group 5")
	_, err = c.Nack(ctx, &pb.NackRequest{Receipts: []string{"000000000000000100000000.00000000000000ab"}, DelayMs: -1})
	wantCode(t, "negative delay", err, codes.InvalidArgument, "delay_ms: must be between 0 and 315360000000 (10 years), got -1")
}

// TestSubscribeNamesItsReceiptFields: a malformed receipt or nack delay sent up a
// Subscribe stream is refused naming the field it came in, ack or nack,
// not "receipts", which SubscribeRequest does not have.
func TestSubscribeNamesItsReceiptFields(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	c := pb.NewDelaywheelClient(serveGRPC(t, kn, nil, nil))
	ctx := authed(t.Context(), token)
	for _, tc := range []struct {
		req  *pb.SubscribeRequest
		want string
	}{
		{&pb.SubscribeRequest{Topic: "t", Ack: []string{"x"}}, `ack[0]: "x" is not a receipt`},
		{&pb.SubscribeRequest{Topic: "t", Nack: []string{"000000000000000100000000.00000000000000ab", "y"}}, `nack[1]: "y" is not a receipt`},
		// A bad receipt is named before a bad delay, and the delay by
		// the name the request gives it.
		{&pb.SubscribeRequest{Topic: "t", Nack: []string{"y"}, NackDelayMs: -1}, `nack[0]: "y" is not a receipt`},
		{&pb.SubscribeRequest{Topic: "t", Nack: []string{"000000000000000100000000.00000000000000ab"}, NackDelayMs: -1}, `nack_delay_ms`},
	} {
		st, err := c.Subscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(tc.req); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		for err == nil {
			_, err = st.Recv()
		}
		wantCode(t, tc.want, err, codes.InvalidArgument, tc.want)
	}
}

package grpcserver_test

import (
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/transport/grpcserver"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

// rawCodec sends a call's request as the bytes it is given, so that a test
// can send what the generated encoder never writes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// field appends field num with the length-delimited value v to b.
func field(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// header is one entry of Message.headers.
func header(k, v string) []byte { return field(field(nil, 1, []byte(k)), 2, []byte(v)) }

// TestStrictRequests: over gRPC, as over HTTP, a field given twice, a
// header given twice, a string that is not UTF-8 and an unknown field are
// INVALID_ARGUMENT naming the field, and nothing is stored; the same
// request written once is accepted. A Subscribe whose request repeats a
// field ends with INVALID_ARGUMENT too.
func TestStrictRequests(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	conn := serveGRPC(t, kn, nil, nil)
	c := pb.NewDelaywheelClient(conn)
	ctx := authed(t.Context(), token)
	topic := func(s string) []byte { return field(nil, 1, []byte(s)) }
	enqueue := func(msgs ...[]byte) []byte {
		var req []byte
		for _, m := range msgs {
			req = field(req, 1, m)
		}
		return req
	}
	for _, tc := range []struct {
		what string
		req  []byte
		want string
	}{
		{"topic twice", enqueue(topic("t"), append(topic("t"), topic("u")...)), "messages[1].topic: given more than once"},
		{"header twice", enqueue(field(field(topic("t"), 9, header("X-A", "1")), 9, header("X-A", "2"))), `messages[0].headers["X-A"]: given more than once`},
		{"topic not UTF-8", enqueue(topic("t\xff")), "messages[0].topic: must be valid UTF-8"},
		{"unknown field", enqueue(field(topic("t"), 15, []byte("x"))), "unknown field number 15"},
	} {
		var out []byte
		err := conn.Invoke(ctx, "/delaywheel.v1.Delaywheel/Enqueue", &tc.req, &out, grpc.ForceCodec(rawCodec{}))
		wantCode(t, tc.what, err, codes.InvalidArgument, tc.want)
	}
	if tp := get(c.Topics(ctx, &pb.TopicsRequest{}))(t, "topics"); len(tp.Topics) != 0 {
		t.Fatalf("refused enqueues stored %v", tp.Topics)
	}
	good := enqueue(field(topic("t"), 9, header("X-A", "1")))
	var out []byte
	if err := conn.Invoke(ctx, "/delaywheel.v1.Delaywheel/Enqueue", &good, &out, grpc.ForceCodec(rawCodec{})); err != nil {
		t.Fatalf("the same request written once: %v", err)
	}
	if tp := get(c.Topics(ctx, &pb.TopicsRequest{}))(t, "topics"); len(tp.Topics) != 1 {
		t.Fatalf("after one good enqueue, topics %v", tp.Topics)
	}

	desc := &grpc.StreamDesc{StreamName: "Subscribe", ServerStreams: true, ClientStreams: true}
	st, err := conn.NewStream(ctx, desc, "/delaywheel.v1.Delaywheel/Subscribe", grpc.ForceCodec(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	first := append(topic("t"), topic("t")...)
	if err := st.SendMsg(&first); err != nil {
		t.Fatal(err)
	}
	var resp []byte
	err = st.RecvMsg(&resp)
	wantCode(t, fmt.Sprintf("subscribe %x", first), err, codes.InvalidArgument, "topic: given more than once")
}

// TestEnqueueOverTheBatchLimitIsTooLarge: a batch over --max-batch is
// RESOURCE_EXHAUSTED whatever its messages past the limit hold, as HTTP
// answers it 413: the messages past the limit are counted, not read.
func TestEnqueueOverTheBatchLimitIsTooLarge(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	conn := serveGRPC(t, kn, nil, func(cfg *grpcserver.Config) { cfg.HTTP.Limits.MaxBatch = 2 })
	ctx := authed(t.Context(), token)
	topic := field(nil, 1, []byte("t"))
	req := field(field(field(nil, 1, topic), 1, topic), 1, field(topic, 15, []byte("x")))
	var out []byte
	err := conn.Invoke(ctx, "/delaywheel.v1.Delaywheel/Enqueue", &req, &out, grpc.ForceCodec(rawCodec{}))
	wantCode(t, "a batch of 3 over a limit of 2, the third with an unknown field", err, codes.ResourceExhausted, "messages: 3 entries are over the limit of 2")
}

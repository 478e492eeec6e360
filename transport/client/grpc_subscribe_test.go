package client_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

func messages(n int, topic string) []api.Message {
	out := make([]api.Message, n)
	for i := range out {
		out[i] = api.Message{Topic: topic, Payload: api.TextBody("m" + strconv.Itoa(i))}
	}
	return out
}

// TestGRPCSubscribeAcksUpTheStream: with a window of 2, 20 deliveries
// arrive only because the acks sent up the stream settle them; after Close
// nothing is left.
func TestGRPCSubscribeAcksUpTheStream(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	g, err := client.NewGRPC("grpc://"+serveGRPC(t, kn, "tok"), client.WithGRPCToken("tok"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	sub := g.Subscribe(ctx, "sub", client.SubscribeOptions{MaxInflight: 2})
	if _, err := g.Enqueue(ctx, messages(20, "sub")); err != nil {
		t.Fatal(err)
	}
	transporttest.Receive(t, sub, 20)
	if err := sub.Close(ctx); err != nil || sub.Err() != nil {
		t.Fatalf("close: %v, %v", err, sub.Err())
	}
	kn.Eventually(t, "every delivery acked", func() bool {
		ts, err := g.Topics(ctx)
		return err == nil && len(ts) == 1 && ts[0] == api.TopicCounts{Topic: "sub"}
	})
}

// TestSubscribeCloseSettlesAcks: acks given right before Close are
// settled, not lost to the stream's end (which would release their
// deliveries back to ready), over gRPC (Close half-closes the stream and
// waits for the server to end it) and over HTTP (Close waits for the ack
// calls, answered once applied).
func TestSubscribeCloseSettlesAcks(t *testing.T) {
	type subscription interface {
		transporttest.Subscriber
		Close(ctx context.Context) error
	}
	for _, proto := range []string{"grpc", "http"} {
		t.Run(proto, func(t *testing.T) {
			kn, g := startGRPC(t)
			ctx := t.Context()
			subscribe := func() subscription {
				opt := client.SubscribeOptions{MaxInflight: 2000}
				if proto == "grpc" {
					return g.Subscribe(ctx, "close", opt)
				}
				return kn.Client.Subscribe(ctx, "close", opt)
			}
			const n = 2000
			for i := 0; i < n; i += 500 {
				if _, err := g.Enqueue(ctx, messages(500, "close")); err != nil {
					t.Fatal(err)
				}
			}
			for round := range 3 {
				sub := subscribe()
				transporttest.Receive(t, sub, n/4)
				if err := sub.Close(ctx); err != nil || sub.Err() != nil {
					t.Fatalf("round %d: close: %v, %v", round, err, sub.Err())
				}
				want := api.TopicCounts{Topic: "close", Ready: int64(n - (round+1)*n/4)}
				kn.Eventually(t, "every delivery handed out acked, the rest ready", func() bool {
					ts, err := g.Topics(ctx)
					return err == nil && len(ts) == 1 && ts[0] == want
				})
			}
		})
	}
}

func TestGRPCSubscribeRefusedForGood(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	addr := serveGRPC(t, kn, "tok")
	for _, tc := range []struct {
		name, token, topic string
		opt                client.SubscribeOptions
		code, want         string
	}{
		{"window over the limit", "tok", "sub", client.SubscribeOptions{MaxInflight: 200000}, api.CodeInvalidArgument, "max_inflight: must be between 1 and 100000"},
		{"bad topic", "tok", "a b", client.SubscribeOptions{}, api.CodeInvalidArgument, "topic: must be 1 to 200 characters"},
		{"wrong token", "nope", "sub", client.SubscribeOptions{}, api.CodeUnauthenticated, "wrong bearer token"},
	} {
		g, err := client.NewGRPC("grpc://"+addr, client.WithGRPCToken(tc.token))
		if err != nil {
			t.Fatal(err)
		}
		sub := g.Subscribe(t.Context(), tc.topic, tc.opt)
		for range sub.Deliveries() {
			t.Fatalf("%s: a delivery on a refused stream", tc.name)
		}
		var e *client.Error
		if !client.HasCode(sub.Err(), tc.code) || !errors.As(sub.Err(), &e) || !strings.Contains(e.Message, tc.want) {
			t.Fatalf("%s: err = %v, want %s: %s", tc.name, sub.Err(), tc.code, tc.want)
		}
		g.Close()
	}
}

// TestGRPCSubscribeReconnectsAfterLeaderChange: the stream ends when its
// node stops leading, and the subscription goes on at the new leader.
func TestGRPCSubscribeReconnectsAfterLeaderChange(t *testing.T) {
	t.Parallel() // a cluster spends its start waiting for an election
	c := transporttest.StartCluster(t, 3, transporttest.Options{})
	var addrs []string
	for _, kn := range c.Nodes {
		addrs = append(addrs, serveGRPC(t, kn, ""))
	}
	var errs []string
	g, err := client.NewGRPC("grpc://" + strings.Join(addrs, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ended := make(chan string, 100)
	sub := g.Subscribe(ctx, "lc", client.SubscribeOptions{OnError: func(err error) { ended <- err.Error() }})
	defer sub.Close(context.Background())
	if _, err := g.Enqueue(ctx, messages(1, "lc")); err != nil {
		t.Fatal(err)
	}
	transporttest.Receive(t, sub, 1)

	old := c.Leader()
	old.Node.StepDown()
	old.Eventually(t, "another leader", func() bool { return c.Leader() != old })
	old.Eventually(t, "the stream at the old leader to end", func() bool {
		for {
			select {
			case e := <-ended:
				errs = append(errs, e)
				if strings.Contains(e, "not the leader") || strings.Contains(e, "no leader") {
					return true
				}
			default:
				return false
			}
		}
	})
	if _, err := g.Enqueue(ctx, messages(1, "lc")); err != nil {
		t.Fatalf("enqueue after the leader change: %v", err)
	}
	transporttest.Receive(t, sub, 1)
	t.Logf("the subscription heard: %q", errs)
}

// hangingAcks is a gRPC server that serves no Subscribe and never answers
// an Ack: it says on entered that one is in flight.
type hangingAcks struct {
	pb.UnimplementedDelaywheelServer
	entered chan struct{}
}

func (h *hangingAcks) Ack(ctx context.Context, _ *pb.ReceiptsRequest) (*pb.SettleResponse, error) {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestGRPCSubscriptionCloseHonoursContext: Close returns at the end of its
// context even while an ack call hangs, saying the acks were not sent.
func TestGRPCSubscriptionCloseHonoursContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	h := &hangingAcks{entered: make(chan struct{}, 1)}
	pb.RegisterDelaywheelServer(srv, h)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	g, err := client.NewGRPC("grpc://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	sub := g.Subscribe(t.Context(), "t", client.SubscribeOptions{})
	for range sub.Deliveries() { // refused for good: no stream to ack up
	}
	if !client.HasCode(sub.Err(), "unimplemented") {
		t.Fatalf("err = %v, want unimplemented", sub.Err())
	}
	sub.Ack(api.Delivery{Receipt: "r"})
	<-h.entered
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- sub.Close(ctx) }()
	select {
	case err := <-closed:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("close: %v, want the acks not sent for the context's end", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close still waits for a hanging ack call after its context ended")
	}
}

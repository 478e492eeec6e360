package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/transport/grpcserver"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

// serveGRPC serves the gRPC API of kn's node and returns its address.
func serveGRPC(t *testing.T, kn *transporttest.Node, token string) string {
	t.Helper()
	addr, _ := transporttest.ServeGRPC(t, grpcserver.Config{HTTP: transport.Config{Clock: kn.Clock.Now, AuthToken: token}}, kn.Node)
	return addr
}

// startGRPC starts a node and a gRPC client of it, without a token, that
// closes at the end of the test.
func startGRPC(t *testing.T) (*transporttest.Node, *client.GRPC) {
	t.Helper()
	kn := transporttest.Start(t, transporttest.Options{})
	g, err := client.NewGRPC("grpc://" + serveGRPC(t, kn, ""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return kn, g
}

// TestGRPCClient calls a three-node cluster through a follower first: the
// client moves on to the leader for the leader's calls, reads anywhere, and
// gives errors as *Error with the API's codes.
func TestGRPCClient(t *testing.T) {
	t.Parallel() // a cluster spends its start waiting for an election
	cl := transporttest.StartCluster(t, 3, transporttest.Options{})
	leader, f := cl.Leader(), cl.Follower()
	addrs := "grpc://" + serveGRPC(t, f, "tok") + "," + serveGRPC(t, leader, "tok")
	var raw []byte
	g, err := client.NewGRPC(addrs, client.WithGRPCToken("tok"), client.WithGRPCRawResponse(func(b []byte) { raw = b }))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()

	res, err := g.Enqueue(ctx, []api.Message{{Topic: "t", Payload: api.TextBody("hi"), Key: "k"}, {Topic: "t", Payload: api.BinaryBody([]byte{0xff})}})
	if err != nil || len(res) != 2 {
		t.Fatalf("enqueue through a follower first: %v %v", res, err)
	}
	if !strings.Contains(string(raw), res[0].ID) {
		t.Fatalf("raw answer %s", raw)
	}
	v, err := g.Get(ctx, res[1].ID)
	if err != nil || v.BodyBase64 == nil || *v.BodyBase64 != "/w==" || v.Headers == nil {
		t.Fatalf("get: %+v %v", v, err)
	}
	ds, err := g.Reserve(ctx, "t", api.ReserveRequest{Max: api.Ptr(2)})
	if err != nil || len(ds) != 2 {
		t.Fatalf("reserve: %+v %v", ds, err)
	}
	ack, err := g.Ack(ctx, []string{ds[0].Receipt, ds[1].Receipt})
	if err != nil || ack.Acked != 2 {
		t.Fatalf("ack: %+v %v", ack, err)
	}
	ts, err := g.Topics(ctx)
	if err != nil || len(ts) != 1 || ts[0].Topic != "t" {
		t.Fatalf("topics: %+v %v", ts, err)
	}
	c, err := g.Cluster(ctx)
	if err != nil || len(c.Nodes) != 3 {
		t.Fatalf("cluster: %+v %v", c, err)
	}

	_, err = g.Get(ctx, "000000000000000100000000")
	if !client.HasCode(err, api.CodeNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	var e *client.Error
	_, err = g.Enqueue(ctx, []api.Message{{Topic: ""}})
	if !client.HasCode(err, api.CodeInvalidArgument) || !errors.As(err, &e) || e.Status != http.StatusBadRequest || !strings.Contains(e.Message, "messages[0].topic") {
		t.Fatalf("bad topic: %v", err)
	}
	bad, err := client.NewGRPC(addrs, client.WithGRPCToken("wrong"))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.Topics(ctx); !client.HasCode(err, api.CodeUnauthenticated) {
		t.Fatalf("wrong token: %v", err)
	}
}

// redriver is what TestRedrive calls, on either client.
type redriver interface {
	Enqueue(ctx context.Context, msgs []api.Message) ([]api.Result, error)
	Reserve(ctx context.Context, topic string, req api.ReserveRequest) ([]api.Delivery, error)
	Nack(ctx context.Context, receipts []string, delayMs int64) (api.NackResponse, error)
	Dead(ctx context.Context, topic string, limit int) ([]api.MessageView, error)
	Redrive(ctx context.Context, topic string, ids []string) (int, error)
}

// TestRedrive: over either protocol, Redrive with an empty list of ids
// redrives none, with ids those alone, and with nil every dead message of
// the topic.
func TestRedrive(t *testing.T) {
	kn, g := startGRPC(t)
	for proto, c := range map[string]redriver{"http": client.New(kn.URL), "grpc": g} {
		t.Run(proto, func(t *testing.T) {
			ctx := t.Context()
			topic := "d-" + proto
			msgs := messages(3, topic)
			for i := range msgs {
				msgs[i].MaxAttempts = api.Ptr(int32(1))
			}
			if _, err := c.Enqueue(ctx, msgs); err != nil {
				t.Fatal(err)
			}
			ds, err := c.Reserve(ctx, topic, api.ReserveRequest{Max: api.Ptr(3)})
			if err != nil || len(ds) != 3 {
				t.Fatalf("reserve: %v %v", ds, err)
			}
			var receipts []string
			for _, d := range ds {
				receipts = append(receipts, d.Receipt)
			}
			if _, err := c.Nack(ctx, receipts, 0); err != nil {
				t.Fatal(err)
			}
			kn.AdvanceUntil(t, 100*time.Millisecond, "three dead letters", func() bool {
				dead, err := c.Dead(ctx, topic, 10)
				return err == nil && len(dead) == 3
			})
			if dead, err := c.Dead(ctx, topic, -1); err != nil || len(dead) != 3 {
				t.Fatalf("dead letters with a limit of -1, the server's default: %d %v", len(dead), err)
			}
			if n, err := c.Redrive(ctx, topic, []string{}); err != nil || n != 0 {
				t.Fatalf("redrive of an empty list: %d %v; want none", n, err)
			}
			if n, err := c.Redrive(ctx, topic, []string{ds[0].ID}); err != nil || n != 1 {
				t.Fatalf("redrive of one id: %d %v", n, err)
			}
			if n, err := c.Redrive(ctx, topic, nil); err != nil || n != 2 {
				t.Fatalf("redrive without ids: %d %v; want the other 2", n, err)
			}
		})
	}
}

// deadAddr returns a loopback address that refuses connections.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestGRPCMovesOnFromUnreachableNode: a call to a node that cannot be
// reached fails (it is not sent again: it might have been done), and the
// next call goes to the next address; a subscription subscribes at the
// next address.
func TestGRPCMovesOnFromUnreachableNode(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	live := serveGRPC(t, kn, "")
	t.Run("calls", func(t *testing.T) {
		g, err := client.NewGRPC("grpc://" + deadAddr(t) + "," + live)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		if _, err := g.Topics(t.Context()); !client.HasCode(err, api.CodeUnavailable) {
			t.Fatalf("call to a node that refuses connections: %v, want unavailable", err)
		}
		if _, err := g.Topics(t.Context()); err != nil {
			t.Fatalf("the call after: %v, want it answered at the next address", err)
		}
	})
	t.Run("subscribe", func(t *testing.T) {
		g, err := client.NewGRPC("grpc://" + deadAddr(t) + "," + live)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		sub := g.Subscribe(t.Context(), "far", client.SubscribeOptions{})
		defer sub.Close(t.Context())
		if _, err := kn.Client.Enqueue(t.Context(), messages(1, "far")); err != nil {
			t.Fatal(err)
		}
		select {
		case _, ok := <-sub.Deliveries():
			if !ok {
				t.Fatalf("subscription ended: %v", sub.Err())
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no delivery: the subscription stays at the node that refuses connections")
		}
	})
}

// TestContextErrorsOverBothProtocols: a call cut by its context's end
// fails with an error that errors.Is finds the context's error in, over
// gRPC as over HTTP.
func TestContextErrorsOverBothProtocols(t *testing.T) {
	kn, g := startGRPC(t)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Unix(0, 0))
	defer cancel2()
	for proto, c := range map[string]interface {
		Topics(ctx context.Context) ([]api.TopicCounts, error)
	}{"http": kn.Client, "grpc": g} {
		if _, err := c.Topics(cancelled); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: call with a cancelled context: %v, want context.Canceled", proto, err)
		}
		if _, err := c.Topics(expired); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: call past its deadline: %v, want context.DeadlineExceeded", proto, err)
		}
	}
}

// TestGRPCTooLargeIs413: a batch over the limit is a 413 too_large over
// gRPC as over HTTP, not a 429 that a caller would retry; so is a request
// over the size gRPC itself takes.
func TestGRPCTooLargeIs413(t *testing.T) {
	kn := transporttest.Start(t, transporttest.Options{})
	limits := transport.Limits{MaxBatch: 2, MaxRequestBytes: 4096}
	addr, _ := transporttest.ServeGRPC(t, grpcserver.Config{HTTP: transport.Config{Clock: kn.Clock.Now, Limits: limits}}, kn.Node)
	g, err := client.NewGRPC("grpc://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	_, err = g.Enqueue(t.Context(), messages(3, "big"))
	var e *client.Error
	if !errors.As(err, &e) || e.Code != api.CodeTooLarge || e.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("enqueue over the batch limit: %#v, want 413 too_large", err)
	}
	_, err = g.Enqueue(t.Context(), []api.Message{{Topic: "big", Payload: api.TextBody(strings.Repeat("x", 8192))}})
	if !errors.As(err, &e) || e.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("enqueue over the request size: %#v, want 413", err)
	}
}

package client

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/api/pb"
)

// heldAcks is a gRPC server that serves no Subscribe and records the
// receipts acked; an ack of "hold" waits for release.
type heldAcks struct {
	pb.UnimplementedDelaywheelServer
	entered, release chan struct{}
	mu               sync.Mutex
	acked            map[string]bool
}

func (h *heldAcks) Ack(_ context.Context, req *pb.ReceiptsRequest) (*pb.SettleResponse, error) {
	for _, r := range req.GetReceipts() {
		if r == "hold" {
			h.entered <- struct{}{}
			<-h.release
		}
		h.mu.Lock()
		h.acked[r] = true
		h.mu.Unlock()
	}
	return &pb.SettleResponse{}, nil
}

// The end of a gRPC subscription's context stops its acks once the
// receipts queued so far are sent, as over HTTP: none is dropped. Each
// round queues a receipt behind an ack call in flight, then ends the
// context.
func TestGRPCSubscriptionEndedByContextSendsQueuedAcks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	h := &heldAcks{entered: make(chan struct{}), release: make(chan struct{}), acked: map[string]bool{}}
	pb.RegisterDelaywheelServer(srv, h)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	g, err := NewGRPC("grpc://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for round := range 30 {
		ctx, cancel := context.WithCancel(t.Context())
		sub := g.Subscribe(ctx, "t", SubscribeOptions{})
		for range sub.Deliveries() { // refused for good: the acks go by the Ack call
		}
		sub.Ack(api.Delivery{Receipt: "hold"})
		<-h.entered
		r := "r" + strconv.Itoa(round)
		sub.Ack(api.Delivery{Receipt: r}) // queued: the sender is busy
		cancel()
		h.release <- struct{}{}
		sub.sender.Wait()
		h.mu.Lock()
		sent := h.acked[r]
		h.mu.Unlock()
		if !sent {
			t.Fatalf("round %d: the receipt queued when the context ended was never acked", round)
		}
		if err := sub.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

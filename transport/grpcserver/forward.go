package grpcserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// ForwardedKey is the metadata a follower adds to a call it forwards to
// the leader. A node that is not the leader answers such a call
// UNAVAILABLE instead of forwarding it again, so forwarding never loops.
const ForwardedKey = "x-delaywheel-forwarded"

// forwarder passes a Subscribe stream on from a follower to the gRPC
// address the leader's member record holds: a stream stays open both
// ways, which the leader's gRPC API alone carries. A follower's other
// calls reach the leader through the service's Forwarder, the HTTP API's
// (transport.NewForwarder). Its connections to leaders are kept, one per
// address, until close.
type forwarder struct {
	creds credentials.TransportCredentials

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newForwarder(clientTLS *tls.Config) *forwarder {
	f := &forwarder{creds: insecure.NewCredentials(), conns: map[string]*grpc.ClientConn{}}
	if clientTLS != nil {
		f.creds = credentials.NewTLS(clientTLS)
	}
	return f
}

// appliedIndexKey is the header metadata of the leader's answer to a call
// another node forwarded over gRPC: the index that node's reads then wait
// for.
var appliedIndexKey = strings.ToLower(transport.AppliedIndexHeader)

// client returns the client of the leader at to and the outgoing context
// of a call forwarded there, marked, with the caller's authorization; it
// returns service.ErrNoForward when the call cannot be forwarded.
func (f *forwarder) client(ctx context.Context, to model.Member) (pb.DelaywheelClient, context.Context, error) {
	if forwarded(ctx) || to.GRPCAddr == "" {
		return nil, nil, service.ErrNoForward
	}
	conn, err := f.conn(to.GRPCAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", service.ErrNoForward, err)
	}
	out := metadata.Pairs(ForwardedKey, "1")
	if auth := authorization(ctx); auth != "" {
		out.Set("authorization", auth)
	}
	return pb.NewDelaywheelClient(conn), metadata.NewOutgoingContext(ctx, out), nil
}

// subscribe passes a Subscribe stream, whose first request (read) is
// first, on to the leader at to with the caller's authorization: the
// requests up, the deliveries down, until either side ends or drain does.
// The leader's status ends the stream as it is (NOT_LEADER once
// leadership moves on: the client subscribes again); a half-close is
// passed on, so the leader settles what was sent and ends OK. It returns
// service.ErrNoForward, having sent nothing, when the stream cannot be
// forwarded.
func (f *forwarder) subscribe(drain context.Context, ss pb.Delaywheel_SubscribeServer, first *pb.SubscribeRequest, to model.Member) error {
	if f == nil {
		return service.ErrNoForward
	}
	c, ctx, err := f.client(ss.Context(), to)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(drain, cancel)()
	up, err := c.Subscribe(ctx)
	if err == nil {
		err = up.Send(first)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", service.ErrNoForward, err)
	}
	go func() {
		for {
			req, err := ss.Recv()
			if errors.Is(err, io.EOF) {
				up.CloseSend()
				return
			}
			if err != nil {
				cancel() // the client went away
				return
			}
			if up.Send(req) != nil {
				return // the leader's stream ended; Recv below says why
			}
		}
	}()
	for {
		resp, err := up.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ss.Send(resp); err != nil {
			return err
		}
	}
}

// conn returns the connection to the gRPC API at addr, a leader's.
func (f *forwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(f.creds))
	if err != nil {
		return nil, fmt.Errorf("the leader's gRPC address %q: %w", addr, err)
	}
	f.conns[addr] = c
	return c, nil
}

// close closes the connections to leaders.
func (f *forwarder) close() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for addr, c := range f.conns {
		c.Close()
		delete(f.conns, addr)
	}
}

// forwarded reports whether another node forwarded the call.
func forwarded(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, ForwardedKey)) > 0
}

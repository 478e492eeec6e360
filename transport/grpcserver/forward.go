package grpcserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api/pb"
)

// ForwardedKey is the metadata a follower adds to a call it forwards to
// the leader. A node that is not the leader answers such a call
// UNAVAILABLE instead of forwarding it again, so forwarding never loops.
const ForwardedKey = "x-delaywheel-forwarded"

// forwarder passes the leader's calls on from a follower, to the gRPC
// address the leader's member record holds. Its connections to leaders
// are kept, one per address, until close.
type forwarder struct {
	creds   credentials.TransportCredentials
	replies map[string]reflect.Type // full method → answer type

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func newForwarder(on bool, clientTLS *tls.Config) *forwarder {
	if !on {
		return nil
	}
	f := &forwarder{creds: insecure.NewCredentials(), replies: map[string]reflect.Type{}, conns: map[string]*grpc.ClientConn{}}
	if clientTLS != nil {
		f.creds = credentials.NewTLS(clientTLS)
	}
	iface := reflect.TypeFor[pb.DelaywheelServer]()
	for _, m := range pb.Delaywheel_ServiceDesc.Methods {
		if mt, ok := iface.MethodByName(m.MethodName); ok {
			f.replies["/"+ServiceName+"/"+m.MethodName] = mt.Type.Out(0).Elem()
		}
	}
	return f
}

// appliedIndexKey is the header metadata of the leader's answer to a
// forwarded call: the index the follower's reads then wait for.
var appliedIndexKey = strings.ToLower(transport.AppliedIndexHeader)

// forwardedReply is the leader's answer to a forwarded call and the index
// it had applied once the call was (0: none sent).
type forwardedReply struct {
	reply any
	index uint64
}

// errNoForward says a call cannot be forwarded; the follower then answers
// NOT_LEADER.
var errNoForward = errors.New("not forwarded")

// forward makes the call method with req at the leader, whose gRPC address
// is leaderGRPC, with the caller's authorization, and returns its answer
// or its status error untouched.
func (f *forwarder) forward(ctx context.Context, leaderGRPC, method string, req any) (forwardedReply, error) {
	if f == nil || forwarded(ctx) || leaderGRPC == "" {
		return forwardedReply{}, errNoForward
	}
	replyType, ok := f.replies[method]
	if !ok {
		return forwardedReply{}, errNoForward
	}
	auth := authorization(ctx)
	conn, err := f.conn(leaderGRPC)
	if err != nil {
		return forwardedReply{}, fmt.Errorf("%w: %w", errNoForward, err)
	}
	out := metadata.Pairs(ForwardedKey, "1")
	if auth != "" {
		out.Set("authorization", auth)
	}
	reply := reflect.New(replyType).Interface()
	var header metadata.MD
	err = conn.Invoke(metadata.NewOutgoingContext(ctx, out), method, req, reply, grpc.Header(&header))
	var index uint64
	if v := header.Get(appliedIndexKey); len(v) > 0 {
		index, _ = strconv.ParseUint(v[0], 10, 64)
	}
	return forwardedReply{reply: reply, index: index}, err
}

// subscribe passes a Subscribe stream, whose first request (read) is
// first, on to the leader at leaderGRPC with the caller's authorization:
// the requests up, the deliveries down, until either side ends or drain
// does. The leader's status ends the stream as it is (NOT_LEADER once
// leadership moves on: the client subscribes again); a half-close is
// passed on, so the leader settles what was sent and ends OK. It returns
// errNoForward, having sent nothing, when the stream cannot be forwarded.
func (f *forwarder) subscribe(ss pb.Delaywheel_SubscribeServer, first *pb.SubscribeRequest, leaderGRPC string, drain context.Context) error {
	ctx := ss.Context()
	if f == nil || forwarded(ctx) || leaderGRPC == "" {
		return errNoForward
	}
	auth := authorization(ctx)
	conn, err := f.conn(leaderGRPC)
	if err != nil {
		return fmt.Errorf("%w: %w", errNoForward, err)
	}
	out := metadata.Pairs(ForwardedKey, "1")
	if auth != "" {
		out.Set("authorization", auth)
	}
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, out))
	defer cancel()
	defer context.AfterFunc(drain, cancel)()
	up, err := pb.NewDelaywheelClient(conn).Subscribe(ctx)
	if err == nil {
		err = up.Send(first)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errNoForward, err)
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

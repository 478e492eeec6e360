package grpcserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// ForwardedKey is the metadata a follower adds to a call it forwards to
// the leader. A node that is not the leader answers such a call
// UNAVAILABLE instead of forwarding it again, so forwarding never loops.
const ForwardedKey = "x-delaywheel-forwarded"

// forwarder passes the leader's calls on from a follower, to the gRPC
// address the leader's member record holds: it is the service's
// Forwarder over gRPC. Its connections to leaders are kept, one per
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

// appliedIndexKey is the header metadata of the leader's answer to a
// forwarded call: the index the follower's reads then wait for.
var appliedIndexKey = strings.ToLower(transport.AppliedIndexHeader)

// Reaches reports whether a call of ctx can be forwarded to the leader at
// to: it was not forwarded here, and to records its gRPC address.
func (f *forwarder) Reaches(ctx context.Context, to model.Member) bool {
	return !forwarded(ctx) && to.GRPCAddr != ""
}

// client returns the client of the leader at to and the outgoing context
// of a call forwarded there, marked, with the caller's authorization; it
// returns service.ErrNoForward when the call cannot be forwarded.
func (f *forwarder) client(ctx context.Context, to model.Member) (pb.DelaywheelClient, context.Context, error) {
	if !f.Reaches(ctx, to) {
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

// forwardCall makes one call at the leader at to and returns its answer,
// or its status error untouched, and the applied index its header gives.
func forwardCall[Req, Resp any](ctx context.Context, f *forwarder, to model.Member, req Req,
	do func(c pb.DelaywheelClient, ctx context.Context, req Req, opts ...grpc.CallOption) (Resp, error)) (Resp, uint64, error) {
	var zero Resp
	c, octx, err := f.client(ctx, to)
	if err != nil {
		return zero, 0, err
	}
	var header metadata.MD
	resp, err := do(c, octx, req, grpc.Header(&header))
	if err != nil {
		return zero, 0, err
	}
	var index uint64
	if v := header.Get(appliedIndexKey); len(v) > 0 {
		index, _ = strconv.ParseUint(v[0], 10, 64)
	}
	return resp, index, nil
}

// Enqueue forwards an enqueue, its due times absolute.
func (f *forwarder) Enqueue(ctx context.Context, to model.Member, msgs []command.NewMessage) ([]wheel.Enqueued, uint64, error) {
	req := &pb.EnqueueRequest{Messages: api.Each(msgs, messageOf)}
	resp, index, err := forwardCall(ctx, f, to, req, pb.DelaywheelClient.Enqueue)
	if err != nil {
		return nil, 0, err
	}
	out := make([]wheel.Enqueued, len(resp.GetResults()))
	for i, r := range resp.GetResults() {
		id, err := model.ParseID(r.GetId())
		if err != nil {
			return nil, 0, fmt.Errorf("grpcserver: the leader's result %d: %w", i, err)
		}
		out[i] = wheel.Enqueued{ID: id, DeliverAtMs: r.GetDeliverAtMs(), Duplicate: r.GetDuplicate()}
	}
	return out, index, nil
}

// messageOf is the protobuf form of a validated message, due at its
// absolute time.
func messageOf(m command.NewMessage) *pb.Message {
	at := m.DeliverAtMs
	out := &pb.Message{Topic: m.Topic, Body: m.Body, DeliverAtMs: &at, Key: m.Key, Priority: m.Priority, Headers: m.Headers}
	if m.TTRMs > 0 {
		ttr := m.TTRMs
		out.TtrMs = &ttr
	}
	if m.MaxAttempts > 0 {
		attempts := m.MaxAttempts
		out.MaxAttempts = &attempts
	}
	return out
}

// Cancel forwards a cancel by id or by topic and key.
func (f *forwarder) Cancel(ctx context.Context, to model.Member, c command.Cancel) (model.ID, uint64, error) {
	req := &pb.CancelRequest{Topic: c.Topic, Key: c.Key}
	if c.Topic == "" {
		req.Id = c.ID.String()
	}
	resp, index, err := forwardCall(ctx, f, to, req, pb.DelaywheelClient.Cancel)
	if err != nil {
		return model.ID{}, 0, err
	}
	id, err := model.ParseID(resp.GetId())
	return id, index, err
}

// Reschedule forwards a reschedule to an absolute time.
func (f *forwarder) Reschedule(ctx context.Context, to model.Member, id model.ID, deliverAtMs int64) (int64, uint64, error) {
	resp, index, err := forwardCall(ctx, f, to, &pb.RescheduleRequest{Id: id.String(), DeliverAtMs: &deliverAtMs}, pb.DelaywheelClient.Reschedule)
	return resp.GetDeliverAtMs(), index, err
}

// Reserve forwards a reserve.
func (f *forwarder) Reserve(ctx context.Context, to model.Member, topic string, max int, wait, ttr time.Duration) ([]model.Delivery, uint64, error) {
	req := &pb.ReserveRequest{Topic: topic, Max: proto.Int32(int32(max)), WaitMs: wait.Milliseconds()}
	if ttr > 0 {
		req.TtrMs = proto.Int64(ttr.Milliseconds())
	}
	resp, index, err := forwardCall(ctx, f, to, req, pb.DelaywheelClient.Reserve)
	if err != nil {
		return nil, 0, err
	}
	out := make([]model.Delivery, len(resp.GetMessages()))
	for i, d := range resp.GetMessages() {
		if out[i], err = deliveryFrom(d); err != nil {
			return nil, 0, fmt.Errorf("grpcserver: the leader's delivery %d: %w", i, err)
		}
	}
	return out, index, nil
}

// deliveryFrom is the delivery d, as the leader sent it.
func deliveryFrom(d *pb.Delivery) (model.Delivery, error) {
	id, err := model.ParseID(d.GetId())
	if err != nil {
		return model.Delivery{}, err
	}
	rc, err := model.ParseReceipt(d.GetReceipt())
	if err != nil {
		return model.Delivery{}, err
	}
	m := model.Message{ID: id, Topic: d.GetTopic(), Body: d.GetBody(), Headers: d.GetHeaders(), Key: d.GetKey(),
		Priority: d.GetPriority(), DeliverAtMs: d.GetDeliverAtMs(), LeaseExpiresMs: d.GetLeaseExpiresMs()}
	return model.Delivery{Message: m, Attempt: d.GetAttempt(), Receipt: rc}, nil
}

// Settle forwards an ack, nack, touch or bury.
func (f *forwarder) Settle(ctx context.Context, to model.Member, op service.Op, rs []model.Receipt, nackDelayMs int64) (command.Counted, uint64, error) {
	list := api.Each(rs, model.Receipt.String)
	var resp *pb.SettleResponse
	var index uint64
	var err error
	switch op {
	case service.OpNack:
		resp, index, err = forwardCall(ctx, f, to, &pb.NackRequest{Receipts: list, DelayMs: nackDelayMs}, pb.DelaywheelClient.Nack)
	case service.OpTouch:
		resp, index, err = forwardCall(ctx, f, to, &pb.ReceiptsRequest{Receipts: list}, pb.DelaywheelClient.Touch)
	case service.OpBury:
		resp, index, err = forwardCall(ctx, f, to, &pb.ReceiptsRequest{Receipts: list}, pb.DelaywheelClient.Bury)
	default:
		resp, index, err = forwardCall(ctx, f, to, &pb.ReceiptsRequest{Receipts: list}, pb.DelaywheelClient.Ack)
	}
	return command.Counted{Done: int(resp.GetDone()), Stale: int(resp.GetStale())}, index, err
}

// Redrive forwards a redrive (all of the topic's dead when ids is empty).
func (f *forwarder) Redrive(ctx context.Context, to model.Member, topic string, ids []model.ID) (int, uint64, error) {
	req := &pb.RedriveRequest{Topic: topic, All: len(ids) == 0}
	for _, id := range ids {
		req.Ids = append(req.Ids, id.String())
	}
	resp, index, err := forwardCall(ctx, f, to, req, pb.DelaywheelClient.Redrive)
	return int(resp.GetRedriven()), index, err
}

// subscribe passes a Subscribe stream, whose first request (read) is
// first, on to the leader at to with the caller's authorization: the
// requests up, the deliveries down, until either side ends or drain does.
// The leader's status ends the stream as it is (NOT_LEADER once
// leadership moves on: the client subscribes again); a half-close is
// passed on, so the leader settles what was sent and ends OK. It returns
// service.ErrNoForward, having sent nothing, when the stream cannot be
// forwarded.
func (f *forwarder) subscribe(ss pb.Delaywheel_SubscribeServer, first *pb.SubscribeRequest, to model.Member, drain context.Context) error {
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

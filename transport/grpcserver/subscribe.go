package grpcserver

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Subscribe streams a topic's deliveries as the leader hands them out, and
// settles the acks and nacks its client sends up the same stream.
func (s *Server) Subscribe(ss pb.Delaywheel_SubscribeServer) error {
	caller := ss.Context()
	first, err := ss.Recv()
	if err != nil {
		return err // the client went away before it asked for anything
	}
	if err := service.ValidateTopic("topic", first.GetTopic(), s.cfg.Limits); err != nil {
		return err
	}
	var window *int64
	if first.MaxInflight != nil {
		window = new(int64)
		*window = int64(first.GetMaxInflight())
	}
	opt, err := service.ValidateStream(window, first.TtrMs, s.cfg.Limits)
	if err != nil {
		return err
	}
	// On a node of many groups, the stream is its topic's group's, and
	// only that group's leader streams it.
	g := s.svc.GroupOfTopic(first.GetTopic())
	b, err := s.svc.Local(g)
	if err != nil {
		return err
	}
	firstSettle, err := s.checkSettlement(first, g)
	if err != nil {
		return err
	}
	release, err := s.cfg.Slots.AcquireStream()
	if err != nil {
		return err
	}
	defer release()
	if m, isLeader, known := b.Leader(); !isLeader {
		// A follower passes the stream on to the leader when its member
		// record holds its gRPC address, as the HTTP stream is passed on.
		if !known {
			return &service.NotLeaderError{Leader: m}
		}
		err := s.fwd.subscribe(s.drain, ss, first, m)
		switch {
		case errors.Is(err, service.ErrNoForward):
			return &service.NotLeaderError{Leader: m, Known: true}
		case s.drain.Err() != nil && caller.Err() == nil:
			return unavailable("this node is shutting down; subscribe again at another node")
		}
		return err
	}
	ctx, cancel := context.WithCancel(caller)
	defer cancel()
	defer context.AfterFunc(s.drain, cancel)()
	st, err := b.Stream(ctx, first.GetTopic(), opt)
	if err != nil {
		return err
	}
	// The client's requests are read on their own, and settled by another
	// goroutine that takes every request read meanwhile into one ack: a
	// client sends its acks as they come, in requests far smaller than
	// what one commit can carry, and settling them one commit each would
	// fall behind the deliveries and fill the window.
	pending := make(chan settlement, settleQueue)
	// What the client settles frees the stream's window as it is read,
	// ahead of its ack going through the log (see windowFreer).
	free, _ := st.(windowFreer)
	read := func(set settlement) settlement {
		if free != nil {
			free.Settling(set.acks)
			free.Settling(set.nacks)
		}
		return set
	}
	pending <- read(firstSettle)
	settled := make(chan struct{}) // closed when the settling ends
	var readErr error              // why reading ended; written before pending closes
	go func() {
		defer close(pending)
		for {
			req, err := ss.Recv()
			var set settlement
			if err == nil {
				set, err = s.checkSettlement(req, g)
			}
			if err != nil {
				readErr = err
				return
			}
			select {
			case pending <- read(set):
			case <-settled:
				return
			}
		}
	}()
	// upErr says why the requests ended: the first settlement that failed,
	// or, once every request read is settled, why reading ended. What was
	// read is settled even after the stream ended (the client may cancel
	// it right after its last acks), and its deliveries are released
	// (st.Close) only then, so that no ack comes after its release.
	upErr := make(chan error, 1)
	go func() {
		err := s.settleAll(context.WithoutCancel(ctx), b, pending)
		if err == nil {
			err = readErr
		}
		upErr <- err
		cancel()
		close(settled)
	}()
	defer func() { go func() { <-settled; st.Close() }() }()
	for {
		ds, err := st.Next(ctx)
		switch {
		case err == nil:
		case s.drain.Err() != nil && caller.Err() == nil:
			return unavailable("this node is shutting down; subscribe again at another node")
		case ctx.Err() != nil:
			select {
			case err := <-upErr:
				if errors.Is(err, io.EOF) || caller.Err() != nil {
					return nil // the client closed the stream, or went away
				}
				return err
			default:
				return nil
			}
		case errors.Is(err, model.ErrNotLeader):
			m, _, known := b.Leader()
			return &service.NotLeaderError{Leader: m, Known: known}
		default:
			return err
		}
		if err := ss.Send(&pb.SubscribeResponse{Messages: api.Each(ds, deliveryOf)}); err != nil {
			return err
		}
	}
}

// windowFreer is a stream that frees its window for the receipts its own
// consumer settles up the stream, before their ack or nack is proposed.
type windowFreer interface {
	Settling(rs []model.Receipt)
}

// settleQueue bounds the client's requests read and not yet settled; past
// it the stream stops reading them and HTTP/2 flow control holds the
// client back.
const settleQueue = 64

// settlement is what one request of a Subscribe stream settles, checked.
type settlement struct {
	acks, nacks []model.Receipt
	nackDelayMs int64
}

// checkSettlement checks and parses the acks and nacks req carries, on a
// stream of group g: on a node of many groups, receipts of another group
// are refused. Fields are checked in order, ack, nack, then nack_delay_ms,
// so the error names the first bad one.
func (s *Server) checkSettlement(req *pb.SubscribeRequest, g int) (settlement, error) {
	var set settlement
	if len(req.GetAck()) > 0 {
		rs, err := s.streamReceipts("ack", req.GetAck(), g)
		if err != nil {
			return settlement{}, err
		}
		set.acks = rs
	}
	if len(req.GetNack()) > 0 {
		rs, err := s.streamReceipts("nack", req.GetNack(), g)
		if err != nil {
			return settlement{}, err
		}
		if err := service.ValidateNackDelay("nack_delay_ms", req.GetNackDelayMs(), s.cfg.Limits); err != nil {
			return settlement{}, err
		}
		set.nacks, set.nackDelayMs = rs, req.GetNackDelayMs()
	}
	return set, nil
}

// streamReceipts parses the receipts list, given as field, that a stream
// of group g settles.
func (s *Server) streamReceipts(field string, list []string, g int) ([]model.Receipt, error) {
	rs, err := service.ParseReceipts(field, list, s.cfg.Limits)
	if err != nil || s.svc.Count() == 1 {
		return rs, err
	}
	for i, rc := range rs {
		if rc.ID.Group() != g {
			return nil, service.Invalid("%s[%d]: receipt names group %d; this stream's topic is in group %d (settle it with Ack or Nack)",
				field, i, rc.ID.Group(), g)
		}
	}
	return rs, nil
}

// settleAll settles the settlements of pending on b until it is closed,
// each time acking together every receipt queued (in calls of at most
// Limits.MaxBatch receipts), then nacking what they nack in order.
func (s *Server) settleAll(ctx context.Context, b transport.Backend, pending <-chan settlement) error {
	limit := s.cfg.Limits.MaxBatch
	for set := range pending {
		acks := set.acks
		var nacks []settlement
		if len(set.nacks) > 0 {
			nacks = append(nacks, set)
		}
	more:
		for len(acks) < limit {
			select {
			case next, ok := <-pending:
				if !ok {
					break more
				}
				acks = append(acks, next.acks...)
				if len(next.nacks) > 0 {
					nacks = append(nacks, next)
				}
			default:
				break more
			}
		}
		for len(acks) > 0 {
			n := min(len(acks), limit)
			if _, err := b.Ack(ctx, acks[:n]); err != nil {
				return err
			}
			acks = acks[n:]
		}
		for _, set := range nacks {
			if _, err := b.Nack(ctx, set.nacks, set.nackDelayMs); err != nil {
				return err
			}
		}
	}
	return nil
}

// interceptStream guards a stream of the Delaywheel service as intercept
// guards a call; a follower does not forward streams but refuses them
// NOT_LEADER (on a node of many groups, once the stream names its topic:
// Subscribe checks its group).
func (s *Server) interceptStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !ours(info.FullMethod) {
		return handler(srv, ss)
	}
	return s.observe(info.FullMethod, func() error {
		// A status (NOT_LEADER, the stream's own) stays as it is.
		return asStatus(s.guardStream(srv, strictStream{ServerStream: ss, codec: s.codec}, handler))
	})
}

func (s *Server) guardStream(srv any, ss grpc.ServerStream, handler grpc.StreamHandler) error {
	if err := s.authorize(ss.Context()); err != nil {
		return err
	}
	if s.svc.Count() == 1 {
		if _, err := s.svc.Local(0); err != nil {
			return err
		}
	}
	return handler(srv, ss)
}

func deliveryOf(d model.Delivery) *pb.Delivery {
	return &pb.Delivery{Id: d.ID.String(), Topic: d.Topic, Body: d.Body, Headers: d.Headers, Key: d.Key,
		Priority: d.Priority, DeliverAtMs: d.DeliverAtMs, Attempt: d.Attempt, Receipt: d.Receipt.String(),
		LeaseExpiresMs: d.LeaseExpiresMs}
}

package grpcserver

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/wheel"
)

// Subscribe streams a topic's deliveries as the leader hands them out, and
// settles the acks and nacks its client sends up the same stream.
func (s *Server) Subscribe(ss pb.Delaywheel_SubscribeServer) error {
	caller := ss.Context()
	first, err := ss.Recv()
	if err != nil {
		return err // the client went away before it asked for anything
	}
	if err := transport.ValidateTopic("topic", first.GetTopic(), s.cfg.Limits); err != nil {
		return err
	}
	var window *int64
	if first.MaxInflight != nil {
		window = new(int64)
		*window = int64(first.GetMaxInflight())
	}
	opt, err := transport.ValidateStream(window, first.TtrMs, s.cfg.Limits)
	if err != nil {
		return err
	}
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		return transport.StreamsFull(cap(s.streams))
	}
	ctx, cancel := context.WithCancel(caller)
	defer cancel()
	defer context.AfterFunc(s.drain, cancel)()
	st, err := s.b.Stream(ctx, first.GetTopic(), opt)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := s.settleStream(ctx, first); err != nil {
		return err
	}
	// The client's requests are read on their own, so that acks settle
	// while deliveries are being sent.
	upErr := make(chan error, 1)
	go func() {
		for {
			req, err := ss.Recv()
			if err == nil {
				err = s.settleStream(ctx, req)
			}
			if err != nil {
				upErr <- err
				cancel()
				return
			}
		}
	}()
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
		case errors.Is(err, wheel.ErrNotLeader):
			addr, _, known := s.b.LeaderHTTP()
			return notLeader(addr, known)
		default:
			return err
		}
		out := &pb.SubscribeResponse{Messages: make([]*pb.Delivery, len(ds))}
		for i, d := range ds {
			out.Messages[i] = deliveryOf(d)
		}
		if err := ss.Send(out); err != nil {
			return err
		}
	}
}

// settleStream acks and nacks what req carries.
func (s *Server) settleStream(ctx context.Context, req *pb.SubscribeRequest) error {
	if len(req.GetAck()) > 0 {
		rs, err := transport.ParseReceipts(req.GetAck(), s.cfg.Limits)
		if err != nil {
			return err
		}
		if _, err := s.b.Ack(ctx, rs); err != nil {
			return err
		}
	}
	if len(req.GetNack()) > 0 {
		if err := transport.ValidateNackDelay(req.GetNackDelayMs(), s.cfg.Limits); err != nil {
			return err
		}
		rs, err := transport.ParseReceipts(req.GetNack(), s.cfg.Limits)
		if err != nil {
			return err
		}
		if _, err := s.b.Nack(ctx, rs, req.GetNackDelayMs()); err != nil {
			return err
		}
	}
	return nil
}

// interceptStream guards a stream of the Delaywheel service as intercept
// guards a call; a follower does not forward streams but refuses them
// NOT_LEADER.
func (s *Server) interceptStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !strings.HasPrefix(info.FullMethod, "/"+ServiceName+"/") {
		return handler(srv, ss)
	}
	start := time.Now()
	err := s.guardStream(srv, ss, handler)
	if _, isStatus := status.FromError(err); err != nil && !isStatus {
		err = statusOf(err, "", nil) // a status (NOT_LEADER, the stream's own) stays as it is
	}
	s.metrics.Observe(strings.TrimPrefix(info.FullMethod, "/"+ServiceName+"/"), status.Code(err).String(), time.Since(start))
	return err
}

func (s *Server) guardStream(srv any, ss grpc.ServerStream, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	if s.cfg.AuthToken != "" {
		if err := transport.CheckBearer(authorization(ctx), s.tokenSum); err != nil {
			return err
		}
	}
	if err := s.b.Removed(); err != nil {
		return unavailable(err.Error())
	}
	if addr, isLeader, known := s.b.LeaderHTTP(); !isLeader {
		return notLeader(addr, known)
	}
	return handler(srv, ss)
}

func deliveryOf(d wheel.Delivery) *pb.Delivery {
	return &pb.Delivery{Id: d.ID.String(), Topic: d.Topic, Body: d.Body, Headers: d.Headers, Key: d.Key,
		Priority: d.Priority, DeliverAtMs: d.DeliverAtMs, Attempt: d.Attempt, Receipt: d.Receipt.String(),
		LeaseExpiresMs: d.LeaseExpiresMs}
}

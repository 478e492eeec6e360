package grpcserver

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/wheel"
)

// This file routes the calls of a node of many Raft groups
// (transport.Grouped, --groups N) as the HTTP server routes its requests
// (transport's groups.go and groupspan.go): a call about a topic goes to
// the topic's group, a call about a message id to the group the id names,
// Wheel and Slot to the group they name; an enqueue or a settlement whose
// messages or receipts are of many groups is split by group, each part
// answered in its group as a call of its own (atomic per group only:
// when a part fails, the parts that succeeded stay done, and the answer is
// the failed part's error, naming its group). Topics and Cluster answer
// for every group, and the health service serves while every group is
// ready.

// pickedKey is the context key of the backend of the group that answers
// a call.
type pickedKey struct{}

// be returns the backend that answers the call of ctx: its group's.
// Calls of group 0, and every call to a backend of one group, carry no
// group and are the server's backend.
func (s *Server) be(ctx context.Context) transport.Backend {
	if s.grouped != nil {
		if b, ok := ctx.Value(pickedKey{}).(transport.Backend); ok {
			return b
		}
	}
	return s.b
}

// group returns group g's backend; group 0's is the server's backend.
func (s *Server) group(g int) transport.Backend {
	if g == 0 || s.grouped == nil {
		return s.b
	}
	return s.grouped.Group(g)
}

// withGroup returns ctx carrying backend b, group g's, as the one that
// answers its call. Group 0 is carried by no value.
func withGroup(ctx context.Context, b transport.Backend, g int) context.Context {
	if g == 0 {
		return ctx
	}
	return context.WithValue(ctx, pickedKey{}, b)
}

// route answers req, a call of method, on a node of many groups: in the
// group it concerns, or split over the groups of its messages or
// receipts. A request too malformed to name a group goes to group 0,
// whose handler refuses it.
func (s *Server) route(ctx context.Context, method string, req any, handler grpc.UnaryHandler) (any, error) {
	n := s.groups
	g := 0
	var err error
	switch r := req.(type) {
	case *pb.EnqueueRequest:
		return s.enqueueSpan(ctx, method, r, handler)
	case *pb.ReceiptsRequest:
		return s.settleSpan(ctx, method, r.GetReceipts(), handler,
			func(part []string) any { return &pb.ReceiptsRequest{Receipts: part} })
	case *pb.NackRequest:
		if err := transport.ValidateNackDelay(r.GetDelayMs(), s.cfg.Limits); err != nil {
			return nil, err
		}
		return s.settleSpan(ctx, method, r.GetReceipts(), handler,
			func(part []string) any { return &pb.NackRequest{Receipts: part, DelayMs: r.GetDelayMs()} })
	case *pb.GetRequest:
		g, err = s.idGroup(r.GetId())
	case *pb.RescheduleRequest:
		g, err = s.idGroup(r.GetId())
	case *pb.CancelRequest:
		if r.GetId() != "" || r.GetTopic() == "" {
			g, err = s.idGroup(r.GetId())
		} else {
			g = wheel.GroupOf(r.GetTopic(), n)
		}
	case *pb.ReserveRequest:
		g = wheel.GroupOf(r.GetTopic(), n)
	case *pb.DeadLettersRequest:
		g = wheel.GroupOf(r.GetTopic(), n)
	case *pb.RedriveRequest:
		g = wheel.GroupOf(r.GetTopic(), n)
	case *pb.WheelRequest:
		g, err = int(r.GetGroup()), transport.ValidateGroup(int(r.GetGroup()), n)
	case *pb.SlotRequest:
		g, err = int(r.GetGroup()), transport.ValidateGroup(int(r.GetGroup()), n)
	}
	if err != nil {
		return nil, err
	}
	return s.within(ctx, g, method, req, handler)
}

// idGroup is the group a message id names: a malformed id is group 0's
// to refuse (naming id), an id of a group this cluster does not have is
// refused here.
func (s *Server) idGroup(raw string) (int, error) {
	id, err := wheel.ParseID(raw)
	if err != nil {
		return 0, nil
	}
	return transport.GroupOfID("id", id, s.groups)
}

// enqueueSpan enqueues a batch in the groups of its topics: a batch of
// one group as one call of that group; else, validated whole, each
// group's messages, their due times made absolute here, as one enqueue
// of that group, and the results in the batch's order.
func (s *Server) enqueueSpan(ctx context.Context, method string, req *pb.EnqueueRequest, handler grpc.UnaryHandler) (any, error) {
	n := s.groups
	msgs := req.GetMessages()
	g, one := 0, true
	for i, m := range msgs {
		if mg := wheel.GroupOf(m.GetTopic(), n); i == 0 {
			g = mg
		} else if mg != g {
			one = false
			break
		}
	}
	if one {
		return s.within(ctx, g, method, req, handler)
	}
	valid, err := transport.ValidateEnqueueProto(req, s.cfg.Limits, s.nowMs())
	if err != nil {
		return nil, err
	}
	groups, parts := transport.SplitMessages(valid, n)
	results := make([]*pb.Result, len(msgs))
	err = transport.EachGroup(groups, func(g int) error {
		idx := parts[g]
		sub := &pb.EnqueueRequest{Messages: make([]*pb.Message, len(idx))}
		for j, i := range idx {
			sub.Messages[j] = messageOf(valid[i])
		}
		reply, err := s.within(ctx, g, method, sub, handler)
		if err != nil {
			return inGroup(g, err)
		}
		out := reply.(*pb.EnqueueResponse)
		if len(out.GetResults()) != len(idx) {
			return fmt.Errorf("grpcserver: group %d answered %d results for %d messages", g, len(out.GetResults()), len(idx))
		}
		for j, i := range idx {
			results[i] = out.GetResults()[j]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &pb.EnqueueResponse{Results: results}, nil
}

// messageOf is the protobuf form of a validated message, due at its
// absolute time.
func messageOf(m wheel.NewMessage) *pb.Message {
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

// settleSpan settles the receipts of an ack, nack or touch in the groups
// their ids name: receipts of one group as one call of that group; else
// each group's part as a call of its own (sub makes a part's request),
// and the counts summed.
func (s *Server) settleSpan(ctx context.Context, method string, list []string, handler grpc.UnaryHandler, sub func(part []string) any) (any, error) {
	rs, err := transport.ParseReceipts(list, s.cfg.Limits)
	if err != nil {
		return nil, err
	}
	groups, parts, err := transport.SplitReceipts("receipts", rs, s.groups)
	if err != nil {
		return nil, err
	}
	if len(groups) == 1 {
		return s.within(ctx, groups[0], method, sub(list), handler)
	}
	var mu sync.Mutex
	sum := &pb.SettleResponse{}
	err = transport.EachGroup(groups, func(g int) error {
		part := make([]string, len(parts[g]))
		for j, i := range parts[g] {
			part[j] = list[i]
		}
		reply, err := s.within(ctx, g, method, sub(part), handler)
		if err != nil {
			return inGroup(g, err)
		}
		mu.Lock()
		defer mu.Unlock()
		sum.Done += reply.(*pb.SettleResponse).GetDone()
		sum.Stale += reply.(*pb.SettleResponse).GetStale()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sum, nil
}

// inGroup is err, the answer of group g to a part of a call split over
// many groups, as a status whose message names the group.
func inGroup(g int, err error) error {
	st := status.Convert(asStatus(err)).Proto()
	st.Message = fmt.Sprintf("group %d: %s", g, st.GetMessage())
	return status.FromProto(st).Err()
}

// asStatus is err as a status: a status (the leader's answer, NOT_LEADER)
// as it is, any other error as the HTTP API answers it, mapped.
func asStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, isStatus := status.FromError(err); isStatus {
		return err
	}
	return statusOf(err, "", nil)
}

// ready reports whether every group is ready and none counts this node
// removed.
func (s *Server) ready() bool {
	for g := range s.groups {
		if b := s.group(g); b.Ready() != nil || b.Removed() != nil {
			return false
		}
	}
	return true
}

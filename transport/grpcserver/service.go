package grpcserver

import (
	"context"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// The calls validate as the HTTP handlers do, with the functions package
// transport exports, and return a backend or validation error for the
// interceptor to map.

// Enqueue schedules a batch of messages.
func (s *Server) Enqueue(ctx context.Context, req *pb.EnqueueRequest) (*pb.EnqueueResponse, error) {
	msgs, err := service.ValidateEnqueueProto(req, s.cfg.Limits, s.nowMs())
	if err != nil {
		return nil, err
	}
	res, err := s.svc.Enqueue(ctx, msgs)
	if err != nil {
		return nil, err
	}
	out := &pb.EnqueueResponse{Results: make([]*pb.Result, len(res))}
	rs := make([]pb.Result, len(res)) // one allocation for the batch
	for i, e := range res {
		rs[i].Id, rs[i].DeliverAtMs, rs[i].Duplicate = e.ID.String(), e.DeliverAtMs, e.Duplicate
		out.Results[i] = &rs[i]
	}
	return out, nil
}

// Get returns a pending message.
func (s *Server) Get(ctx context.Context, req *pb.GetRequest) (*pb.MessageView, error) {
	id, err := service.ParseID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	b, err := s.byID(id)
	if err != nil {
		return nil, err
	}
	v, err := b.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return viewOf(v), nil
}

// Cancel removes a message by id, or by topic and key; a request naming
// both ways, or a key without its topic, is refused rather than read one
// way.
func (s *Server) Cancel(ctx context.Context, req *pb.CancelRequest) (*pb.CancelResponse, error) {
	var c command.Cancel
	var err error
	switch {
	case req.GetId() != "" && (req.GetTopic() != "" || req.GetKey() != ""):
		err = service.Invalid("topic, key: must be empty when cancelling by id (cancel by id, or by topic and key)")
	case req.GetTopic() == "" && req.GetKey() != "":
		err = service.Invalid("topic: required to cancel by key (cancel by id, or by topic and key)")
	case req.GetTopic() == "":
		c.ID, err = service.ParseID("id", req.GetId())
	default:
		if err = service.ValidateTopic("topic", req.GetTopic(), s.cfg.Limits); err == nil {
			c.Topic, c.Key, err = req.GetTopic(), req.GetKey(), service.ValidateKey(req.GetKey(), s.cfg.Limits)
		}
	}
	if err != nil {
		return nil, err
	}
	id, err := s.svc.Cancel(ctx, c)
	if err != nil {
		return nil, err
	}
	return &pb.CancelResponse{Id: id.String(), State: api.StateCancelled}, nil
}

// Reschedule moves a delayed or ready message.
func (s *Server) Reschedule(ctx context.Context, req *pb.RescheduleRequest) (*pb.RescheduleResponse, error) {
	id, err := service.ParseID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	at, err := service.ValidateReschedule(req.DelayMs, req.DeliverAtMs, s.cfg.Limits, s.nowMs())
	if err != nil {
		return nil, err
	}
	got, err := s.svc.Reschedule(ctx, id, at)
	if err != nil {
		return nil, err
	}
	return &pb.RescheduleResponse{Id: id.String(), DeliverAtMs: got}, nil
}

// Reserve leases due messages of a topic, waiting up to wait_ms.
func (s *Server) Reserve(ctx context.Context, req *pb.ReserveRequest) (*pb.ReserveResponse, error) {
	if err := service.ValidateTopic("topic", req.GetTopic(), s.cfg.Limits); err != nil {
		return nil, err
	}
	r := api.ReserveRequest{WaitMs: req.GetWaitMs(), TTRMs: req.TtrMs}
	if req.Max != nil {
		r.Max = api.Ptr(int(req.GetMax()))
	}
	n, waitMs, ttrMs, err := service.ValidateReserve(r, s.cfg.Limits)
	if err != nil {
		return nil, err
	}
	ds, err := s.cfg.Slots.Reserve(ctx, s.drain, s.svc, req.GetTopic(), n, waitMs, ttrMs)
	if err != nil {
		return nil, err
	}
	return &pb.ReserveResponse{Messages: api.Each(ds, deliveryOf)}, nil
}

// Ack finishes reserved messages.
func (s *Server) Ack(ctx context.Context, req *pb.ReceiptsRequest) (*pb.SettleResponse, error) {
	return s.settle(ctx, req.GetReceipts(), service.OpAck, 0)
}

// Nack returns reserved messages to delayed. The receipts are checked
// before the delay, as POST /v1/nack checks them, so that both name the
// same field.
func (s *Server) Nack(ctx context.Context, req *pb.NackRequest) (*pb.SettleResponse, error) {
	return s.settle(ctx, req.GetReceipts(), service.OpNack, req.GetDelayMs())
}

// Touch extends leases.
func (s *Server) Touch(ctx context.Context, req *pb.ReceiptsRequest) (*pb.SettleResponse, error) {
	return s.settle(ctx, req.GetReceipts(), service.OpTouch, 0)
}

// Bury moves reserved messages to their topics' dead letters.
func (s *Server) Bury(ctx context.Context, req *pb.ReceiptsRequest) (*pb.SettleResponse, error) {
	return s.settle(ctx, req.GetReceipts(), service.OpBury, 0)
}

func (s *Server) settle(ctx context.Context, list []string, op service.Op, nackDelayMs int64) (*pb.SettleResponse, error) {
	rs, err := service.ParseReceipts("receipts", list, s.cfg.Limits)
	if err != nil {
		return nil, err
	}
	if op == service.OpNack {
		if err := s.svc.CheckReceipts("receipts", rs); err != nil {
			return nil, err
		}
		if err := service.ValidateNackDelay("delay_ms", nackDelayMs, s.cfg.Limits); err != nil {
			return nil, err
		}
	}
	c, err := s.svc.Settle(ctx, "receipts", op, rs, nackDelayMs)
	if err != nil {
		return nil, err
	}
	return &pb.SettleResponse{Done: int64(c.Done), Stale: int64(c.Stale)}, nil
}

// Topics lists every topic's counts, of every group.
func (s *Server) Topics(ctx context.Context, _ *pb.TopicsRequest) (*pb.TopicsResponse, error) {
	if _, err := s.svc.Local(0); err != nil {
		return nil, err
	}
	ts, err := s.svc.Topics(ctx)
	if err != nil {
		return nil, err
	}
	return &pb.TopicsResponse{Topics: api.Each(ts, func(t wheel.TopicCounts) *pb.TopicCounts {
		return &pb.TopicCounts{Topic: t.Topic, Delayed: t.Delayed, Ready: t.Ready, Reserved: t.Reserved, Dead: t.Dead}
	})}, nil
}

// DeadLetters lists a topic's dead messages.
func (s *Server) DeadLetters(ctx context.Context, req *pb.DeadLettersRequest) (*pb.DeadLettersResponse, error) {
	if err := service.ValidateTopic("topic", req.GetTopic(), s.cfg.Limits); err != nil {
		return nil, err
	}
	limit, err := service.ValidateDeadLimit(req.Limit, s.cfg.Limits)
	if err != nil {
		return nil, err
	}
	b, err := s.svc.Local(s.svc.GroupOfTopic(req.GetTopic()))
	if err != nil {
		return nil, err
	}
	vs, err := b.Dead(ctx, req.GetTopic(), limit)
	if err != nil {
		return nil, err
	}
	return &pb.DeadLettersResponse{Messages: api.Each(vs, viewOf)}, nil
}

// Redrive moves dead messages back to ready: the listed ids, or with all
// every one of the topic's. An empty list without all names none, as
// HTTP's "ids": [] does.
func (s *Server) Redrive(ctx context.Context, req *pb.RedriveRequest) (*pb.RedriveResponse, error) {
	if err := service.ValidateTopic("topic", req.GetTopic(), s.cfg.Limits); err != nil {
		return nil, err
	}
	switch {
	case req.GetAll() && len(req.GetIds()) > 0:
		return nil, service.Invalid("ids: %d given with all set; send either the ids or all", len(req.GetIds()))
	case !req.GetAll() && len(req.GetIds()) == 0:
		return &pb.RedriveResponse{}, nil
	}
	ids, err := service.ParseIDs(req.GetIds(), s.cfg.Limits)
	if err != nil {
		return nil, err
	}
	n, err := s.svc.Redrive(ctx, req.GetTopic(), ids)
	if err != nil {
		return nil, err
	}
	return &pb.RedriveResponse{Redriven: int64(n)}, nil
}

// Wheel describes the timing wheel of a group.
func (s *Server) Wheel(ctx context.Context, req *pb.WheelRequest) (*pb.WheelResponse, error) {
	b, err := s.groupOf(int(req.GetGroup()))
	if err != nil {
		return nil, err
	}
	w, err := b.Wheel(ctx)
	if err != nil {
		return nil, err
	}
	v := transport.WheelView(w)
	return &pb.WheelResponse{Slots: int32(v.Slots), TickMs: v.TickMs, CursorMs: v.CursorMs, HorizonMs: v.HorizonMs,
		OpenSegments: int64(v.OpenSegments), OverflowMessages: v.OverflowMessages,
		Nonempty: api.Each(v.NonEmpty, func(n api.SlotSummary) *pb.SlotSummary {
			return &pb.SlotSummary{Slot: int32(n.Slot), Second: n.Second, Messages: int64(n.Messages), Bytes: n.Bytes}
		})}, nil
}

// Slot describes one slot of the wheel of a group.
func (s *Server) Slot(ctx context.Context, req *pb.SlotRequest) (*pb.SlotResponse, error) {
	b, err := s.groupOf(int(req.GetGroup()))
	if err != nil {
		return nil, err
	}
	if err := service.ValidateSlot(int(req.GetSlot())); err != nil {
		return nil, err
	}
	si, err := b.Slot(ctx, int(req.GetSlot()), req.GetRecords())
	if err != nil {
		return nil, err
	}
	v := transport.SlotView(si, req.GetRecords())
	return &pb.SlotResponse{Slot: int32(v.Slot), Second: v.Second, File: v.File, Messages: int64(v.Messages), Bytes: v.Bytes,
		Records: api.Each(v.Records, func(r api.SlotRecord) *pb.SlotRecord {
			return &pb.SlotRecord{Offset: r.Offset, Type: r.Type, Index: r.Index, Id: r.ID, Topic: r.Topic,
				DueMs: r.DueMs, Attempts: r.Attempts, Bytes: int64(r.Bytes), Live: r.Live}
		})}, nil
}

// Cluster returns the leader's view of the members, and every group.
func (s *Server) Cluster(ctx context.Context, _ *pb.ClusterRequest) (*pb.ClusterResponse, error) {
	if _, err := s.svc.Local(0); err != nil {
		return nil, err
	}
	c, err := s.cluster(ctx, authorization(ctx))
	if err != nil {
		return nil, err
	}
	return &pb.ClusterResponse{Leader: c.Leader, Term: c.Term, Self: c.Self, ViewOf: c.ViewOf,
		Nodes: api.Each(c.Nodes, func(n api.NodeStatus) *pb.NodeStatus {
			return &pb.NodeStatus{Id: n.ID, RaftAddr: n.RaftAddr, HttpAddr: n.HTTPAddr, Suffrage: n.Suffrage, State: n.State,
				Reachable: n.Reachable, LastContactMs: n.LastContactMs, AppliedIndex: n.AppliedIndex, CommitIndex: n.CommitIndex, Lag: n.Lag}
		}),
		Groups: api.Each(c.Groups, func(g api.Group) *pb.GroupStatus {
			return &pb.GroupStatus{Group: int32(g.Group), Leader: g.Leader, Term: g.Term,
				AppliedIndex: g.AppliedIndex, CommitIndex: g.CommitIndex, Lag: g.Lag}
		})}, nil
}

func viewOf(v wheel.View) *pb.MessageView {
	return &pb.MessageView{Id: v.ID.String(), Topic: v.Topic, State: v.State.String(), DeliverAtMs: v.DeliverAtMs,
		EnqueuedMs: v.EnqueuedMs, Attempts: v.Attempts, Key: v.Key, Priority: v.Priority, Headers: v.Headers, Body: v.Body}
}

// byID returns the backend of the group id names, to read from.
func (s *Server) byID(id model.ID) (transport.Backend, error) {
	g, err := s.svc.GroupOfID("id", id)
	if err != nil {
		return nil, err
	}
	return s.svc.Local(g)
}

// groupOf returns the backend of group g, given as field group, to read
// from.
func (s *Server) groupOf(g int) (transport.Backend, error) {
	if err := s.svc.CheckGroup(g); err != nil {
		return nil, err
	}
	return s.svc.Local(g)
}

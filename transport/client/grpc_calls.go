package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/api/pb"
)

// The calls of the gRPC client, with Client's signatures.

// Enqueue schedules a batch of messages and returns one result per message.
func (g *GRPC) Enqueue(ctx context.Context, msgs []api.Message) ([]api.Result, error) {
	req, err := api.ProtoEnqueueRequest(api.EnqueueRequest{Messages: msgs})
	if err != nil {
		return nil, fmt.Errorf("delaywheel: encode Enqueue: %w", err)
	}
	return invoke(ctx, g, "Enqueue", func(ctx context.Context, c pb.DelaywheelClient) (*pb.EnqueueResponse, error) {
		return c.Enqueue(ctx, req)
	}, api.ResultsOf, func(rs []api.Result) any { return api.EnqueueResponse{Results: rs} })
}

// Get returns a pending message.
func (g *GRPC) Get(ctx context.Context, id string) (api.MessageView, error) {
	return invoke(ctx, g, "Get", bind(pb.DelaywheelClient.Get, &pb.GetRequest{Id: id}), viewOfProto, nil)
}

// Cancel removes a delayed or ready message.
func (g *GRPC) Cancel(ctx context.Context, id string) (api.Cancelled, error) {
	return invoke(ctx, g, "Cancel", bind(pb.DelaywheelClient.Cancel, &pb.CancelRequest{Id: id}), cancelledOf, nil)
}

// CancelKey removes the delayed or ready message of topic with key.
func (g *GRPC) CancelKey(ctx context.Context, topic, key string) (api.Cancelled, error) {
	return invoke(ctx, g, "Cancel", bind(pb.DelaywheelClient.Cancel, &pb.CancelRequest{Topic: topic, Key: key}), cancelledOf, nil)
}

// Reschedule moves a delayed or ready message.
func (g *GRPC) Reschedule(ctx context.Context, id string, req api.RescheduleRequest) (api.Rescheduled, error) {
	in := &pb.RescheduleRequest{Id: id, DelayMs: req.DelayMs, DeliverAtMs: req.DeliverAtMs}
	return invoke(ctx, g, "Reschedule", bind(pb.DelaywheelClient.Reschedule, in), func(r *pb.RescheduleResponse) api.Rescheduled {
		return api.Rescheduled{ID: r.GetId(), DeliverAtMs: r.GetDeliverAtMs()}
	}, nil)
}

// Reserve leases up to req.Max due messages of topic, waiting up to
// req.WaitMs for the first; the context bounds the wait too.
func (g *GRPC) Reserve(ctx context.Context, topic string, req api.ReserveRequest) ([]api.Delivery, error) {
	in := &pb.ReserveRequest{Topic: topic, WaitMs: req.WaitMs, TtrMs: req.TTRMs}
	if req.Max != nil {
		in.Max = api.Ptr(int32(*req.Max))
	}
	return invoke(ctx, g, "Reserve", bind(pb.DelaywheelClient.Reserve, in), func(r *pb.ReserveResponse) []api.Delivery {
		return api.Each(r.GetMessages(), deliveryOfProto)
	}, func(ds []api.Delivery) any { return api.ReserveResponse{Messages: ds} })
}

// Ack finishes reserved messages.
func (g *GRPC) Ack(ctx context.Context, receipts []string) (api.AckResponse, error) {
	return invoke(ctx, g, "Ack", bind(pb.DelaywheelClient.Ack, &pb.ReceiptsRequest{Receipts: receipts}), func(r *pb.SettleResponse) api.AckResponse {
		return api.AckResponse{Acked: int(r.GetDone()), Stale: int(r.GetStale())}
	}, nil)
}

// Nack returns reserved messages to delayed, due delayMs from now.
func (g *GRPC) Nack(ctx context.Context, receipts []string, delayMs int64) (api.NackResponse, error) {
	in := &pb.NackRequest{Receipts: receipts, DelayMs: delayMs}
	return invoke(ctx, g, "Nack", bind(pb.DelaywheelClient.Nack, in), func(r *pb.SettleResponse) api.NackResponse {
		return api.NackResponse{Nacked: int(r.GetDone()), Stale: int(r.GetStale())}
	}, nil)
}

// Touch extends leases by their time-to-run.
func (g *GRPC) Touch(ctx context.Context, receipts []string) (api.TouchResponse, error) {
	return invoke(ctx, g, "Touch", bind(pb.DelaywheelClient.Touch, &pb.ReceiptsRequest{Receipts: receipts}), func(r *pb.SettleResponse) api.TouchResponse {
		return api.TouchResponse{Touched: int(r.GetDone()), Stale: int(r.GetStale())}
	}, nil)
}

// Bury moves reserved messages to their topics' dead letters at once,
// whatever their attempts; Redrive makes them ready again.
func (g *GRPC) Bury(ctx context.Context, receipts []string) (api.BuryResponse, error) {
	return invoke(ctx, g, "Bury", bind(pb.DelaywheelClient.Bury, &pb.ReceiptsRequest{Receipts: receipts}), func(r *pb.SettleResponse) api.BuryResponse {
		return api.BuryResponse{Buried: int(r.GetDone()), Stale: int(r.GetStale())}
	}, nil)
}

// Topics lists every topic's counts by state.
func (g *GRPC) Topics(ctx context.Context) ([]api.TopicCounts, error) {
	return invoke(ctx, g, "Topics", bind(pb.DelaywheelClient.Topics, &pb.TopicsRequest{}), func(r *pb.TopicsResponse) []api.TopicCounts {
		return api.Each(r.GetTopics(), func(t *pb.TopicCounts) api.TopicCounts {
			return api.TopicCounts{Topic: t.GetTopic(), Delayed: t.GetDelayed(), Ready: t.GetReady(), Reserved: t.GetReserved(), Dead: t.GetDead()}
		})
	}, func(ts []api.TopicCounts) any { return api.TopicsResponse{Topics: ts} })
}

// Dead lists up to limit dead messages of topic (0 or less: the server's default).
func (g *GRPC) Dead(ctx context.Context, topic string, limit int) ([]api.MessageView, error) {
	in := &pb.DeadLettersRequest{Topic: topic}
	if limit > 0 { // as over HTTP: 0 or less asks for the server's default
		in.Limit = api.Ptr(int32(limit))
	}
	return invoke(ctx, g, "DeadLetters", bind(pb.DelaywheelClient.DeadLetters, in), func(r *pb.DeadLettersResponse) []api.MessageView {
		return api.Each(r.GetMessages(), viewOfProto)
	}, func(vs []api.MessageView) any { return api.DeadResponse{Messages: vs} })
}

// Redrive moves dead messages of topic back to ready, those of ids (all
// when ids is nil, none when it is empty), and returns how many moved.
func (g *GRPC) Redrive(ctx context.Context, topic string, ids []string) (int, error) {
	in := &pb.RedriveRequest{Topic: topic, Ids: ids, All: ids == nil}
	return invoke(ctx, g, "Redrive", bind(pb.DelaywheelClient.Redrive, in), func(r *pb.RedriveResponse) int { return int(r.GetRedriven()) }, func(n int) any { return api.RedriveResponse{Redriven: n} })
}

// Wheel describes the timing wheel (of group 0 on a node of many groups).
func (g *GRPC) Wheel(ctx context.Context) (api.Wheel, error) { return g.GroupWheel(ctx, 0) }

// GroupWheel describes the timing wheel of group grp.
func (g *GRPC) GroupWheel(ctx context.Context, grp int) (api.Wheel, error) {
	return invoke(ctx, g, "Wheel", bind(pb.DelaywheelClient.Wheel, &pb.WheelRequest{Group: int32(grp)}), func(r *pb.WheelResponse) api.Wheel {
		return api.Wheel{Slots: int(r.GetSlots()), TickMs: r.GetTickMs(), CursorMs: r.GetCursorMs(), HorizonMs: r.GetHorizonMs(),
			OpenSegments: int(r.GetOpenSegments()), OverflowMessages: r.GetOverflowMessages(),
			NonEmpty: api.Each(r.GetNonempty(), func(s *pb.SlotSummary) api.SlotSummary {
				return api.SlotSummary{Slot: int(s.GetSlot()), Second: s.GetSecond(), Messages: int(s.GetMessages()), Bytes: s.GetBytes()}
			})}
	}, nil)
}

// Slot describes one slot and, when records is set, its records.
func (g *GRPC) Slot(ctx context.Context, slot int, records bool) (api.Slot, error) {
	return g.GroupSlot(ctx, 0, slot, records)
}

// GroupSlot is Slot of group grp's wheel.
func (g *GRPC) GroupSlot(ctx context.Context, grp, slot int, records bool) (api.Slot, error) {
	in := &pb.SlotRequest{Group: int32(grp), Slot: int32(slot), Records: records}
	return invoke(ctx, g, "Slot", bind(pb.DelaywheelClient.Slot, in), func(r *pb.SlotResponse) api.Slot {
		s := api.Slot{Slot: int(r.GetSlot()), Second: r.GetSecond(), File: r.GetFile(), Messages: int(r.GetMessages()), Bytes: r.GetBytes()}
		if records {
			s.Records = api.Each(r.GetRecords(), func(x *pb.SlotRecord) api.SlotRecord {
				return api.SlotRecord{Offset: x.GetOffset(), Type: x.GetType(), Index: x.GetIndex(), ID: x.GetId(), Topic: x.GetTopic(),
					DueMs: x.GetDueMs(), Attempts: x.GetAttempts(), Bytes: int(x.GetBytes()), Live: x.GetLive()}
			})
		}
		return s
	}, nil)
}

// Cluster returns the leader's view of the members.
func (g *GRPC) Cluster(ctx context.Context) (api.Cluster, error) {
	return invoke(ctx, g, "Cluster", bind(pb.DelaywheelClient.Cluster, &pb.ClusterRequest{}), func(r *pb.ClusterResponse) api.Cluster {
		c := api.Cluster{Leader: r.GetLeader(), Term: r.GetTerm(), Self: r.GetSelf(), ViewOf: r.GetViewOf(),
			Nodes: api.Each(r.GetNodes(), func(n *pb.NodeStatus) api.NodeStatus {
				return api.NodeStatus{Node: api.Node{ID: n.GetId(), RaftAddr: n.GetRaftAddr(), HTTPAddr: n.GetHttpAddr()},
					Suffrage: n.GetSuffrage(), State: n.GetState(), Reachable: n.Reachable, LastContactMs: n.LastContactMs,
					AppliedIndex: n.GetAppliedIndex(), CommitIndex: n.GetCommitIndex(), Lag: n.Lag}
			})}
		for _, gs := range r.GetGroups() {
			c.Groups = append(c.Groups, api.Group{Group: int(gs.GetGroup()), Leader: gs.GetLeader(), Term: gs.GetTerm(),
				AppliedIndex: gs.GetAppliedIndex(), CommitIndex: gs.GetCommitIndex(), Lag: gs.Lag})
		}
		return c
	}, nil)
}

// bind binds a request to a method of the generated client.
func bind[Q any, R any](m func(pb.DelaywheelClient, context.Context, Q, ...grpc.CallOption) (R, error), req Q) func(context.Context, pb.DelaywheelClient) (R, error) {
	return func(ctx context.Context, c pb.DelaywheelClient) (R, error) { return m(c, ctx, req) }
}

func viewOfProto(v *pb.MessageView) api.MessageView {
	return api.MessageView{ID: v.GetId(), Topic: v.GetTopic(), State: v.GetState(), DeliverAtMs: v.GetDeliverAtMs(),
		EnqueuedMs: v.GetEnqueuedMs(), Attempts: v.GetAttempts(), Key: v.GetKey(), Priority: v.GetPriority(),
		Headers: headers(v.GetHeaders()), Payload: api.PayloadOf(v.GetBody())}
}

func deliveryOfProto(d *pb.Delivery) api.Delivery {
	return api.Delivery{ID: d.GetId(), Topic: d.GetTopic(), Payload: api.PayloadOf(d.GetBody()), Headers: headers(d.GetHeaders()),
		Key: d.GetKey(), Priority: d.GetPriority(), DeliverAtMs: d.GetDeliverAtMs(), Attempt: d.GetAttempt(),
		Receipt: d.GetReceipt(), LeaseExpiresMs: d.GetLeaseExpiresMs()}
}

func cancelledOf(r *pb.CancelResponse) api.Cancelled {
	return api.Cancelled{ID: r.GetId(), State: r.GetState()}
}

// headers is never nil, as in the JSON answers.
func headers(h map[string]string) map[string]string {
	if h == nil {
		return map[string]string{}
	}
	return h
}

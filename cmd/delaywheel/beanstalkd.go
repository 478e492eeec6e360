package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/beanstalkd"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// beanstalkdBackend serves transport/beanstalkd over the node's groups
// through a service.Router: each call goes to the group of its topic or
// id, served here when this node leads that group, else forwarded to the
// group's leader by the HTTP API's Forwarder. Reads of state (Get, Dead,
// Ready, Topics) are this node's own, as over HTTP. It is the only file
// that binds the protocol to the node.
type beanstalkdBackend struct {
	gs *replication.Groups
	r  *service.Router
}

func newBeanstalkdBackend(gs *replication.Groups, fwd service.Forwarder) *beanstalkdBackend {
	groups := make([]service.Backend, gs.Count())
	for g := range groups {
		groups[g] = gs.Node(g)
	}
	return &beanstalkdBackend{gs: gs, r: service.NewRouter(groups, fwd)}
}

// listenBeanstalkd listens on --beanstalkd-addr; nil when it is empty.
func listenBeanstalkd(addr string, auth bool, log *slog.Logger) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--beanstalkd-addr: %w", err)
	}
	if auth {
		log.Warn("the beanstalkd protocol has no authentication: --auth-token-file does not guard --beanstalkd-addr", "addr", addr)
	}
	return ln, nil
}

// serveBeanstalkd serves the protocol on ln until ctx ends, with the
// API's limits; the returned func waits until it has drained.
func serveBeanstalkd(ctx context.Context, ln net.Listener, log *slog.Logger, nodeID string, lim transport.Limits, be beanstalkd.Backend) func() error {
	if ln == nil {
		return func() error { return nil }
	}
	srv := beanstalkd.NewServer(beanstalkd.Config{Logger: log, NodeID: nodeID, MaxJobSize: lim.MaxBodyBytes,
		MaxDelay: time.Duration(lim.MaxDelayMs) * time.Millisecond, MinTTR: time.Duration(lim.MinTTRMs) * time.Millisecond,
		MaxTTR: time.Duration(lim.MaxTTRMs) * time.Millisecond, MaxWait: time.Duration(lim.MaxWaitMs) * time.Millisecond,
		MaxAttempts: lim.MaxAttempts}, be)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	log.Info("serving the beanstalkd protocol", "addr", ln.Addr().String())
	return func() error { return <-done }
}

// routed maps the router's answer to what the protocol server reads: the
// wheel's errors, wrapped in beanstalkd.ErrNotSent when the call surely
// reached no leader (none is known, Raft refused it before its log, or
// the leader's address refused the connection).
func routed(err error) error {
	var nl *service.NotLeaderError
	var te *transport.Error
	var op *net.OpError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nl):
		return fmt.Errorf("%w: %w: %w", beanstalkd.ErrNotSent, model.ErrUnavailable, err)
	case errors.Is(err, model.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost):
		// A proposal refused before the log was never made; one whose
		// leadership was lost after its append may still commit.
		return fmt.Errorf("%w: %w", beanstalkd.ErrNotSent, err)
	case errors.As(err, &op) && op.Op == "dial":
		return fmt.Errorf("%w: %w: forward to the leader: %w", beanstalkd.ErrNotSent, model.ErrUnavailable, err)
	case !errors.As(err, &te):
		return err
	}
	for _, m := range []struct {
		status int
		err    error
	}{{http.StatusNotFound, model.ErrNotFound}, {http.StatusConflict, model.ErrConflict}, {http.StatusBadRequest, model.ErrInvalid},
		{http.StatusRequestEntityTooLarge, model.ErrTooLarge}, {http.StatusTooManyRequests, model.ErrOverloaded},
		{http.StatusServiceUnavailable, model.ErrUnavailable}} {
		if te.Status == m.status {
			return fmt.Errorf("%w: the leader answered %w", m.err, err)
		}
	}
	return err
}

// known refuses, as not found, an id of a group this cluster does not have.
func (b *beanstalkdBackend) known(id model.ID) error {
	if id.Group() >= b.r.Count() {
		return fmt.Errorf("%w: message %s", model.ErrNotFound, id)
	}
	return nil
}

func (b *beanstalkdBackend) Put(ctx context.Context, ms []command.NewMessage) ([]model.ID, error) {
	res, err := b.r.Enqueue(ctx, ms)
	if err != nil {
		return nil, routed(err)
	}
	ids := make([]model.ID, len(res))
	for i, e := range res {
		ids[i] = e.ID
	}
	return ids, nil
}

func (b *beanstalkdBackend) Reserve(ctx context.Context, topic string, max int, wait time.Duration) ([]model.Delivery, error) {
	ds, err := b.r.Reserve(ctx, topic, max, wait, 0)
	return ds, routed(err)
}

// ReserveID leases a job by its id in the group the id names.
func (b *beanstalkdBackend) ReserveID(ctx context.Context, id model.ID) (model.Delivery, error) {
	if err := b.known(id); err != nil {
		return model.Delivery{}, err
	}
	d, err := b.r.ReserveID(ctx, id, 0)
	return d, routed(err)
}

// settle acks, nacks, touches or buries r through the router.
func (b *beanstalkdBackend) settle(ctx context.Context, op service.Op, r model.Receipt, delayMs int64) (bool, error) {
	if err := b.known(r.ID); err != nil {
		return false, err
	}
	c, err := b.r.Settle(ctx, "receipts", op, []model.Receipt{r}, delayMs)
	return c.Done == 1, routed(err)
}

// AckEach acks receipts of one group as one log entry on its leader (one
// forwarded ack each when another node leads it, each with its own
// outcome).
func (b *beanstalkdBackend) AckEach(ctx context.Context, rs []model.Receipt) ([]beanstalkd.Acked, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	if err := b.known(rs[0].ID); err != nil {
		return nil, err
	}
	res, err := service.AckEach(ctx, b.r, rs[0].ID.Group(), rs)
	if err != nil {
		return nil, routed(err)
	}
	out := make([]beanstalkd.Acked, len(res))
	for i, a := range res {
		out[i] = beanstalkd.Acked{Done: a.Done, Err: routed(a.Err)}
	}
	return out, nil
}

func (b *beanstalkdBackend) Nack(ctx context.Context, r model.Receipt, delayMs int64) (bool, error) {
	return b.settle(ctx, service.OpNack, r, delayMs)
}

func (b *beanstalkdBackend) Touch(ctx context.Context, r model.Receipt) (bool, error) {
	return b.settle(ctx, service.OpTouch, r, 0)
}

func (b *beanstalkdBackend) Bury(ctx context.Context, r model.Receipt) (bool, error) {
	return b.settle(ctx, service.OpBury, r, 0)
}

func (b *beanstalkdBackend) Get(ctx context.Context, id model.ID) (wheel.View, error) {
	if err := b.known(id); err != nil {
		return wheel.View{}, err
	}
	n, err := b.r.Local(id.Group())
	if err != nil {
		return wheel.View{}, err
	}
	return n.Get(ctx, id)
}

func (b *beanstalkdBackend) Cancel(ctx context.Context, id model.ID) error {
	if err := b.known(id); err != nil {
		return err
	}
	_, err := b.r.Cancel(ctx, command.Cancel{ID: id})
	return routed(err)
}

func (b *beanstalkdBackend) Reschedule(ctx context.Context, id model.ID, deliverAtMs int64) error {
	if err := b.known(id); err != nil {
		return err
	}
	_, err := b.r.Reschedule(ctx, id, deliverAtMs)
	return routed(err)
}

func (b *beanstalkdBackend) Redrive(ctx context.Context, topic string, ids []model.ID) (int, error) {
	n, err := b.r.Redrive(ctx, topic, ids)
	return n, routed(err)
}

func (b *beanstalkdBackend) Dead(ctx context.Context, topic string, limit int) ([]wheel.View, error) {
	n, err := b.r.Local(b.r.GroupOfTopic(topic))
	if err != nil {
		return nil, err
	}
	return n.Dead(ctx, topic, limit)
}

// Ready lists the ready messages of topic: those of its ready queue, then
// those whose due time has come in a slot the wheel has not fired yet (a
// job put without a delay is ready at once, as in beanstalkd, though its
// slot fires up to a second or two later).
func (b *beanstalkdBackend) Ready(ctx context.Context, topic string, limit int) ([]wheel.View, error) {
	st, err := b.settledStore(ctx, topic)
	if err != nil {
		return nil, err
	}
	out, err := st.Ready(topic, limit, nil)
	if err != nil || len(out) >= limit {
		return out, err
	}
	now := time.Now().UnixMilli()
	err = slotted(ctx, st, topic, now/wheel.TickMs, func(v wheel.View) bool {
		if v.At(now).State == wheel.StateReady && !slices.ContainsFunc(out, func(r wheel.View) bool { return r.ID == v.ID }) {
			out = append(out, v)
		}
		return len(out) < limit
	})
	return out, err
}

// settledStore returns the store of topic's group once this node has
// applied every write it answered: a put is answered at its commit, and the
// connection's next peek must see it.
func (b *beanstalkdBackend) settledStore(ctx context.Context, topic string) (*wheel.Store, error) {
	n := b.gs.Node(b.r.GroupOfTopic(topic))
	if _, err := n.Settled(ctx); err != nil {
		return nil, err
	}
	return n.Store(), nil
}

// Delayed scans the wheel's non-empty slots, due second by due second, for
// the first one that holds a delayed message of topic: the wheel keeps
// delayed messages by due second, not by topic. Messages due beyond the
// wheel's horizon (two hours) are not seen.
func (b *beanstalkdBackend) Delayed(ctx context.Context, topic string) (wheel.View, bool, error) {
	st, err := b.settledStore(ctx, topic)
	if err != nil {
		return wheel.View{}, false, err
	}
	var found wheel.View
	ok := false
	err = slotted(ctx, st, topic, math.MaxInt64, func(v wheel.View) bool {
		if v.At(time.Now().UnixMilli()).State != wheel.StateDelayed {
			return true
		}
		found, ok = v, true
		return false
	})
	if err != nil {
		return wheel.View{}, false, err
	}
	return found, ok, nil
}

// slotted calls fn on the messages of topic in the wheel's non-empty slots
// of the seconds up to last, due second by due second and, in a slot, by
// due time, until fn returns false.
func slotted(ctx context.Context, st *wheel.Store, topic string, last int64, fn func(wheel.View) bool) error {
	info, err := st.Wheel()
	if err != nil {
		return err
	}
	for _, sl := range info.NonEmpty {
		if sl.Second > last {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		si, err := st.Slot(sl.Slot, true)
		if err != nil {
			return err
		}
		recs := slices.DeleteFunc(si.Records, func(r wheel.SlotRecord) bool { return !r.Live || r.Topic != topic })
		slices.SortFunc(recs, func(a, c wheel.SlotRecord) int { return cmp.Compare(a.DueMs, c.DueMs) })
		for _, r := range recs {
			v, err := st.Get(r.ID)
			if errors.Is(err, model.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if !fn(v) {
				return nil
			}
		}
	}
	return nil
}

func (b *beanstalkdBackend) Topics(ctx context.Context) ([]wheel.TopicCounts, error) {
	return b.r.Topics(ctx)
}

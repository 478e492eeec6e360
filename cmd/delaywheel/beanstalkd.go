package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/beanstalkd"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// beanstalkdBackend serves transport/beanstalkd over the node's groups.
// Each call goes to the group of its topic or id: to this node when it
// leads that group, else to the group's leader over its HTTP API (the Go
// client), which is how a follower forwards. Reads of state (Get, Dead,
// Ready, Topics) are this node's own, as over HTTP. It is the only file
// that binds the protocol to the node.
type beanstalkdBackend struct {
	gs    *replication.Groups
	token string
	rt    http.RoundTripper // nil: the default
	tls   bool

	mu      sync.Mutex
	clients map[string]*client.Client // by leader HTTP address
}

func newBeanstalkdBackend(gs *replication.Groups, token string, rt http.RoundTripper, tls bool) *beanstalkdBackend {
	return &beanstalkdBackend{gs: gs, token: token, rt: rt, tls: tls, clients: map[string]*client.Client{}}
}

// route returns group g's node when it leads the group, else a client of
// the group's leader.
func (b *beanstalkdBackend) route(g int) (*replication.Node, *client.Client, error) {
	n := b.gs.Node(g)
	addr, isLeader, known := n.LeaderHTTP()
	switch {
	case isLeader:
		return n, nil, nil
	case !known || addr == "":
		return nil, nil, fmt.Errorf("%w: %w: group %d has no leader", beanstalkd.ErrNotSent, model.ErrUnavailable, g)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	cl, ok := b.clients[addr]
	if !ok {
		scheme := "http://"
		if b.tls {
			scheme = "https://"
		}
		opts := []client.Option{client.WithToken(b.token)}
		if b.rt != nil {
			opts = append(opts, client.WithHTTPClient(&http.Client{Transport: b.rt}))
		}
		cl = client.New(scheme+addr, opts...)
		b.clients[addr] = cl
	}
	return nil, cl, nil
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

// topicGroup is the group of topic.
func (b *beanstalkdBackend) topicGroup(topic string) int { return model.GroupOf(topic, b.gs.Count()) }

// remoteErr maps an HTTP answer of the leader to the wheel's errors.
func remoteErr(err error) error {
	var e *client.Error
	if !errors.As(err, &e) {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			// The leader's address refused the connection: it has gone.
			return fmt.Errorf("%w: %w: forward to the leader: %w", beanstalkd.ErrNotSent, model.ErrUnavailable, err)
		}
		return fmt.Errorf("%w: forward to the leader: %w", model.ErrUnavailable, err)
	}
	for _, m := range []struct {
		status int
		err    error
	}{{http.StatusNotFound, model.ErrNotFound}, {http.StatusConflict, model.ErrConflict}, {http.StatusBadRequest, model.ErrInvalid},
		{http.StatusRequestEntityTooLarge, model.ErrTooLarge}, {http.StatusTooManyRequests, model.ErrOverloaded},
		{http.StatusServiceUnavailable, model.ErrUnavailable}} {
		if e.Status == m.status {
			return fmt.Errorf("%w: %w", m.err, err)
		}
	}
	return err
}

func (b *beanstalkdBackend) Put(ctx context.Context, m command.NewMessage) (model.ID, error) {
	for attempt := 0; ; attempt++ {
		n, cl, err := b.route(b.topicGroup(m.Topic))
		if err != nil {
			return model.ID{}, err
		}
		if n != nil {
			res, err := n.Enqueue(ctx, []command.NewMessage{m})
			// A proposal refused before the log was never made; one whose
			// leadership was lost after its append may still commit.
			if errors.Is(err, model.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) {
				if attempt == 0 {
					continue // Raft refused it before the log: the leader moved
				}
				err = fmt.Errorf("%w: %w", beanstalkd.ErrNotSent, err)
			}
			if err != nil {
				return model.ID{}, err
			}
			return res[0].ID, nil
		}
		res, err := cl.Enqueue(ctx, []api.Message{{Topic: m.Topic, Payload: api.BinaryBody(m.Body), Priority: m.Priority,
			DeliverAtMs: &m.DeliverAtMs, TTRMs: &m.TTRMs, MaxAttempts: &m.MaxAttempts}})
		if err != nil {
			return model.ID{}, remoteErr(err)
		}
		return model.ParseID(res[0].ID)
	}
}

func (b *beanstalkdBackend) Reserve(ctx context.Context, topic string, wait time.Duration) (model.Delivery, bool, error) {
	n, cl, err := b.route(b.topicGroup(topic))
	if err != nil {
		return model.Delivery{}, false, err
	}
	if n != nil {
		ds, err := n.Reserve(ctx, topic, 1, wait, 0)
		if err != nil || len(ds) == 0 {
			return model.Delivery{}, false, err
		}
		return ds[0], true, nil
	}
	ds, err := cl.Reserve(ctx, topic, api.ReserveRequest{WaitMs: wait.Milliseconds()})
	if err != nil || len(ds) == 0 {
		if err != nil {
			err = remoteErr(err)
		}
		return model.Delivery{}, false, err
	}
	return deliveryOf(ds[0])
}

// deliveryOf converts a delivery of the HTTP API.
func deliveryOf(d api.Delivery) (model.Delivery, bool, error) {
	r, err := model.ParseReceipt(d.Receipt)
	if err != nil {
		return model.Delivery{}, false, err
	}
	body, err := d.Payload.Bytes()
	if err != nil {
		return model.Delivery{}, false, err
	}
	m := model.Message{ID: r.ID, Topic: d.Topic, Key: d.Key, Body: body, Headers: d.Headers, Priority: d.Priority,
		DeliverAtMs: d.DeliverAtMs, Attempts: d.Attempt, Receipt: r.Nonce, LeaseExpiresMs: d.LeaseExpiresMs}
	return model.Delivery{Message: m, Attempt: d.Attempt, Receipt: r}, true, nil
}

// settle runs a call on a receipt: on the group's node when it leads,
// else over HTTP through remote (nil: no HTTP call does it).
func (b *beanstalkdBackend) settle(ctx context.Context, r model.Receipt, local func(*replication.Node) (command.Counted, error),
	remote func(*client.Client) (int, error)) (bool, error) {
	n, cl, err := b.route(r.ID.Group())
	switch {
	case err != nil:
		return false, err
	case n != nil:
		c, err := local(n)
		return c.Done == 1, err
	case remote == nil:
		return false, fmt.Errorf("the HTTP API cannot move a reserved message to the dead letters: bury needs a connection to the leader of group %d", r.ID.Group())
	}
	done, err := remote(cl)
	if err != nil {
		return false, remoteErr(err)
	}
	return done == 1, nil
}

func (b *beanstalkdBackend) Ack(ctx context.Context, r model.Receipt) (bool, error) {
	rs := []model.Receipt{r}
	return b.settle(ctx, r, func(n *replication.Node) (command.Counted, error) { return n.Ack(ctx, rs) },
		func(cl *client.Client) (int, error) {
			res, err := cl.Ack(ctx, []string{r.String()})
			return res.Acked, err
		})
}

func (b *beanstalkdBackend) Nack(ctx context.Context, r model.Receipt, delayMs int64) (bool, error) {
	rs := []model.Receipt{r}
	return b.settle(ctx, r, func(n *replication.Node) (command.Counted, error) { return n.Nack(ctx, rs, delayMs) },
		func(cl *client.Client) (int, error) {
			res, err := cl.Nack(ctx, []string{r.String()}, delayMs)
			return res.Nacked, err
		})
}

func (b *beanstalkdBackend) Touch(ctx context.Context, r model.Receipt) (bool, error) {
	rs := []model.Receipt{r}
	return b.settle(ctx, r, func(n *replication.Node) (command.Counted, error) { return n.Touch(ctx, rs) },
		func(cl *client.Client) (int, error) {
			res, err := cl.Touch(ctx, []string{r.String()})
			return res.Touched, err
		})
}

func (b *beanstalkdBackend) Bury(ctx context.Context, r model.Receipt) (bool, error) {
	rs := []model.Receipt{r}
	return b.settle(ctx, r, func(n *replication.Node) (command.Counted, error) { return n.DeadLetter(ctx, rs) }, nil)
}

func (b *beanstalkdBackend) Get(ctx context.Context, id model.ID) (wheel.View, error) {
	if id.Group() >= b.gs.Count() {
		return wheel.View{}, fmt.Errorf("%w: message %s", model.ErrNotFound, id)
	}
	return b.gs.Node(id.Group()).Get(ctx, id)
}

// write runs a write on id's group: local on its node when it leads,
// else remote over HTTP.
func (b *beanstalkdBackend) write(g int, local func(*replication.Node) error, remote func(*client.Client) error) error {
	if g >= b.gs.Count() {
		return model.ErrNotFound
	}
	n, cl, err := b.route(g)
	switch {
	case err != nil:
		return err
	case n != nil:
		return local(n)
	}
	if err := remote(cl); err != nil {
		return remoteErr(err)
	}
	return nil
}

func (b *beanstalkdBackend) Cancel(ctx context.Context, id model.ID) error {
	return b.write(id.Group(), func(n *replication.Node) error {
		_, err := n.Cancel(ctx, command.Cancel{ID: id})
		return err
	}, func(cl *client.Client) error {
		_, err := cl.Cancel(ctx, id.String())
		return err
	})
}

func (b *beanstalkdBackend) Reschedule(ctx context.Context, id model.ID, deliverAtMs int64) error {
	return b.write(id.Group(), func(n *replication.Node) error {
		_, err := n.Reschedule(ctx, id, deliverAtMs)
		return err
	}, func(cl *client.Client) error {
		_, err := cl.Reschedule(ctx, id.String(), api.RescheduleRequest{DeliverAtMs: &deliverAtMs})
		return err
	})
}

func (b *beanstalkdBackend) Redrive(ctx context.Context, topic string, ids []model.ID) (int, error) {
	moved := 0
	err := b.write(b.topicGroup(topic), func(n *replication.Node) (err error) {
		moved, err = n.Redrive(ctx, topic, ids)
		return err
	}, func(cl *client.Client) (err error) {
		list := make([]string, len(ids))
		for i, id := range ids {
			list[i] = id.String()
		}
		moved, err = cl.Redrive(ctx, topic, list)
		return err
	})
	return moved, err
}

func (b *beanstalkdBackend) Dead(ctx context.Context, topic string, limit int) ([]wheel.View, error) {
	return b.gs.Node(b.topicGroup(topic)).Dead(ctx, topic, limit)
}

func (b *beanstalkdBackend) Ready(_ context.Context, topic string, limit int) ([]wheel.View, error) {
	return b.gs.Node(b.topicGroup(topic)).Store().Ready(topic, limit, nil)
}

func (b *beanstalkdBackend) Topics(ctx context.Context) ([]wheel.TopicCounts, error) {
	groups := make([]service.Backend, b.gs.Count())
	for g := range groups {
		groups[g] = b.gs.Node(g)
	}
	return service.NewRouter(groups, nil).Topics(ctx)
}

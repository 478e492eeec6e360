package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// dwTarget is a delaywheel cluster: spawned, or reached at given addresses.
type dwTarget struct {
	name    string
	topics  []string     // the run's topics; enqueue batch b goes to topics[b % len]
	batches atomic.Int64 // enqueue batches sent, which picks each one's topic
	// groupNodes, on a cluster of several Raft groups, is the index of the
	// node leading each group as last learned; nil otherwise. An enqueue
	// goes first to its topic's group leader, so no node forwards it.
	groupNodes atomic.Pointer[[]int32]
	// consumers counts the consumers made, each taking the next topic.
	consumers atomic.Int32
	bases     []string // http://host:port
	addrs     []string // host:port, as the cluster view names nodes
	clients   []*client.Client
	grpcs     []*client.GRPC // over gRPC when set: one a node, trying it first
	hc        *http.Client
	token     string
	leader    atomic.Int32 // index of the node believed to lead
	cluster   *dwCluster   // nil when the harness did not spawn it
	pids      []int        // of a cluster not spawned: its servers' pids, if given
	logger    *slog.Logger

	reserveMax  int
	maxInflight int // a stream's window; 0: the server's default
	waitMs      int64
	ttrMs       *int64
	// maxAttempts is the messages' max_attempts (nil: the server's default).
	maxAttempts *int32
	consume     string // ConsumeReserve, ConsumeStream or ConsumeWebhook
	// The webhook receiver (ConsumeWebhook), started by the first consumer.
	webhookFailRate float64
	webhookHang     bool
	hookOnce        sync.Once
	hook            *receiver
	hookErr         error
	retries         atomic.Int64 // enqueue calls retried (429, 503, connection errors)
}

// newDelaywheelTarget makes a target of the nodes at addrs; cluster is the
// spawned cluster behind them, or nil.
func newDelaywheelTarget(ctx context.Context, cfg *Config, addrs []string, cluster *dwCluster, token string) *dwTarget {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: cfg.Producers + cfg.Consumers + 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		WriteBufferSize:     client.WriteBufferSize,
	}
	t := &dwTarget{
		name:        TargetDelaywheel,
		topics:      []string{"bench." + cfg.runID},
		hc:          &http.Client{Transport: tr},
		token:       token,
		cluster:     cluster,
		pids:        cfg.ServerPIDs,
		logger:      cfg.logger,
		reserveMax:  cfg.ReserveMax,
		waitMs:      cfg.Wait.Milliseconds(),
		consume:     cfg.Consume,
		maxInflight: cfg.MaxInflight,

		webhookFailRate: cfg.WebhookFailRate,
		webhookHang:     cfg.WebhookHang,
	}
	if cfg.MaxAttempts > 0 {
		t.maxAttempts = api.Ptr(int32(cfg.MaxAttempts))
	}
	if cfg.Topics > 1 {
		t.topics = t.topics[:0]
		for k := range cfg.Topics {
			t.topics = append(t.topics, fmt.Sprintf("bench.%s.%d", cfg.runID, k))
		}
		t.name += fmt.Sprintf(", %d topics", cfg.Topics)
	}
	if cfg.Groups > 1 {
		t.name += fmt.Sprintf(", %d groups", cfg.Groups)
	}
	if len(addrs) > 1 {
		t.name = fmt.Sprintf("%s (%d nodes)", TargetDelaywheel, len(addrs))
	}
	if cfg.Consume != ConsumeReserve {
		t.name += ", " + cfg.Consume
	}
	opts := []client.Option{client.WithToken(token), client.WithHTTPClient(t.hc)}
	if cfg.Proto == ProtoJSON {
		opts = append(opts, client.WithJSON())
		t.name += " JSON"
	}
	for _, a := range addrs {
		base := strings.TrimRight(a, "/")
		if !strings.Contains(base, "://") {
			base = "http://" + base
		}
		_, hostport, _ := strings.Cut(base, "://")
		t.bases = append(t.bases, base)
		t.addrs = append(t.addrs, hostport)
		t.clients = append(t.clients, client.New(base, opts...))
	}
	if cfg.Proto == ProtoGRPC && cluster != nil {
		var gaddrs []string
		for _, nd := range cluster.nodes {
			gaddrs = append(gaddrs, nd.grpcAddr)
		}
		// Client i tries node i first, then the others in turn: a call
		// sent to the node leading its topic's group (nodeFor) is answered
		// there, and a NOT_LEADER moves the client on by itself.
		for i := range gaddrs {
			rotated := append(slices.Clone(gaddrs[i:]), gaddrs[:i]...)
			g, err := client.NewGRPC("grpc://"+strings.Join(rotated, ","), client.WithGRPCToken(token))
			if err != nil {
				t.logger.Error("gRPC client; over HTTP instead", "err", err)
				t.closeGRPC()
				break
			}
			t.grpcs = append(t.grpcs, g)
		}
		if t.grpcs != nil {
			t.name += " gRPC"
		}
	}
	t.refreshLeader(ctx)
	t.refreshGroups(ctx)
	return t
}

func (t *dwTarget) Name() string { return t.name }

func (t *dwTarget) EnqueueRateHint() float64 {
	if len(t.addrs) > 1 {
		return 30000
	}
	return 40000
}

func (t *dwTarget) Enqueue(ctx context.Context, msgs []msg) error {
	// One topic a batch: on a cluster of several groups the batch is then
	// one group's, applied by that group's leader without a split.
	topic := t.topics[int(t.batches.Add(1)-1)%len(t.topics)]
	req := make([]api.Message, len(msgs))
	for i, m := range msgs {
		due := m.DeliverAtMs
		req[i] = api.Message{Topic: topic, Payload: api.TextBody(m.Body), DeliverAtMs: &due, MaxAttempts: t.maxAttempts}
	}
	err := t.retry(ctx, topic, func(i int32) error {
		enqueue := t.clients[i].Enqueue
		if t.grpcs != nil {
			enqueue = t.grpcs[i].Enqueue
		}
		res, err := enqueue(ctx, req)
		if err == nil && len(res) != len(req) {
			return fmt.Errorf("enqueue answered %d results for %d messages", len(res), len(req))
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("enqueue %d messages: %w", len(msgs), err)
	}
	return nil
}

// nextTopic is the topic of the next consumer made: each topic in turn,
// so that with at least as many consumers as topics every topic has one.
func (t *dwTarget) nextTopic() string {
	return t.topics[int(t.consumers.Add(1)-1)%len(t.topics)]
}

func (t *dwTarget) NewConsumer(ctx context.Context) (consumer, error) {
	switch t.consume {
	case ConsumeStream:
		return newDWStreamConsumer(ctx, t), nil
	case ConsumeWebhook:
		r, err := t.hookReceiver(ctx)
		if err != nil {
			return nil, err
		}
		return webhookConsumer{r: r}, nil
	}
	return newDWConsumer(ctx, t), nil
}

func (t *dwTarget) Pending(ctx context.Context) (int64, error) {
	tc, err := t.counts(ctx)
	if err != nil {
		return -1, err
	}
	return tc.Delayed + tc.Ready + tc.Reserved, nil
}

// counts are the target topics' counts by state, summed, as the leader
// has them.
func (t *dwTarget) counts(ctx context.Context) (api.TopicCounts, error) {
	var topics []api.TopicCounts
	err := t.call(ctx, func(c *client.Client) error {
		var err error
		topics, err = c.Topics(ctx)
		return err
	})
	if err != nil {
		return api.TopicCounts{}, fmt.Errorf("topics: %w", err)
	}
	sum := api.TopicCounts{Topic: t.topics[0]}
	for _, tc := range topics {
		if slices.Contains(t.topics, tc.Topic) {
			sum.Delayed += tc.Delayed
			sum.Ready += tc.Ready
			sum.Reserved += tc.Reserved
			sum.Dead += tc.Dead
		}
	}
	return sum, nil
}

func (t *dwTarget) Restart(ctx context.Context) (restartTimes, error) {
	if t.cluster == nil {
		return restartTimes{}, errNotSpawned
	}
	var rt restartTimes
	var err error
	if rt.Stop, err = t.cluster.stopAll(); err != nil {
		return rt, fmt.Errorf("restart: %w", err)
	}
	t0 := time.Now()
	if err := t.cluster.startAll(ctx); err != nil {
		return rt, fmt.Errorf("restart: %w", err)
	}
	rt.Ready = time.Since(t0)
	t.refreshLeader(ctx)
	return rt, nil
}

// closeGRPC closes the gRPC clients, if any.
func (t *dwTarget) closeGRPC() {
	for _, g := range t.grpcs {
		g.Close()
	}
	t.grpcs = nil
}

func (t *dwTarget) Close() error {
	if t.hook != nil {
		_ = t.hook.close()
	}
	t.hc.CloseIdleConnections()
	t.closeGRPC()
	if t.cluster != nil {
		return t.cluster.Close()
	}
	return nil
}

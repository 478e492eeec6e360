package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/wheel/model"
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

// refreshLeader asks the nodes who leads and points the target at it.
func (t *dwTarget) refreshLeader(ctx context.Context) {
	n := len(t.clients)
	start := int(t.leader.Load())
	for k := range n {
		i := (start + k) % n
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := t.clients[i].ClusterLocal(cctx)
		cancel()
		if err != nil || info.Leader == "" {
			continue
		}
		for _, ns := range info.Nodes {
			if ns.ID != info.Leader {
				continue
			}
			for j, a := range t.addrs {
				if a == ns.HTTPAddr {
					t.leader.Store(int32(j))
					return
				}
			}
		}
		return // a leader this target was not given the address of: keep going through i
	}
}

// refreshGroups learns which node leads each Raft group, when the run
// spreads over topics and the cluster has several groups. The nodes are
// matched to the target's addresses by HTTP address or, when the cluster
// knows them by other names (containers), by position: the i-th address
// for the i-th node in id order.
func (t *dwTarget) refreshGroups(ctx context.Context) {
	t.groupNodes.Store(nil)
	if len(t.topics) < 2 || len(t.clients) < 2 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := t.clients[t.leader.Load()].Cluster(cctx)
	if err != nil || len(info.Groups) < 2 {
		return
	}
	index := map[string]int32{}
	for _, ns := range info.Nodes {
		if j := slices.Index(t.addrs, ns.HTTPAddr); j >= 0 {
			index[ns.ID] = int32(j)
		}
	}
	if len(index) < len(info.Nodes) && len(info.Nodes) == len(t.addrs) {
		ids := make([]string, 0, len(info.Nodes))
		for _, ns := range info.Nodes {
			ids = append(ids, ns.ID)
		}
		slices.Sort(ids)
		for j, id := range ids {
			index[id] = int32(j)
		}
	}
	leaders := make([]int32, len(info.Groups))
	for _, g := range info.Groups {
		i, ok := index[g.Leader]
		if !ok || g.Group < 0 || g.Group >= len(leaders) {
			return
		}
		leaders[g.Group] = i
	}
	t.groupNodes.Store(&leaders)
}

// failover moves the target off node i after a failed call.
func (t *dwTarget) failover(ctx context.Context, i int32) {
	if len(t.clients) == 1 {
		return
	}
	if t.leader.CompareAndSwap(i, (i+1)%int32(len(t.clients))) {
		t.refreshLeader(ctx)
	}
	if t.groupNodes.Load() != nil {
		t.refreshGroups(ctx)
	}
}

// retryable reports whether a failed call may succeed if repeated, and how
// long to wait first; moveOn says the node itself failed.
func retryable(err error, attempt int) (wait time.Duration, moveOn, ok bool) {
	backoff := min(time.Duration(attempt+1)*20*time.Millisecond, 500*time.Millisecond)
	var ce *client.Error
	if !errors.As(err, &ce) {
		return backoff, true, true // the connection failed
	}
	switch ce.Status {
	case http.StatusTooManyRequests:
		return max(ce.RetryAfter, backoff), false, true
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return min(max(ce.RetryAfter, backoff), time.Second), true, true
	}
	return 0, false, false
}

// retryFor is how long a call keeps being retried.
const retryFor = time.Minute

// call runs fn against the believed leader, retrying on another node or
// after back-pressure until it succeeds, fails for good or retryFor passes.
func (t *dwTarget) call(ctx context.Context, fn func(*client.Client) error) error {
	return t.callTopic(ctx, "", fn)
}

// callTopic is call for a request about topic: its first try goes to the
// node leading the topic's group (nodeFor).
func (t *dwTarget) callTopic(ctx context.Context, topic string, fn func(*client.Client) error) error {
	return t.retry(ctx, topic, func(i int32) error { return fn(t.clients[i]) })
}

// nodeFor is the node believed to lead topic's group: on a cluster of
// several groups the one refreshGroups learned, otherwise (or for no
// topic) the node believed to lead.
func (t *dwTarget) nodeFor(topic string) int32 {
	if g := t.groupNodes.Load(); g != nil && topic != "" {
		return (*g)[model.GroupOf(topic, len(*g))]
	}
	return t.leader.Load()
}

// retry runs fn with the index of the node believed to lead topic's group
// first, then of the believed leader, retrying as call does.
func (t *dwTarget) retry(ctx context.Context, topic string, fn func(leader int32) error) error {
	deadline := time.Now().Add(retryFor)
	for attempt := 0; ; attempt++ {
		i := t.leader.Load()
		if attempt == 0 {
			i = t.nodeFor(topic)
		}
		err := fn(i)
		if err == nil || ctx.Err() != nil {
			return err
		}
		wait, moveOn, ok := retryable(err, attempt)
		if !ok || time.Now().Add(wait).After(deadline) {
			return err
		}
		t.retries.Add(1)
		if moveOn {
			t.failover(ctx, i)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
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

// leaderNode is the spawned node believed to lead.
func (t *dwTarget) leaderNode() *dwNode {
	i := int(t.leader.Load())
	for _, nd := range t.cluster.nodes {
		if nd.httpAddr == t.addrs[i] {
			return nd
		}
	}
	return t.cluster.nodes[0]
}

func (t *dwTarget) Resources(ctx context.Context) (resources, error) {
	if t.cluster == nil {
		rss, err := t.scrapeRSS(ctx)
		return resources{RSSBytes: rss, RSSAnonBytes: -1, RSSFileBytes: -1, DiskBytes: -1}, err
	}
	t.refreshLeader(ctx)
	nd := t.leaderNode()
	return footprint(nd.proc, nd.dataDir)
}

// scrapeRSS reads process_resident_memory_bytes from the leader's /metrics.
func (t *dwTarget) scrapeRSS(ctx context.Context) (int64, error) {
	v, err := t.scrapeMetric(ctx, "process_resident_memory_bytes")
	return int64(v), err
}

// scrapeMetric reads an unlabelled metric from the leader's /metrics.
func (t *dwTarget) scrapeMetric(ctx context.Context, name string) (float64, error) {
	i := t.leader.Load()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.bases[i]+"/metrics", nil)
	if err != nil {
		return -1, fmt.Errorf("metrics: %w", err)
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		return -1, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return -1, fmt.Errorf("metrics: %s %q: %w", name, v, err)
			}
			return f, nil
		}
	}
	if err := sc.Err(); err != nil {
		return -1, fmt.Errorf("metrics: %w", err)
	}
	return -1, fmt.Errorf("metrics: no %s", name)
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

// dwConsumer long-polls the leader and acknowledges each batch in the
// background, as a consumer that acks after processing does: the next
// long-poll is not held up by the previous batch's ack. Receipts that pile
// up while an ack is in flight go out together in the next. With
// ConsumeReserveInline it acks each batch itself and waits for the answer
// before its next reserve, as the plain consumer loop does.
type dwConsumer struct {
	t      *dwTarget
	topic  string // the one it reserves from
	acks   chan []string
	done   chan struct{}
	ackErr atomic.Pointer[error] // the latest failed ack, reported by Next
	seqOf  seqFunc
}

// seqFunc, when set, names a delivery's sequence number instead of its
// body (decodeSeq).
type seqFunc func(api.Delivery) int

// of returns the sequence number of d.
func (f seqFunc) of(d api.Delivery) int {
	if f != nil {
		return f(d)
	}
	return decodeSeq(bodyOf(d))
}

func newDWConsumer(ctx context.Context, t *dwTarget) *dwConsumer {
	c := &dwConsumer{t: t, topic: t.nextTopic(), acks: make(chan []string, 1024), done: make(chan struct{})}
	go c.ackLoop(context.WithoutCancel(ctx))
	return c
}

func (c *dwConsumer) ackLoop(ctx context.Context) {
	defer close(c.done)
	for receipts := range c.acks {
	more:
		for len(receipts) < 10_000 {
			select {
			case r, ok := <-c.acks:
				if !ok {
					break more
				}
				receipts = append(receipts, r...)
			default:
				break more
			}
		}
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.t.callTopic(actx, c.topic, func(cl *client.Client) error {
			_, err := cl.Ack(actx, receipts)
			return err
		})
		cancel()
		if err != nil {
			err = fmt.Errorf("ack %d receipts: %w", len(receipts), err)
			c.ackErr.Store(&err)
		}
	}
}

func (c *dwConsumer) Next(ctx context.Context) (batch, error) {
	t := c.t
	i := t.nodeFor(c.topic)
	req := api.ReserveRequest{Max: &t.reserveMax, WaitMs: t.waitMs, TTRMs: t.ttrMs}
	rctx, cancel := context.WithTimeout(ctx, time.Duration(t.waitMs)*time.Millisecond+10*time.Second)
	ds, err := t.clients[i].Reserve(rctx, c.topic, req)
	cancel()
	at := time.Now()
	if err != nil {
		if ctx.Err() == nil {
			t.failover(ctx, i)
		}
		return batch{}, fmt.Errorf("reserve: %w", err)
	}
	b := batch{At: at, Seqs: make([]int, len(ds))}
	receipts := make([]string, len(ds))
	for k, d := range ds {
		b.Seqs[k] = c.seqOf.of(d)
		receipts[k] = d.Receipt
	}
	if len(receipts) > 0 && t.consume == ConsumeReserveInline {
		err := t.callTopic(ctx, c.topic, func(cl *client.Client) error {
			_, err := cl.Ack(ctx, receipts)
			return err
		})
		if err != nil {
			return b, fmt.Errorf("ack %d receipts: %w", len(receipts), err)
		}
	} else if len(receipts) > 0 {
		c.acks <- receipts
	}
	if p := c.ackErr.Swap(nil); p != nil {
		return b, *p
	}
	return b, nil
}

// Close sends the acks still queued and waits for them.
func (c *dwConsumer) Close() error {
	close(c.acks)
	<-c.done
	if p := c.ackErr.Swap(nil); p != nil {
		return *p
	}
	return nil
}

// serverCPU adds up the CPU time of the spawned nodes, and gives the
// leader's apart; of a cluster reached by address, the CPU time of the
// pids it was given (the leader's is not known: -1).
func (t *dwTarget) serverCPU() (all, leader time.Duration, err error) {
	if t.cluster == nil {
		if len(t.pids) == 0 {
			return 0, 0, errNotSpawned
		}
		all, err := procsCPU(t.pids)
		return all, -1, err
	}
	ld := t.leaderNode()
	for _, nd := range t.cluster.nodes {
		d, err := nd.proc.CPU()
		if err != nil {
			return 0, 0, err
		}
		all += d
		if nd == ld {
			leader = d
		}
	}
	return all, leader, nil
}

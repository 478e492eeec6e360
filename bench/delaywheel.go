package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// dwNode is one delaywheel node the harness spawned.
type dwNode struct {
	id       string
	httpAddr string
	raftAddr string
	grpcAddr string
	dataDir  string
	proc     *proc
}

// dwCluster is a delaywheel cluster the harness spawned from the real binary.
type dwCluster struct {
	nodes  []*dwNode
	token  string
	logger *slog.Logger
}

// readyTimeout bounds how long a spawned server may take to become ready.
const readyTimeout = 5 * time.Minute

// spawnDelaywheel starts n nodes (1 or 3) of the binary bin in subdirectories
// of dir on free loopback ports and waits until the cluster is ready. The
// nodes read the bearer token from tokenFile; the harness presents token.
func spawnDelaywheel(ctx context.Context, logger *slog.Logger, dir, bin string, n int, tokenFile, token string, extra []string) (*dwCluster, error) {
	ports, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	c := &dwCluster{logger: logger, token: token}
	var members []string
	for i := range n {
		nd := &dwNode{
			id:       "n" + strconv.Itoa(i+1),
			httpAddr: "127.0.0.1:" + strconv.Itoa(ports[3*i]),
			raftAddr: "127.0.0.1:" + strconv.Itoa(ports[3*i+1]),
			grpcAddr: "127.0.0.1:" + strconv.Itoa(ports[3*i+2]),
		}
		nd.dataDir = filepath.Join(dir, nd.id)
		if err := os.MkdirAll(nd.dataDir, 0o755); err != nil {
			return nil, fmt.Errorf("spawn delaywheel: %w", err)
		}
		members = append(members, nd.id+"="+nd.raftAddr)
		c.nodes = append(c.nodes, nd)
	}
	for _, nd := range c.nodes {
		args := []string{"server", "--node-id", nd.id, "--data-dir", filepath.Join(nd.dataDir, "data"),
			"--http-addr", nd.httpAddr, "--raft-addr", nd.raftAddr, "--grpc-addr", nd.grpcAddr}
		if n > 1 {
			args = append(args, "--initial-cluster", strings.Join(members, ","))
		}
		if tokenFile != "" {
			abs, err := filepath.Abs(tokenFile)
			if err != nil {
				return nil, fmt.Errorf("token file: %w", err)
			}
			args = append(args, "--auth-token-file", abs)
		}
		args = append(args, extra...)
		nd.proc = newProc(logger, "delaywheel-"+nd.id, nd.dataDir, bin, args...)
	}
	if err := c.startAll(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// startAll starts every node and waits until the cluster is ready.
func (c *dwCluster) startAll(ctx context.Context) error {
	for _, nd := range c.nodes {
		if err := nd.proc.Start(); err != nil {
			return err
		}
	}
	return c.waitReady(ctx)
}

// waitReady waits until every node answers /readyz and the cluster view
// knows a leader and every node's HTTP address (needed for forwarding).
func (c *dwCluster) waitReady(ctx context.Context) error {
	for _, nd := range c.nodes {
		cl := client.New(nd.httpAddr, client.WithToken(c.token))
		if err := waitReady(ctx, nd.proc, readyTimeout, cl.Readyz); err != nil {
			return err
		}
	}
	cl := client.New(c.nodes[0].httpAddr, client.WithToken(c.token))
	return waitReady(ctx, c.nodes[0].proc, readyTimeout, func(ctx context.Context) error {
		info, err := cl.Cluster(ctx)
		if err != nil {
			return err
		}
		if info.Leader == "" {
			return errors.New("no leader yet")
		}
		for _, ns := range info.Nodes {
			if ns.HTTPAddr == "" {
				return fmt.Errorf("node %s has not announced its HTTP address", ns.ID)
			}
		}
		if len(info.Nodes) != len(c.nodes) {
			return fmt.Errorf("%d of %d nodes in the configuration", len(info.Nodes), len(c.nodes))
		}
		return nil
	})
}

// stopAll stops every node with SIGTERM at once and returns how long the
// slowest took to exit.
func (c *dwCluster) stopAll() (time.Duration, error) {
	var wg sync.WaitGroup
	took := make([]time.Duration, len(c.nodes))
	errs := make([]error, len(c.nodes))
	for i, nd := range c.nodes {
		wg.Go(func() { took[i], errs[i] = nd.proc.Stop(time.Minute) })
	}
	wg.Wait()
	var worst time.Duration
	for _, d := range took {
		worst = max(worst, d)
	}
	return worst, errors.Join(errs...)
}

// Close stops every node.
func (c *dwCluster) Close() error {
	_, err := c.stopAll()
	return err
}

// addrs are the nodes' HTTP addresses.
func (c *dwCluster) addrs() []string {
	out := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		out[i] = nd.httpAddr
	}
	return out
}

// dwTarget is a delaywheel cluster: spawned, or reached at given addresses.
type dwTarget struct {
	name    string
	topic   string
	bases   []string // http://host:port
	addrs   []string // host:port, as the cluster view names nodes
	clients []*client.Client
	grpc    *client.GRPC // enqueues over gRPC when set
	hc      *http.Client
	token   string
	leader  atomic.Int32 // index of the node believed to lead
	cluster *dwCluster   // nil when the harness did not spawn it
	logger  *slog.Logger

	reserveMax int
	waitMs     int64
	ttrMs      *int64
	consume    string // ConsumeReserve, ConsumeStream or ConsumeWebhook
	// The webhook receiver (ConsumeWebhook), started by the first consumer.
	webhookFailRate float64
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
		name:       TargetDelaywheel,
		topic:      "bench." + cfg.runID,
		hc:         &http.Client{Transport: tr},
		token:      token,
		cluster:    cluster,
		logger:     cfg.logger,
		reserveMax: cfg.ReserveMax,
		waitMs:     cfg.Wait.Milliseconds(),
		consume:    cfg.Consume,

		webhookFailRate: cfg.WebhookFailRate,
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
		g, err := client.NewGRPC("grpc://"+strings.Join(gaddrs, ","), client.WithGRPCToken(token))
		if err != nil {
			t.logger.Error("gRPC client; enqueueing over HTTP", "err", err)
		} else {
			t.grpc = g
			t.name += " gRPC"
		}
	}
	t.refreshLeader(ctx)
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

// failover moves the target off node i after a failed call.
func (t *dwTarget) failover(ctx context.Context, i int32) {
	if len(t.clients) == 1 {
		return
	}
	if t.leader.CompareAndSwap(i, (i+1)%int32(len(t.clients))) {
		t.refreshLeader(ctx)
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
	return t.retry(ctx, func(i int32) error { return fn(t.clients[i]) })
}

// retry runs fn with the index of the believed leader, retrying as call does.
func (t *dwTarget) retry(ctx context.Context, fn func(leader int32) error) error {
	deadline := time.Now().Add(retryFor)
	for attempt := 0; ; attempt++ {
		i := t.leader.Load()
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
	req := make([]api.Message, len(msgs))
	for i, m := range msgs {
		due := m.DeliverAtMs
		req[i] = api.Message{Topic: t.topic, Payload: api.TextBody(m.Body), DeliverAtMs: &due}
	}
	err := t.retry(ctx, func(i int32) error {
		enqueue := t.clients[i].Enqueue
		if t.grpc != nil {
			enqueue = t.grpc.Enqueue // it follows the leader itself
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
	var topics []api.TopicCounts
	err := t.call(ctx, func(c *client.Client) error {
		var err error
		topics, err = c.Topics(ctx)
		return err
	})
	if err != nil {
		return -1, fmt.Errorf("topics: %w", err)
	}
	for _, tc := range topics {
		if tc.Topic == t.topic {
			return tc.Delayed + tc.Ready + tc.Reserved, nil
		}
	}
	return 0, nil
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
		if v, ok := strings.CutPrefix(sc.Text(), "process_resident_memory_bytes "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return -1, fmt.Errorf("metrics: process_resident_memory_bytes %q: %w", v, err)
			}
			return int64(f), nil
		}
	}
	if err := sc.Err(); err != nil {
		return -1, fmt.Errorf("metrics: %w", err)
	}
	return -1, errors.New("metrics: no process_resident_memory_bytes")
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

func (t *dwTarget) Close() error {
	if t.hook != nil {
		_ = t.hook.close()
	}
	t.hc.CloseIdleConnections()
	if t.grpc != nil {
		t.grpc.Close()
	}
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
	acks   chan []string
	done   chan struct{}
	ackErr atomic.Pointer[error] // the latest failed ack, reported by Next
	// seqOf, when set, names a delivery's sequence number instead of its
	// body (decodeSeq).
	seqOf func(api.Delivery) int
}

func newDWConsumer(ctx context.Context, t *dwTarget) *dwConsumer {
	c := &dwConsumer{t: t, acks: make(chan []string, 1024), done: make(chan struct{})}
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
		err := c.t.call(actx, func(cl *client.Client) error {
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
	i := t.leader.Load()
	req := api.ReserveRequest{Max: &t.reserveMax, WaitMs: t.waitMs, TTRMs: t.ttrMs}
	rctx, cancel := context.WithTimeout(ctx, time.Duration(t.waitMs)*time.Millisecond+10*time.Second)
	ds, err := t.clients[i].Reserve(rctx, t.topic, req)
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
		if c.seqOf != nil {
			b.Seqs[k] = c.seqOf(d)
		} else {
			b.Seqs[k] = decodeSeq(bodyOf(d))
		}
		receipts[k] = d.Receipt
	}
	if len(receipts) > 0 && t.consume == ConsumeReserveInline {
		err := t.call(ctx, func(cl *client.Client) error {
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

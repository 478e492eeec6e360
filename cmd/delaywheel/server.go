package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/raftlog"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// envs names the environment variable of a server flag: DELAYWHEEL_<FLAG>.
func envs(flag string) []string {
	return []string{"DELAYWHEEL_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

// Memory defaults. A node's memory must not grow with its backlog: it is
// the runtime and its heap, and the index's block cache and memtables.
const (
	defaultCacheBytes = 16 << 20
	// An idle node holds two memtables, the current one and a flushed one
	// Pebble keeps for reuse: a smaller memtable holds less memory at rest
	// and costs more flushes and compactions under writes.
	defaultMemTableBytes = 3 << 20
	defaultMemoryLimit   = 0
	// The collector's target, unless GOGC is set. Invariant: the live heap
	// is bounded by the load, never by the backlog, so a larger multiple of
	// it is a bounded cost; fewer collections mean fewer mark phases, each
	// of which takes a quarter of the processors and stalls allocating
	// goroutines, the hand-off path among them. The idle releaser hands
	// the difference back once the node goes quiet.
	defaultGCPercent = 400
)

// serverFlags are the server's flags; the node's tuning and the API's
// limits show replication.DefaultConfig's and transport.DefaultLimits'
// values as their defaults.
func serverFlags() []cli.Flag {
	def, lim := replication.DefaultConfig(), transport.DefaultLimits()
	return []cli.Flag{
		&cli.StringFlag{Name: "node-id", Value: "n1", Usage: "this node's id", EnvVars: envs("node-id")},
		&cli.StringFlag{Name: "data-dir", Value: "./data", Usage: "where segments, the index and the Raft log live", EnvVars: envs("data-dir")},
		&cli.StringFlag{Name: "http-addr", Value: "127.0.0.1:7070", Usage: "client API listen and advertised address", EnvVars: envs("http-addr")},
		&cli.StringFlag{Name: "grpc-addr", Value: "127.0.0.1:7072", Usage: `gRPC API listen address ("" or "off": none); same token, TLS and limits as HTTP`, EnvVars: envs("grpc-addr")},
		&cli.StringFlag{Name: "beanstalkd-addr", Usage: "serve beanstalkd's protocol on this address, e.g. 127.0.0.1:11300 (off when empty); it has no auth and no TLS: keep it private", EnvVars: envs("beanstalkd-addr")},
		&cli.StringFlag{Name: "raft-addr", Value: "127.0.0.1:7071", Usage: "Raft listen and advertised address", EnvVars: envs("raft-addr")},
		&cli.StringFlag{Name: "raft-advertise", Usage: "Raft address peers dial, when it differs from --raft-addr (NAT, proxies)", EnvVars: envs("raft-advertise")},
		&cli.StringFlag{Name: "initial-cluster", Usage: "members of a new cluster, `id=raftaddr,...`; every node gets the same list", EnvVars: envs("initial-cluster")},
		&cli.StringFlag{Name: "join", Usage: "HTTP address of any member: join that cluster as a voter", EnvVars: envs("join")},
		&cli.IntFlag{Name: "groups", Value: 1, Usage: "Raft groups every node runs over --raft-addr, topics spread over them (fixed when the cluster is created)", EnvVars: envs("groups")},
		&cli.StringSliceFlag{Name: "webhook-allow", Usage: "hosts, IP addresses or CIDRs webhooks may point to, comma-separated (default: any)", EnvVars: envs("webhook-allow")},
		&cli.StringFlag{Name: "auth-token-file", Usage: "file holding the bearer token every /v1 call must present", EnvVars: envs("auth-token-file")},
		&cli.StringFlag{Name: "tls-cert-file", Usage: "serve the client API over HTTPS with this PEM certificate", EnvVars: envs("tls-cert-file")},
		&cli.StringFlag{Name: "tls-key-file", Usage: "PEM key of --tls-cert-file", EnvVars: envs("tls-key-file")},
		&cli.StringFlag{Name: "tls-ca-file", Usage: "CA bundle to verify other nodes' HTTPS when forwarding (default: system roots)", EnvVars: envs("tls-ca-file")},
		&cli.StringFlag{Name: "raft-tls-cert-file", Usage: "mutual TLS between nodes: this node's PEM certificate", EnvVars: envs("raft-tls-cert-file")},
		&cli.StringFlag{Name: "raft-tls-key-file", Usage: "mutual TLS between nodes: this node's PEM key", EnvVars: envs("raft-tls-key-file")},
		&cli.StringFlag{Name: "raft-tls-ca-file", Usage: "mutual TLS between nodes: the CA every node's certificate chains to", EnvVars: envs("raft-tls-ca-file")},
		&cli.StringFlag{Name: "debug-addr", Usage: "serve Go's /debug/pprof profiles on this address (keep it private; off when empty)", EnvVars: envs("debug-addr")},
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: "log format: text or json", EnvVars: envs("log-format")},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "log level: debug, info, warn, error", EnvVars: envs("log-level")},
		&cli.DurationFlag{Name: "redelivery-backoff", Value: def.RedeliveryBackoff, Usage: "added to an expired lease before redelivery, times the attempt (capped at 1m)", EnvVars: envs("redelivery-backoff")},
		&cli.DurationFlag{Name: "expire-grace", Value: def.ExpireGrace, Usage: "how long after a second ends its slot expires to the ready queues", EnvVars: envs("expire-grace")},
		&cli.IntFlag{Name: "max-topics", Value: def.MaxTopics, Usage: "distinct topics the cluster accepts", EnvVars: envs("max-topics")},
		&cli.IntFlag{Name: "max-pending-applies", Value: def.MaxPendingApply, Usage: "proposals waiting for the log before writes answer 429", EnvVars: envs("max-pending-applies")},
		&cli.IntFlag{Name: "max-body-bytes", Value: lim.MaxBodyBytes, Usage: "largest message body in bytes", EnvVars: envs("max-body-bytes")},
		&cli.IntFlag{Name: "max-batch", Value: lim.MaxBatch, Usage: "most messages per enqueue (and receipts per ack)", EnvVars: envs("max-batch")},
		&cli.Int64Flag{Name: "max-request-bytes", Value: lim.MaxRequestBytes, Usage: "largest request body in bytes", EnvVars: envs("max-request-bytes")},
		&cli.DurationFlag{Name: "max-delay", Value: time.Duration(lim.MaxDelayMs) * time.Millisecond, Usage: "furthest a message may be scheduled ahead", EnvVars: envs("max-delay")},
		&cli.IntFlag{Name: "max-waiters", Value: lim.MaxWaiters, Usage: "concurrent long-polling reserves per node before 429", EnvVars: envs("max-waiters")},
		&cli.Uint64Flag{Name: "ready-max-lag", Value: def.ReadyMaxLag, Usage: "log entries a node that has caught up since it started may trail the leader's commit index by and still answer /readyz 200 (at least 1): entries in flight do not make it flap, a backlog does", EnvVars: envs("ready-max-lag")},
		&cli.Uint64Flag{Name: "snapshot-threshold", Value: def.SnapshotThreshold, Usage: "log entries between snapshots", EnvVars: envs("snapshot-threshold")},
		&cli.IntFlag{Name: "raft-segment-bytes", Value: def.LogSegmentBytes, Usage: "size of the Raft log's segment files (1 MiB to 1 GiB); one spare segment, written ahead, is kept besides the log's", EnvVars: envs("raft-segment-bytes")},
		&cli.Uint64Flag{Name: "trailing-logs", Value: def.TrailingLogs, Usage: "log entries kept after a snapshot for slow followers", EnvVars: envs("trailing-logs")},
		&cli.Int64Flag{Name: "cache-bytes", Value: defaultCacheBytes, Usage: "index block cache in bytes", EnvVars: envs("cache-bytes")},
		&cli.Uint64Flag{Name: "memtable-bytes", Value: defaultMemTableBytes, Usage: "index memtable size in bytes (up to four are held while flushes lag)", EnvVars: envs("memtable-bytes")},
		&cli.IntFlag{Name: "procs", Usage: "Go processors (GOMAXPROCS) (0: GOMAXPROCS when set, else the CPUs the process may use plus 2, so that a due message's wake-up never waits for a busy processor)", EnvVars: envs("procs")},
		&cli.Int64Flag{Name: "memory-limit", Value: defaultMemoryLimit, Usage: "soft limit in bytes of the Go heap and runtime: past it the collector runs more often (0: GOMEMLIMIT, or none)", EnvVars: envs("memory-limit")},
		&cli.IntFlag{Name: "gc-percent", Value: defaultGCPercent, Usage: "heap growth in percent between collections; when unset, GOGC wins if set (0: GOGC, or 100)", EnvVars: envs("gc-percent")},
		&cli.BoolFlag{Name: "compress-index", Usage: "compress the index's blocks with snappy: less disk where bodies due beyond the two-hour horizon compress well, more CPU on every write", EnvVars: envs("compress-index")},
		&cli.BoolFlag{Name: "release-idle-heap", Value: true, Usage: "once the node goes quiet after a burst of work, and now and then while it stays quiet, collect and hand the heap's free memory back to the kernel", EnvVars: envs("release-idle-heap")},
	}
}

// configFlags wraps the server flags so that each can also come from the
// --config file (YAML, TOML or JSON, keys named like the flags). Precedence:
// command line, then environment, then the file, then the default.
func configFlags() ([]cli.Flag, cli.BeforeFunc) {
	var out []cli.Flag
	for _, f := range serverFlags() {
		switch f := f.(type) {
		case *cli.StringFlag:
			out = append(out, altsrc.NewStringFlag(f))
		case *cli.IntFlag:
			out = append(out, altsrc.NewIntFlag(f))
		case *cli.Int64Flag:
			out = append(out, altsrc.NewInt64Flag(f))
		case *cli.Uint64Flag:
			out = append(out, altsrc.NewUint64Flag(f))
		case *cli.DurationFlag:
			out = append(out, altsrc.NewDurationFlag(f))
		case *cli.BoolFlag:
			out = append(out, altsrc.NewBoolFlag(f))
		default:
			out = append(out, f)
		}
	}
	out = append(out, &cli.StringFlag{Name: "config", Usage: "optional config file (.yaml, .toml or .json) whose keys are these flags' names", EnvVars: envs("config")})
	load := func(c *cli.Context) (altsrc.InputSourceContext, error) {
		path := c.String("config")
		switch strings.ToLower(filepath.Ext(path)) {
		case ".toml":
			return altsrc.NewTomlSourceFromFile(path)
		case ".json":
			return altsrc.NewJSONSourceFromFile(path)
		default:
			return altsrc.NewYamlSourceFromFile(path)
		}
	}
	before := func(c *cli.Context) error {
		if c.String("config") == "" {
			return nil
		}
		if err := altsrc.InitInputSourceWithContext(out, load)(c); err != nil {
			return fmt.Errorf("--config %s: %w", c.String("config"), err)
		}
		return nil
	}
	return out, before
}

func serverCommand() *cli.Command {
	flags, before := configFlags()
	return &cli.Command{
		Name:  "server",
		Usage: "run a node (with no flags: a single-node cluster in ./data on 127.0.0.1:7070)",
		Description: "Starts a delaywheel node. A node restarted with the same --data-dir keeps its state and\n" +
			"ignores --initial-cluster; --join then only adds back a node its cluster removed.\n" +
			"SIGTERM or SIGINT shut it down cleanly: leadership moves to a follower, long-polls\n" +
			"answer empty, the store is synced.",
		Flags:  flags,
		Before: before,
		Action: runServer,
	}
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// parseInitialCluster parses "n1=host:port,n2=host:port".
func parseInitialCluster(s string) ([]model.Member, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []model.Member
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("--initial-cluster: %q is not id=raftaddr", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("--initial-cluster: %s: %w", id, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("--initial-cluster: node id %q appears twice", id)
		}
		seen[id] = true
		out = append(out, model.Member{ID: id, RaftAddr: addr})
	}
	return out, nil
}

func readToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--auth-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("--auth-token-file %s is empty", path)
	}
	return tok, nil
}

func baseURL(addr string) string {
	if strings.Contains(addr, "://") {
		return strings.TrimRight(addr, "/")
	}
	return "http://" + addr
}

func runServer(c *cli.Context) error {
	logger, err := newLogger(c.App.ErrWriter, c.String("log-format"), c.String("log-level"))
	if err != nil {
		return err
	}
	members, err := parseInitialCluster(c.String("initial-cluster"))
	if err != nil {
		return err
	}
	if len(members) > 0 && c.String("join") != "" {
		return errors.New("--initial-cluster and --join exclude each other: start a new cluster, or join one")
	}
	id := c.String("node-id")
	if len(members) > 0 {
		found := false
		for _, m := range members {
			found = found || m.ID == id
		}
		if !found {
			return fmt.Errorf("--initial-cluster does not list this node (--node-id %s)", id)
		}
	}
	token, err := readToken(c.String("auth-token-file"))
	if err != nil {
		return err
	}
	dataDir, err := filepath.Abs(c.String("data-dir"))
	if err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if err := checkGroups(c.Int("groups")); err != nil {
		return err
	}
	if b := c.Int("raft-segment-bytes"); b < raftlog.MinSegmentBytes || b > raftlog.MaxSegmentBytes {
		return fmt.Errorf("--raft-segment-bytes %d: want %d (1 MiB) to %d (1 GiB)", b, raftlog.MinSegmentBytes, raftlog.MaxSegmentBytes)
	}
	if c.Uint64("ready-max-lag") == 0 {
		return errors.New("--ready-max-lag 0: want at least 1 entry")
	}
	tcfg := transport.Config{Logger: logger, AuthToken: token, WebhookAllow: c.StringSlice("webhook-allow")}
	if err := transport.ParseWebhookAllow(tcfg.WebhookAllow); err != nil {
		return err
	}
	var serverTLS *tls.Config
	if cert, key := c.String("tls-cert-file"), c.String("tls-key-file"); cert != "" || key != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("--tls-cert-file/--tls-key-file: %w", err)
		}
		serverTLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{kp}}
		tcfg.LeaderScheme = "https"
		tr := http.DefaultTransport.(*http.Transport).Clone()
		if ca := c.String("tls-ca-file"); ca != "" {
			pool, err := replication.LoadCAPool(ca)
			if err != nil {
				return fmt.Errorf("--tls-ca-file: %w", err)
			}
			tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
		}
		tcfg.LeaderTransport = tr
	}
	var raftServerTLS, raftClientTLS *tls.Config
	if c.String("raft-tls-cert-file") != "" || c.String("raft-tls-key-file") != "" || c.String("raft-tls-ca-file") != "" {
		raftServerTLS, raftClientTLS, err = replication.PeerTLS(c.String("raft-tls-cert-file"), c.String("raft-tls-key-file"), c.String("raft-tls-ca-file"))
		if err != nil {
			return fmt.Errorf("--raft-tls-*: %w", err)
		}
	}
	mem := runtimeSettings{
		Procs: procs(c), Limit: c.Int64("memory-limit"), GCPercent: gcPercent(c), ReleaseIdleHeap: c.Bool("release-idle-heap"),
	}
	if err := mem.validate(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.String("http-addr"))
	if err != nil {
		return fmt.Errorf("--http-addr: %w", err)
	}
	if serverTLS != nil {
		ln = tls.NewListener(ln, serverTLS)
	}
	gln, grpcAddr, err := listenGRPC(c.String("grpc-addr"))
	if err != nil {
		ln.Close()
		return err
	}
	bln, err := listenBeanstalkd(c.String("beanstalkd-addr"), token != "", logger)
	if err != nil {
		ln.Close()
		if gln != nil {
			gln.Close()
		}
		return err
	}
	closeListeners := func() {
		ln.Close()
		if gln != nil {
			gln.Close()
		}
		if bln != nil {
			bln.Close()
		}
	}
	tcfg.GRPCAddr = grpcAddr
	// The member record holds the gRPC address followers forward to: one
	// that names no host (":7072") is unknown there.
	memberGRPC := grpcAddr
	if host, _, _ := net.SplitHostPort(grpcAddr); host == "" {
		memberGRPC = ""
	}
	httpAddr := c.String("http-addr")
	defer mem.apply(logger)()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())

	gs, err := replication.OpenGroups(replication.Config{
		ID: id, DataDir: dataDir, RaftAddr: c.String("raft-addr"), RaftAdvertise: c.String("raft-advertise"), HTTPAddr: httpAddr, GRPCAddr: memberGRPC,
		InitialCluster: members, Join: c.String("join"), Logger: logger,
		RedeliveryBackoff: nonZero(c.Duration("redelivery-backoff")), ExpireGrace: c.Duration("expire-grace"),
		WebhookAllow: func(host string) error { return transport.WebhookHostAllowed(tcfg.WebhookAllow, host) },
		MaxTopics:    c.Int("max-topics"), MaxPendingApply: c.Int("max-pending-applies"),
		SnapshotThreshold: c.Uint64("snapshot-threshold"), TrailingLogs: c.Uint64("trailing-logs"),
		LogSegmentBytes: c.Int("raft-segment-bytes"), ReadyMaxLag: c.Uint64("ready-max-lag"),
		Store: wheel.Options{CacheBytes: c.Int64("cache-bytes"), MemTableBytes: c.Uint64("memtable-bytes"),
			CompressIndex: c.Bool("compress-index")},
		RaftServerTLS: raftServerTLS, RaftClientTLS: raftClientTLS,
	}, c.Int("groups"))
	if err != nil {
		closeListeners()
		return err
	}
	registerGroups(reg, gs)
	node := backendOf(gs)
	limits := transport.DefaultLimits()
	limits.MaxBodyBytes = c.Int("max-body-bytes")
	limits.MaxBatch = c.Int("max-batch")
	limits.MaxRequestBytes = c.Int64("max-request-bytes")
	limits.MaxDelayMs = c.Duration("max-delay").Milliseconds()
	limits.MaxWaiters = c.Int("max-waiters")
	tcfg.Gatherer, tcfg.Registerer, tcfg.Limits = reg, reg, limits
	srv := transport.NewServer(tcfg, node)

	sigCtx := c.Context // ends at SIGINT or SIGTERM (main)
	if addr := c.String("debug-addr"); addr != "" {
		if err := serveDebug(sigCtx, logger, addr); err != nil {
			closeListeners()
			gs.Close(context.Background())
			return err
		}
	}
	mem.release(sigCtx, logger, appliedSum(gs))
	httpCtx, stopHTTP := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(httpCtx, ln) }()
	waitGRPC := serveGRPC(httpCtx, gln, tcfg, serverTLS, srv, node)
	waitBeanstalkd := serveBeanstalkd(httpCtx, bln, logger, id, limits, newBeanstalkdBackend(gs, srv.Forwarder()))
	self := api.Node{ID: id, RaftAddr: c.String("raft-addr"), HTTPAddr: httpAddr, GRPCAddr: memberGRPC}
	if adv := c.String("raft-advertise"); adv != "" {
		self.RaftAddr = adv
	}
	scheme := "http"
	if serverTLS != nil {
		scheme = "https"
	}
	go announce(sigCtx, logger, gs, self, c.String("join"), token, scheme, tcfg.LeaderTransport)
	logger.Info("delaywheel serving", "node", id, "http", httpAddr, "grpc", grpcAddr, "raft", c.String("raft-addr"), "data", dataDir, "groups", gs.Count())

	select {
	case <-sigCtx.Done():
		logger.Info("shutting down")
	case err := <-served:
		logger.Error("http server stopped", "err", err)
	}
	// Hand leadership over first: the dispatcher stops and long-polls answer
	// empty, so the HTTP server can drain quickly; then stop Raft and sync.
	stepDown(gs)
	stopHTTP()
	if err := <-served; err != nil && !errors.Is(err, context.Canceled) {
		logger.Warn("http shutdown", "err", err)
	}
	if err := waitGRPC(); err != nil {
		logger.Warn("grpc shutdown", "err", err)
	}
	if err := waitBeanstalkd(); err != nil {
		logger.Warn("beanstalkd shutdown", "err", err)
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := closeGroups(closeCtx, gs); err != nil {
		return err
	}
	logger.Info("stopped cleanly")
	return nil
}

// nonZero maps an explicit 0 to "no backoff" (the node treats 0 as default).
func nonZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// announce makes sure the replicated metadata holds this node's addresses:
// a joining node, or one restarted with --join after its removal (known to
// it, or, removed while it was down, learnt from the member it was given,
// which no longer lists it), asks that member to add it; a member of an initial cluster asks the
// leader to record its HTTP address. With many groups it asks until every
// group holds it; one request adds it to every group.
func announce(ctx context.Context, log *slog.Logger, gs *replication.Groups, self api.Node, join, token, scheme string, rt http.RoundTripper) {
	opts := []client.Option{client.WithToken(token)}
	if rt != nil {
		opts = append(opts, client.WithHTTPClient(&http.Client{Transport: rt}))
	}
	// A node removed from its cluster before it started asks to be added
	// back only when given --join; one removed while running stays out.
	rejoin := removedAnywhere(gs)
	if rejoin && join == "" {
		return
	}
	withScheme := func(addr string) string {
		if !strings.Contains(addr, "://") {
			return scheme + "://" + addr
		}
		return addr
	}
	// A member by its own data that is given --join checks that the
	// cluster agrees, until it hears a leader of every group: one removed
	// while it was down never receives its removal, and would campaign
	// forever, refused.
	check := join != "" && !rejoin && announced(gs, false)
	for attempt := 0; ; attempt++ {
		var target string
		switch {
		case check && leaderOfEvery(gs):
			return
		case check:
			if cl := client.New(withScheme(join), opts...); !listed(ctx, cl, self.ID) {
				log.Warn("the cluster at --join does not list this node, removed while it was down: asking to be added back", "join", join)
				target = withScheme(join)
			}
		case announced(gs, rejoin):
			return
		default:
			if t := announceTarget(gs, join); t != "" {
				target = withScheme(t)
			}
		}
		if target != "" {
			cl := client.New(target, opts...)
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := cl.AddNode(rctx, self)
			cancel()
			if err != nil && attempt%10 == 0 {
				log.Info("announcing this node to the cluster", "via", target, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// listed reports whether the members cl's node reports, as the leader it
// knows sees them, hold id; true when it cannot tell (no answer, or no
// leader known), so that only a cluster that answers for itself makes a
// node ask to be added back.
func listed(ctx context.Context, cl *client.Client, id string) bool {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := cl.Cluster(rctx)
	if err != nil || v.Leader == "" || v.ViewOf != v.Leader {
		return true
	}
	return slices.ContainsFunc(v.Nodes, func(m api.NodeStatus) bool { return m.ID == id })
}

// serveDebug serves net/http/pprof on addr until ctx ends. It is a separate
// listener so that profiles are never exposed on the client API.
func serveDebug(ctx context.Context, log *slog.Logger, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--debug-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("debug server stopped", "err", err)
		}
	}()
	log.Info("serving profiles", "addr", ln.Addr().String())
	return nil
}

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
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/raftlog"
	"github.com/delaywheel/delaywheel/segment"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

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
	token, err := api.ReadTokenFile("--auth-token-file", c.String("auth-token-file"))
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
	if c.Duration("commit-linger") < 0 {
		return fmt.Errorf("--commit-linger %v: want 0 or more", c.Duration("commit-linger"))
	}
	if d := c.Duration("max-delay"); d < time.Millisecond {
		// A limit under the API's unit would refuse every delay but 0.
		return fmt.Errorf("--max-delay %v: want at least 1ms", d)
	}
	if c.Uint64("ready-max-lag") == 0 {
		return errors.New("--ready-max-lag 0: want at least 1 entry")
	}
	if err := errors.Join(checkByteLimit("max-body-bytes", int64(c.Int("max-body-bytes"))),
		checkByteLimit("max-request-bytes", c.Int64("max-request-bytes"))); err != nil {
		return err
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
	var bln net.Listener
	closeListeners := func() {
		for _, l := range []net.Listener{ln, gln, bln} {
			if l != nil {
				l.Close()
			}
		}
	}
	if bln, err = listenBeanstalkd(c.String("beanstalkd-addr"), token != "", logger); err != nil {
		closeListeners()
		return err
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
		CommitLinger: c.Duration("commit-linger"),
		Store: wheel.Options{CacheBytes: c.Int64("cache-bytes"), MemTableBytes: c.Uint64("memtable-bytes"),
			CompressIndex: c.Bool("compress-index")},
		RaftServerTLS: raftServerTLS, RaftClientTLS: raftClientTLS,
	}, c.Int("groups"))
	if err != nil {
		closeListeners()
		return err
	}
	registerGroups(reg, gs)
	groups := transport.GroupBackends(gs) // served by one HTTP, one gRPC and one beanstalkd server
	limits := transport.DefaultLimits()
	limits.MaxBodyBytes = c.Int("max-body-bytes")
	limits.MaxBatch = c.Int("max-batch")
	limits.MaxRequestBytes = c.Int64("max-request-bytes")
	limits.MaxDelayMs = c.Duration("max-delay").Milliseconds()
	limits.MaxWaiters = c.Int("max-waiters")
	tcfg.Gatherer, tcfg.Registerer, tcfg.Limits = reg, reg, limits
	srv := transport.NewServer(tcfg, groups...)

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
	waitGRPC := serveGRPC(httpCtx, gln, tcfg, serverTLS, srv, groups...)
	waitBeanstalkd := serveBeanstalkd(httpCtx, bln, logger, id, limits, newBeanstalkdBackend(gs, transport.NewForwarder(tcfg, groups...)))
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

// maxByteLimit bounds --max-body-bytes and --max-request-bytes. Invariant:
// whatever the limits admit can be stored. A message is one slot-file record
// (at most segment.MaxPayload, 64 MiB) and an enqueue is one Raft log entry
// (raft-wal refuses to read back an entry over 64 MiB); the quarter left over
// holds a message's headers, key and topic and a batch's per-message
// encoding. A larger limit would accept writes that every replica then fails
// to apply or to read back after a restart.
const maxByteLimit = segment.MaxPayload / 4 * 3

// checkByteLimit refuses a negative limit of flag, under which every body
// would be over the limit (0 takes the default), and one over maxByteLimit.
func checkByteLimit(flag string, n int64) error {
	if n < 0 || n > maxByteLimit {
		return fmt.Errorf("--%s %d: want at least 1 byte and at most %d (48 MiB); 0: the default", flag, n, maxByteLimit)
	}
	return nil
}

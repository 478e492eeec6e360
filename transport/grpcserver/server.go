package grpcserver

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// ServiceName is the name of the Delaywheel service, as health checks and
// reflection know it.
const ServiceName = "delaywheel.v1.Delaywheel"

// Config configures a Server.
type Config struct {
	// HTTP is the configuration of the node's HTTP server: the token, the
	// limits, the clock, the logger and the shutdown timeout are the same.
	HTTP transport.Config
	// TLS, when set, serves gRPC over TLS (the HTTP API's certificate).
	TLS *tls.Config
	// Cluster answers the Cluster call with the view the HTTP API gives;
	// nil: the backend's own view. auth is the caller's authorization.
	Cluster func(ctx context.Context, auth string) (api.Cluster, error)
	// Forward makes a follower forward the leader's calls to the leader's
	// HTTP API, as the HTTP API does (transport.NewForwarder, configured
	// by HTTP), and pass a Subscribe stream on to the gRPC address the
	// leader's member record holds; off, a follower answers them
	// UNAVAILABLE (NOT_LEADER), and so it answers a Subscribe when the
	// record holds no gRPC address.
	Forward bool
	// LeaderTLS is the client TLS configuration of passed-on Subscribe
	// streams; nil: plaintext.
	LeaderTLS *tls.Config
	// ReadyInterval is how often the health service asks the backend
	// whether it is ready. Default 1 s.
	ReadyInterval time.Duration
}

// Server is the gRPC API of one node.
type Server struct {
	pb.UnimplementedDelaywheelServer

	cfg      transport.Config
	svc      *service.Router // the node's groups
	cluster  func(ctx context.Context, auth string) (api.Cluster, error)
	log      *slog.Logger
	tokenSum [sha256.Size]byte
	gs       *grpc.Server
	health   *health.Server
	fwd      *forwarder // passes Subscribe on; nil: no forwarding
	codec    *strictCodec
	metrics  *transport.CallMetrics // nil: none
	every    time.Duration

	// drain ends running long-polls when Serve shuts down.
	drain     context.Context
	stopDrain context.CancelFunc
}

// New returns the gRPC server of a node's Raft groups, group g's backend
// at groups[g] (at least one), as transport.NewServer takes them.
func New(cfg Config, groups ...transport.Backend) *Server {
	hc := cfg.HTTP.WithDefaults()
	s := &Server{
		cfg:      hc,
		cluster:  cfg.Cluster,
		log:      hc.Logger.With("component", "grpc"),
		tokenSum: sha256.Sum256([]byte(hc.AuthToken)),
		health:   health.NewServer(),
		metrics:  newMetrics(hc.Registerer, hc.Logger),
		every:    cfg.ReadyInterval,
		codec:    newStrictCodec(hc.Limits.MaxBatch),
	}
	var fwd service.Forwarder // nil: none
	if cfg.Forward {
		s.fwd = newForwarder(cfg.LeaderTLS)
		if cfg.TLS != nil && cfg.LeaderTLS == nil {
			s.fwd.creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12}) // the system's roots
		}
		fwd = transport.NewForwarder(hc, groups...)
	}
	s.svc = service.NewRouter(groups, fwd)
	if s.every <= 0 {
		s.every = time.Second
	}
	if s.cluster == nil {
		s.cluster = func(ctx context.Context, _ string) (api.Cluster, error) { return groups[0].Cluster(ctx) }
	}
	s.drain, s.stopDrain = context.WithCancel(context.Background())
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(hc.Limits.MaxRequestBytes)),
		grpc.ForceServerCodecV2(s.codec),
		grpc.ChainUnaryInterceptor(s.intercept),
		grpc.ChainStreamInterceptor(s.interceptStream),
	}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	s.gs = grpc.NewServer(opts...)
	pb.RegisterDelaywheelServer(s.gs, s)
	healthpb.RegisterHealthServer(s.gs, s.health)
	reflection.Register(s.gs)
	return s
}

// Serve serves on ln until ctx ends, then stops gracefully: it ends running
// long-polls and waits up to the shutdown timeout for calls in flight, then
// closes what is left. It returns nil after a clean shutdown. A Server
// serves once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	defer s.fwd.close()
	errc := make(chan error, 1)
	go func() { errc <- s.gs.Serve(ln) }()
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); s.watchReady(ctx) }()
	var err error
	select {
	case err = <-errc:
		s.stopDrain()
		<-watchDone
		return fmt.Errorf("grpcserver: serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	<-watchDone
	s.health.Shutdown()
	s.stopDrain()
	stopped := make(chan struct{})
	go func() { s.gs.GracefulStop(); close(stopped) }()
	t := time.NewTimer(s.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		s.gs.Stop()
		<-stopped
		err = errors.New("grpcserver: graceful shutdown timed out; closed the calls left")
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, grpc.ErrServerStopped) {
		err = errors.Join(err, fmt.Errorf("grpcserver: serve %s: %w", ln.Addr(), serr))
	}
	return err
}

// watchReady keeps the health status of the node and of the service in
// step with the backend's readiness until ctx ends.
func (s *Server) watchReady(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		st := healthpb.HealthCheckResponse_SERVING
		if !s.ready() {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		s.health.SetServingStatus("", st)
		s.health.SetServingStatus(ServiceName, st)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// leaderOnly are the calls only the leader answers.
var leaderOnly = map[string]bool{
	pb.Delaywheel_Enqueue_FullMethodName:    true,
	pb.Delaywheel_Cancel_FullMethodName:     true,
	pb.Delaywheel_Reschedule_FullMethodName: true,
	pb.Delaywheel_Reserve_FullMethodName:    true,
	pb.Delaywheel_Ack_FullMethodName:        true,
	pb.Delaywheel_Nack_FullMethodName:       true,
	pb.Delaywheel_Touch_FullMethodName:      true,
	pb.Delaywheel_Bury_FullMethodName:       true,
	pb.Delaywheel_Redrive_FullMethodName:    true,
}

// intercept guards every call of the Delaywheel service as the HTTP
// server guards /v1: the token, a removed node, the leader (of the call's
// group, on a node of many); and maps the error of the call to its
// status. Health and reflection stay open.
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !ours(info.FullMethod) {
		return handler(ctx, req)
	}
	var resp any
	err := s.observe(info.FullMethod, func() (err error) {
		resp, err = s.guard(ctx, req, info, handler)
		return asStatus(err) // a status (the leader's answer, a refusal) stays as it is
	})
	return resp, err
}

// ours reports whether method is one of the Delaywheel service's.
func ours(method string) bool { return strings.HasPrefix(method, "/"+ServiceName+"/") }

// observe answers a call or stream of method with call, and counts its
// answer by status code (logging a failure at debug level).
func (s *Server) observe(method string, call func() error) error {
	start := time.Now()
	err := call()
	s.metrics.Observe(strings.TrimPrefix(method, "/"+ServiceName+"/"), status.Code(err).String(), time.Since(start))
	if err != nil {
		s.log.Debug("call failed", "method", method, "took_ms", time.Since(start).Milliseconds(), "err", err)
	}
	return err
}

// authorize checks the caller's token, when the node has one.
func (s *Server) authorize(ctx context.Context) error {
	if s.cfg.AuthToken == "" {
		return nil
	}
	return transport.CheckBearer(authorization(ctx), s.tokenSum)
}

func (s *Server) guard(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	refused := s.codec.take(req) // taken first, whatever the answer
	if err := s.authorize(ctx); err != nil {
		return nil, err
	}
	if refused != nil {
		return nil, refused
	}
	// The Forwarder passes the caller's authorization on, and a call
	// another node forwarded no further.
	ctx = transport.WithCaller(ctx, authorization(ctx), forwarded(ctx))
	if leaderOnly[info.FullMethod] {
		// A call only the leader answers is refused by a node that cannot
		// serve it before it is validated, where the leader validates it.
		if g, ok := s.groupNamed(req); ok {
			if err := s.svc.Reachable(ctx, g); err != nil {
				return nil, err
			}
		}
	}
	var settled *service.Settled
	if leaderOnly[info.FullMethod] && forwarded(ctx) {
		ctx, settled = service.WithSettled(ctx)
	}
	resp, err := handler(ctx, req)
	if err != nil {
		return nil, err
	}
	if settled != nil && settled.Index > 0 {
		// The leader's answer to a call a follower forwarded: the index
		// the follower's reads then wait for.
		if err := grpc.SetHeader(ctx, metadata.Pairs(appliedIndexKey, strconv.FormatUint(settled.Index, 10))); err != nil {
			s.log.Debug("setting the applied index of a forwarded call", "err", err)
		}
	}
	return resp, nil
}

// groupNamed returns the one group a call only the leader answers is
// about, before it is validated: with one group, group 0; else the group
// of its topic or message id (a malformed id: group 0), or of the topics
// of an enqueue all of one group. ok is false for a call of many groups
// (or whose group is the router's to find after validation).
func (s *Server) groupNamed(req any) (g int, ok bool) {
	if s.svc.Count() == 1 {
		return 0, true
	}
	switch r := req.(type) {
	case *pb.EnqueueRequest:
		for i, m := range r.GetMessages() {
			if mg := s.svc.GroupOfTopic(m.GetTopic()); i == 0 {
				g = mg
			} else if mg != g {
				return 0, false
			}
		}
		return g, true
	case *pb.RescheduleRequest:
		return s.idGroup(r.GetId())
	case *pb.CancelRequest:
		if r.GetId() != "" || r.GetTopic() == "" {
			return s.idGroup(r.GetId())
		}
		return s.svc.GroupOfTopic(r.GetTopic()), true
	case *pb.ReserveRequest:
		return s.svc.GroupOfTopic(r.GetTopic()), true
	case *pb.RedriveRequest:
		return s.svc.GroupOfTopic(r.GetTopic()), true
	}
	return 0, false
}

// idGroup is the group a raw message id names: a malformed id is group
// 0's to refuse, and one of a group the cluster does not have the
// router's (ok false).
func (s *Server) idGroup(raw string) (int, bool) {
	id, err := model.ParseID(raw)
	if err != nil {
		return 0, true
	}
	g, err := s.svc.GroupOfID("id", id)
	return g, err == nil
}

// authorization is the caller's authorization metadata.
func authorization(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (s *Server) nowMs() int64 { return s.cfg.Clock().UnixMilli() }

// ready reports whether every group is ready and none counts this node
// removed.
func (s *Server) ready() bool {
	for g := range s.svc.Count() {
		if b := s.svc.Group(g); b.Ready() != nil || b.Removed() != nil {
			return false
		}
	}
	return true
}

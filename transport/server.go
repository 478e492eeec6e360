package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/console"
	"github.com/delaywheel/delaywheel/transport/service"
)

// ForwardedHeader marks a request a follower forwarded to the leader. A node
// that is not the leader answers such a request 503 instead of forwarding it
// again, so forwarding never loops.
const ForwardedHeader = "X-Delaywheel-Forwarded"

// Server serves the HTTP API of api/API.md on top of a Backend.
type Server struct {
	cfg      Config
	svc      *service.Router // serves the message routes, each part in its group
	parts    parts           // forwards the parts of groups led elsewhere
	log      *slog.Logger
	handler  http.Handler
	patterns []string // every pattern newMux registered, in order
	tokenSum [sha256.Size]byte
	metrics  *CallMetrics // nil without a Registerer

	// drain ends running long-polls when Serve shuts down.
	drain     context.Context
	stopDrain context.CancelFunc
}

// access says who answers a route.
type access int

const (
	open   access = iota // no auth, answered here: health and readiness
	local                // /v1 read, answered from this node's state
	leader               // the stream: passed whole to the leader
	routed               // /v1 write or reserve: decoded here, served in its group (the service's router, inGroup)
)

// handlerFunc answers a request with a value to encode as JSON (status 200)
// or an error to map to an error body.
type handlerFunc func(r *http.Request) (any, error)

type route struct {
	pattern string // "METHOD /path"
	access  access
	h       handlerFunc
	groups  groupRoute // on a node of many groups
}

// Slots are the server's long-poll and stream slots, to share with the
// node's other API.
func (s *Server) Slots() *Slots { return s.cfg.Slots }

// NewServer returns a server of a node's Raft groups, group g's backend
// at groups[g] (at least one; --groups N gives N); unset fields of cfg
// take their defaults.
func NewServer(cfg Config, groups ...Backend) *Server {
	cfg = cfg.WithDefaults()
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "http"),
		tokenSum: sha256.Sum256([]byte(cfg.AuthToken)),
		metrics:  newHTTPMetrics(cfg.Registerer, cfg.Logger),
	}
	s.parts = newParts(cfg, groups)
	s.svc = service.NewRouter(s.parts.groups, s.parts).NamingGroups()
	s.drain, s.stopDrain = context.WithCancel(context.Background())
	s.handler = s.newMux()
	return s
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves on ln until ctx ends, then shuts down gracefully: it stops
// accepting, ends running long-polls, and waits up to
// Config.ShutdownTimeout for requests in flight. It returns nil after a
// clean shutdown. A Server serves once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(s.stopDrain)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		s.stopDrain()
		return fmt.Errorf("transport: serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		err = errors.Join(fmt.Errorf("transport: graceful shutdown: %w", err), srv.Close())
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, fmt.Errorf("transport: serve %s: %w", ln.Addr(), serr))
	}
	return err
}

// routeList is the route table: each route's pattern, who answers it,
// its handler, and how a node of many groups finds its group.
func (s *Server) routeList() []route {
	topic, id, query := groupRoute{scope: scopeTopic}, groupRoute{scope: scopeID}, groupRoute{scope: scopeQuery}
	span := func(h handlerFunc) groupRoute { return groupRoute{scopeSpan, h} }
	return []route{
		{"GET /healthz", open, s.healthz, groupRoute{}},
		{"GET /readyz", open, s.readyz, span(s.readyzSpan)},
		{"GET /v1/openapi.json", open, s.openAPI, groupRoute{}},
		{"POST /v1/messages", routed, s.enqueue, span(nil)},
		{"GET /v1/messages/{id}", local, s.get, id},
		{"DELETE /v1/messages/{id}", routed, s.cancel, id},
		{"POST /v1/messages/{id}/reschedule", routed, s.reschedule, id},
		{"POST /v1/messages/{id}/reserve", routed, s.reserveID, id},
		{"DELETE /v1/topics/{topic}/keys/{key}", routed, s.cancelKey, topic},
		{"GET /v1/topics/{topic}/keys/{key}", local, s.getKey, topic},
		{"POST /v1/topics/{topic}/reserve", routed, s.reserve, topic},
		{"GET /v1/topics/{topic}/stream", leader, s.streamTopic, topic},
		{"PUT /v1/topics/{topic}/webhook", routed, s.putWebhook, topic},
		{"GET /v1/topics/{topic}/webhook", local, s.getWebhook, topic},
		{"DELETE /v1/topics/{topic}/webhook", routed, s.deleteWebhook, topic},
		{"POST /v1/ack", routed, s.ack, span(nil)},
		{"POST /v1/nack", routed, s.nack, span(nil)},
		{"POST /v1/touch", routed, s.touch, span(nil)},
		{"POST /v1/bury", routed, s.bury, span(nil)},
		{"GET /v1/topics", local, s.topics, span(nil)},
		{"GET /v1/topics/{topic}/dead", local, s.dead, topic},
		{"POST /v1/topics/{topic}/dead/redrive", routed, s.redrive, topic},
		{"GET /v1/wheel", local, s.wheel, query},
		{"GET /v1/wheel/slots/{slot}", local, s.slot, query},
		{"GET /v1/wheel/overflow", local, s.overflow, query},
		{"GET /v1/cluster", local, s.cluster, span(nil)},
		{"GET /v1/backup", local, s.backup, query},
		{"POST /v1/cluster/nodes", routed, s.addNode, span(nil)},
		{"DELETE /v1/cluster/nodes/{id}", routed, s.removeNode, span(nil)},
		{"PUT /v1/schedules/{name}", routed, s.putSchedule, span(s.putScheduleSpan)},
		{"GET /v1/schedules/{name}", local, s.getSchedule, span(nil)},
		{"DELETE /v1/schedules/{name}", routed, s.deleteSchedule, span(nil)},
		{"GET /v1/schedules", local, s.listSchedules, span(nil)},
	}
}

// newMux registers every route, a JSON 405 for a known path called with
// another method, and a JSON 404 for everything else.
func (s *Server) newMux() *http.ServeMux {
	mux := http.NewServeMux()
	handle := func(pattern string, h http.Handler) {
		s.patterns = append(s.patterns, pattern)
		mux.Handle(pattern, h)
	}
	methods := map[string][]string{}
	for _, rt := range s.routeList() {
		method, path, _ := strings.Cut(rt.pattern, " ")
		methods[path] = append(methods[path], method)
		handle(rt.pattern, s.wrap(rt))
	}
	for path, ms := range methods {
		sort.Strings(ms)
		allow := strings.Join(ms, ", ")
		handle(path, s.wrap(route{pattern: path, access: open, h: func(r *http.Request) (any, error) {
			return nil, methodNotAllowed(r.Method, path, allow)
		}}))
	}
	metrics := promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)})
	handle("GET /metrics", metrics)
	handle("GET /ui/", http.StripPrefix("/ui", console.Handler()))
	handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	handle("/", s.wrap(route{pattern: "/", access: open, h: func(r *http.Request) (any, error) {
		return nil, notFound("no route %s %s; the endpoints are in transport/api/API.md and GET /v1/openapi.json", r.Method, r.URL.Path)
	}}))
	return mux
}

// wrap serves one route: auth, forwarding, body limit, the handler, the
// answer, the log line and the metrics.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		s.serveRoute(rec, r, rt)
		s.observe(rt.pattern, r, rec, time.Since(start))
	})
}

func (s *Server) serveRoute(w *recorder, r *http.Request, rt route) {
	if rt.access != open {
		if err := s.authorize(r); err != nil {
			s.fail(w, err)
			return
		}
	}
	g, span, err := s.pick(r, rt.groups)
	if err != nil {
		s.fail(w, err)
		return
	}
	r = withGroup(r, g, span)
	if err := s.svc.Group(g).Removed(); err != nil && rt.access != open {
		s.fail(w, unavailable("%v", err))
		return
	}
	var settled *service.Settled
	switch {
	case rt.access == routed:
		if r, settled, err = s.routed(r, g, span); err != nil {
			s.fail(w, err)
			return
		}
		w.forwarded = !span && !s.svc.Leads(g)
	case rt.access == leader && !span && s.forward(w, r):
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.Limits.MaxRequestBytes)
	h := rt.h
	if sp := rt.groups.span; span && sp != nil {
		h = sp
	}
	v, err := h(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	// The answer to a write a follower forwarded tells the follower which
	// index to apply before it answers, and the follower's answer names it.
	if settled != nil && settled.Index > 0 {
		w.Header().Set(AppliedIndexHeader, strconv.FormatUint(settled.Index, 10))
	}
	if st, ok := v.(stream); ok {
		if err := st(w); err != nil {
			// The status is sent; a cut body is how the client learns.
			w.err = err
			s.log.Warn("streaming answer failed", "route", rt.pattern, "err", err)
		}
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// stream is a handler result written as a raw body instead of JSON.
type stream func(w http.ResponseWriter) error

// authorize checks the bearer token when auth is on. Both sides are hashed
// first so that the constant-time comparison does not leak the length.
func (s *Server) authorize(r *http.Request) error {
	if s.cfg.AuthToken == "" {
		return nil
	}
	return CheckBearer(r.Header.Get("Authorization"), s.tokenSum)
}

// CheckBearer checks an Authorization value ("Bearer <token>") against the
// SHA-256 of the token. Both sides are hashed so that the constant-time
// comparison does not leak the length.
func CheckBearer(header string, tokenSum [sha256.Size]byte) error {
	if strings.TrimSpace(header) == "" {
		return Unauthenticated(true)
	}
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		// The value is not echoed: it may be the token itself.
		return &Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthenticated,
			Message: "authorization: expected \"Bearer <token>\"; the value sent does not start with the scheme \"Bearer \""}
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	if subtle.ConstantTimeCompare(sum[:], tokenSum[:]) != 1 {
		return Unauthenticated(false)
	}
	return nil
}

// fail answers err as an error body.
func (s *Server) fail(w http.ResponseWriter, err error) {
	e := ToError(err)
	if rec, ok := w.(*recorder); ok {
		rec.err = err
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="delaywheel"`)
	}
	if e.allow != "" {
		w.Header().Set("Allow", e.allow)
	}
	writeJSON(w, e.Status, api.ErrorBody{Error: api.ErrorDetail{Code: e.Code, Message: e.Message}})
}

// writeJSON writes v with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshalJSON(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = marshalJSON(api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeInternal, Message: "could not encode the answer"}})
	}
	_ = writeBody(w, status, "application/json", b)
}

// marshalJSON encodes v as a line of JSON (ending in a newline). '<', '>'
// and '&' stay as they are: an answer is data, not HTML, and an error
// message quoting the input must read as it was sent.
func marshalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	return b.Bytes(), err
}

// writeBody writes b, of the given media type, with the given status.
func writeBody(w http.ResponseWriter, status int, contentType string, b []byte) error {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, err := w.Write(b)
	return err
}

// observe logs a request (Debug; Warn for a 5xx the client did not cause by
// going away, except from the probes, whose 503 is an answer: a node not
// ready is a state the load balancer polls for, and its changes are logged
// by the node) and records its metrics.
func (s *Server) observe(pattern string, r *http.Request, rec *recorder, took time.Duration) {
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	s.metrics.Observe(pattern, strconv.Itoa(status), took)
	clientGone := r.Context().Err() != nil
	probe := pattern == "GET /readyz" || pattern == "GET /healthz"
	warn := status >= 500 && !clientGone && !probe
	// The attributes cost more than the rest of a small request's line:
	// built only for a line the logger writes.
	if !warn && !s.log.Enabled(r.Context(), slog.LevelDebug) {
		return
	}
	attrs := []any{"method", r.Method, "route", pattern, "path", r.URL.Path, "status", status,
		"took_ms", took.Milliseconds(), "forwarded", rec.forwarded}
	if rec.err != nil {
		attrs = append(attrs, "err", rec.err)
	}
	if warn {
		s.log.Warn("request failed", attrs...)
		return
	}
	s.log.Debug("request", attrs...)
}

// recorder remembers the status and the error of an answer for the log.
type recorder struct {
	http.ResponseWriter
	status    int
	err       error
	forwarded bool
}

// WriteHeader records the status.
func (w *recorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

// Write records an implicit 200.
func (w *recorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Unauthenticated is the 401 answer of a call without the right token;
// its message says which.
func Unauthenticated(missing bool) *Error {
	if missing {
		return &Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthenticated,
			Message: "missing bearer token: send \"Authorization: Bearer <token>\""}
	}
	return &Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthenticated, Message: "wrong bearer token"}
}

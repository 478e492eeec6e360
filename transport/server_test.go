package transport_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/transport/transporttest"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// v1Route is one /v1 endpoint with a valid request.
type v1Route struct{ method, path, body string }

// v1Routes lists /v1 endpoints, each with a valid request.
func v1Routes() []v1Route {
	const post, get, del = http.MethodPost, http.MethodGet, http.MethodDelete
	return []v1Route{
		{post, "/v1/messages", msgs(okMsg)},
		{get, "/v1/messages/" + msgID, ""},
		{del, "/v1/messages/" + msgID, ""},
		{post, "/v1/messages/" + msgID + "/reschedule", `{"delay_ms":1}`},
		{del, "/v1/topics/t/keys/k", ""},
		{post, "/v1/topics/t/reserve", `{"max":1}`},
		{post, "/v1/ack", `{"receipts":["` + goodRec + `"]}`},
		{post, "/v1/nack", `{"receipts":["` + goodRec + `"],"delay_ms":5}`},
		{post, "/v1/touch", `{"receipts":["` + goodRec + `"]}`},
		{get, "/v1/topics", ""},
		{get, "/v1/topics/t/dead?limit=5", ""},
		{post, "/v1/topics/t/dead/redrive", `{"ids":["` + msgID + `"]}`},
		{get, "/v1/wheel", ""},
		{get, "/v1/wheel/slots/5?records=true", ""},
		{get, "/v1/cluster", ""},
		{post, "/v1/cluster/nodes", `{"id":"n2","raft_addr":"h:1","http_addr":"h:2"}`},
		{del, "/v1/cluster/nodes/n9", ""},
	}
}

func TestAuth(t *testing.T) {
	edit := func(c *transport.Config) { c.AuthToken = "s3cret" }
	on := newEnvWith(t, transporttest.Options{Backend: refuseJoins}, edit)
	off := newEnvWith(t, transporttest.Options{Backend: refuseJoins})
	for _, rt := range v1Routes() {
		for _, c := range []struct {
			h    []string
			want string // in the message
		}{
			{nil, "missing bearer token"},
			{[]string{"Authorization", "Bearer wrong"}, "wrong bearer token"},
			{[]string{"Authorization", "s3cret"}, `authorization: expected "Bearer <token>"`},
			{[]string{"Authorization", "Basic s3cret"}, `authorization: expected "Bearer <token>"`},
		} {
			a := on.do(rt.method, rt.path, rt.body, c.h...)
			equal(t, fmt.Sprintf("%s %s status with %q", rt.method, rt.path, c.h), a.status, http.StatusUnauthorized)
			got := a.errBody(t)
			equal(t, "code", got.Code, api.CodeUnauthenticated)
			if !strings.Contains(got.Message, c.want) || strings.Contains(got.Message, "s3cret") {
				t.Fatalf("%s %s with %q: message %q, want %q (and not the token)", rt.method, rt.path, c.h, got.Message, c.want)
			}
			if strings.Contains(got.Message, "<") && !strings.Contains(string(a.body), "<token>") {
				t.Fatalf("the error body escapes HTML: %s", a.body)
			}
		}
	}
	equal(t, "topics after refusals", on.topicCount(), 0)
	for _, rt := range v1Routes() {
		for _, a := range []answer{
			on.do(rt.method, rt.path, rt.body, "Authorization", "Bearer s3cret"),
			off.do(rt.method, rt.path, rt.body),
		} {
			if a.status == http.StatusUnauthorized {
				t.Fatalf("%s %s: refused a good request: %s", rt.method, rt.path, a.body)
			}
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		equal(t, p+" stays open", on.do(http.MethodGet, p, "").status, http.StatusOK)
	}
	_, err := on.c.Topics(t.Context())
	check(t, "client with token", err)
}

// refuseJoins wraps a node so that adding the made-up member of v1Routes
// fails: as a voter it would cost the cluster its quorum.
func refuseJoins(b transport.Backend) transport.Backend { return joinRefuser{b} }

type joinRefuser struct{ transport.Backend }

func (j joinRefuser) AddNode(ctx context.Context, n model.Member) error {
	if n.RaftAddr == "h:1" {
		return fmt.Errorf("%w: no such member can be reached", model.ErrConflict)
	}
	return j.Backend.AddNode(ctx, n)
}

// failingTopics is a node whose Topics fails with the error in err.
type failingTopics struct {
	transport.Backend
	err *atomic.Pointer[error]
}

func (f failingTopics) Topics(context.Context) ([]wheel.TopicCounts, error) {
	return nil, *f.err.Load()
}

func TestErrorMapping(t *testing.T) {
	var fail atomic.Pointer[error]
	e := newEnvWith(t, transporttest.Options{Backend: func(b transport.Backend) transport.Backend {
		return failingTopics{b, &fail}
	}})
	for _, tc := range []struct {
		err    error
		status int
		code   string
		retry  string
	}{
		{model.ErrNotFound, 404, api.CodeNotFound, ""},
		{fmt.Errorf("cancel: %w", model.ErrConflict), 409, api.CodeConflict, ""},
		{model.ErrInvalid, 400, api.CodeInvalidArgument, ""},
		{model.ErrTooLarge, 413, api.CodeTooLarge, ""},
		{fmt.Errorf("topics: %w", model.ErrOverloaded), 429, api.CodeOverloaded, "1"},
		{model.ErrUnavailable, 503, api.CodeUnavailable, "1"},
		{model.ErrNotLeader, 503, api.CodeUnavailable, "1"},
		{context.DeadlineExceeded, 503, api.CodeUnavailable, "1"},
		{errors.New("disk on fire"), 500, api.CodeInternal, ""},
	} {
		fail.Store(&tc.err)
		a := e.do(http.MethodGet, "/v1/topics", "")
		equal(t, tc.err.Error()+" status", a.status, tc.status)
		got := a.errBody(t)
		equal(t, tc.err.Error()+" code", got.Code, tc.code)
		equal(t, tc.err.Error()+" Retry-After", a.header.Get("Retry-After"), tc.retry)
		if tc.status == 500 && strings.Contains(got.Message, "fire") {
			t.Fatalf("internal error leaked: %q", got.Message)
		}
		_, err := e.c.Topics(t.Context())
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != tc.status || ce.Code != tc.code {
			t.Fatalf("client error %v", err)
		}
	}
}

// forwardPair is a two-node cluster seen from its follower, with the
// forwarded requests that reached the leader's server recorded.
type forwardPair struct {
	leader, follower *env
	seen             chan *http.Request
	mu               sync.Mutex
	leaderID         string
	atLeader         func(w http.ResponseWriter, r *http.Request) // when set, runs before the leader answers
}

func newForwardPair(t *testing.T, edit ...func(*transport.Config)) *forwardPair {
	p := &forwardPair{seen: make(chan *http.Request, 64)}
	o := transporttest.Options{
		Backend: refuseJoins,
		Server: func(c *transport.Config) {
			for _, f := range edit {
				f(c)
			}
		},
		Handler: func(id string, inner http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				p.mu.Lock()
				atLeader, hook := id == p.leaderID, p.atLeader
				p.mu.Unlock()
				if atLeader && r.Header.Get(transport.ForwardedHeader) != "" {
					p.seen <- r.Clone(context.Background())
					if hook != nil {
						hook(w, r)
					}
				}
				inner.ServeHTTP(w, r)
			})
		},
	}
	c := startCluster(t, 2, o)
	leader, follower := c.Leader(), c.Follower()
	p.mu.Lock()
	p.leaderID = leader.ID
	p.mu.Unlock()
	p.leader = &env{t: t, Node: leader, c: leader.Client}
	p.follower = &env{t: t, Node: follower, c: follower.Client}
	return p
}

// nothingSeen fails if a forwarded request reached the leader.
func (p *forwardPair) nothingSeen(t *testing.T) {
	t.Helper()
	select {
	case r := <-p.seen:
		t.Fatalf("%s %s reached the leader", r.Method, r.URL)
	default:
	}
}

func TestFollowerForwardsWrites(t *testing.T) {
	t.Parallel() // a two-node cluster spends its start waiting for an election
	p := newForwardPair(t, func(c *transport.Config) { c.AuthToken = "tok" })
	ctx := t.Context()
	res, err := p.follower.c.Enqueue(ctx, []api.Message{{Topic: "f", Payload: api.TextBody("hi"), DelayMs: api.Ptr(int64(10))}})
	check(t, "enqueue via follower", err)
	equal(t, "deliver_at from the leader", res[0].DeliverAtMs, startMs+10)
	r := <-p.seen
	equal(t, "forwarded header", r.Header.Get(transport.ForwardedHeader), "1")
	equal(t, "authorization", r.Header.Get("Authorization"), "Bearer tok")
	equal(t, "path", r.URL.Path, "/v1/messages")

	// A read is answered locally.
	_, err = p.follower.c.Topics(ctx)
	check(t, "topics via follower", err)
	p.nothingSeen(t)

	// A request is decoded and validated once, where it arrives: a
	// refusal reaches no leader.
	a := p.follower.do(http.MethodPost, "/v1/ack?trace=1", `{"receipts":["bad"]}`, "Authorization", "Bearer tok")
	equal(t, "validated by the follower", a.status, http.StatusBadRequest)
	p.nothingSeen(t)

	// Every write and reserve is forwarded.
	for _, rt := range v1Routes() {
		if rt.method == http.MethodGet {
			continue
		}
		a := p.follower.do(rt.method, rt.path, rt.body, "Authorization", "Bearer tok")
		select {
		case r := <-p.seen:
			equal(t, rt.method+" "+rt.path+" forwarded", r.Method+" "+r.URL.RequestURI(), rt.method+" "+rt.path)
			equal(t, "forwarded header", r.Header.Get(transport.ForwardedHeader), "1")
		default:
			t.Fatalf("%s %s not forwarded (%d): %s", rt.method, rt.path, a.status, a.body)
		}
	}
}

func TestForwardLoopAndNoLeader(t *testing.T) {
	t.Parallel() // a two-node cluster spends its start waiting for an election
	p := newForwardPair(t)
	a := p.follower.do(http.MethodPost, "/v1/messages", msgs(okMsg), transport.ForwardedHeader, "1")
	equal(t, "loop status", a.status, http.StatusServiceUnavailable)
	equal(t, "loop code", a.errBody(t).Code, api.CodeUnavailable)
	equal(t, "loop Retry-After", a.header.Get("Retry-After"), "1")
	p.nothingSeen(t)

	// A node that waits to be added knows no leader.
	j := startJoiner(t, "n3", transporttest.Options{Clock: p.follower.Clock})
	_, err := j.Client.Enqueue(t.Context(), []api.Message{{Topic: "t"}})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || ce.Code != api.CodeUnavailable || ce.RetryAfter.Seconds() != 1 {
		t.Fatalf("no leader: %v", err)
	}
	if !strings.Contains(ce.Message, "no leader") {
		t.Fatalf("message %q", ce.Message)
	}

	// The leader's HTTP server is gone while it still leads.
	p.leader.CloseHTTP()
	a = p.follower.do(http.MethodPost, "/v1/messages", msgs(okMsg))
	equal(t, "unreachable leader", a.status, http.StatusServiceUnavailable)
	if !strings.Contains(a.errBody(t).Message, p.leader.Addr) {
		t.Fatalf("message should name the leader: %s", a.body)
	}
	equal(t, "topics", p.follower.topicCount(), 0)
}

func TestWaitersLimit(t *testing.T) {
	polling := make(chan struct{}, 1)
	e := newEnvWith(t, transporttest.Options{Backend: func(b transport.Backend) transport.Backend {
		return reserveSignal{b, polling}
	}}, func(c *transport.Config) { c.Limits.MaxWaiters = 1 })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := e.c.Reserve(ctx, "t", api.ReserveRequest{WaitMs: 300000})
		done <- err
	}()
	<-polling // the first long-poll holds the only slot
	_, err := e.c.Reserve(t.Context(), "t", api.ReserveRequest{WaitMs: 1000})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusTooManyRequests || ce.Code != api.CodeOverloaded || ce.RetryAfter.Seconds() != 1 {
		t.Fatalf("second long-poll: %v", err)
	}
	if !strings.Contains(ce.Message, "limit 1") {
		t.Fatalf("message %q", ce.Message)
	}
	_, err = e.c.Reserve(t.Context(), "t", api.ReserveRequest{})
	check(t, "a reserve without wait is not a long-poll", err)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled long-poll: %v", err)
	}
}

func TestServeShutsDownGracefully(t *testing.T) {
	n := startNode(t, transporttest.Options{})
	polling := make(chan struct{}, 1)
	srv := transport.NewServer(transport.Config{Clock: n.Clock.Now}, reserveSignal{n.Node, polling})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(t, "listen", err)
	ctx, stop := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	c := client.New(ln.Addr().String())
	check(t, "healthz", c.Healthz(t.Context()))

	polled := make(chan error, 1)
	go func() {
		_, err := c.Reserve(t.Context(), "t", api.ReserveRequest{WaitMs: 300000})
		polled <- err
	}()
	<-polling
	stop()
	check(t, "serve", <-served)
	err = <-polled
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || !strings.Contains(ce.Message, "shutting down") {
		t.Fatalf("long-poll during shutdown: %v", err)
	}
}

func TestMetricsRegisterer(t *testing.T) {
	reg := newRegistry()
	for range 2 { // a second server on the same registry reuses the collectors
		e := newEnv(t, func(c *transport.Config) { c.Registerer, c.Gatherer = reg, reg })
		_, err := e.c.Topics(t.Context())
		check(t, "topics", err)
		body := string(e.do(http.MethodGet, "/metrics", "").body)
		if !strings.Contains(body, `delaywheel_http_requests_total{code="200",route="GET /v1/topics"}`) {
			t.Fatalf("metrics:\n%s", body)
		}
	}
}

// A forward to a leader that stops answering is cancelled once this node
// sees another leader, and answers 503 so the client retries there.
func TestForwardCancelledWhenLeaderChanges(t *testing.T) {
	t.Parallel() // a two-node cluster spends its start waiting for an election
	p := newForwardPair(t)
	hung, release := make(chan struct{}), make(chan struct{})
	p.mu.Lock()
	p.atLeader = func(w http.ResponseWriter, r *http.Request) {
		close(hung)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}
	p.mu.Unlock()
	t.Cleanup(func() { close(release) })
	done := make(chan answer, 1)
	go func() { done <- p.follower.do(http.MethodPost, "/v1/messages", msgs(okMsg)) }()
	<-hung
	p.leader.Node.Node.StepDown() // hands leadership to the follower
	a := <-done
	equal(t, "status after the leader changed", a.status, http.StatusServiceUnavailable)
	equal(t, "Retry-After", a.header.Get("Retry-After"), "1")
}

package transport_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/wheel"
)

// v1Route is one /v1 endpoint with a valid request.
type v1Route struct{ method, path, body string }

// v1Routes lists every /v1 endpoint of API.md.
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
	on := newEnv(t, func(c *transport.Config) { c.AuthToken = "s3cret" })
	off := newEnv(t)
	for _, rt := range v1Routes() {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			for _, h := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "s3cret"}, {"Authorization", "Basic s3cret"}} {
				before := len(on.fb.Calls())
				a := on.do(rt.method, rt.path, rt.body, h...)
				equal(t, fmt.Sprintf("status with %q", h), a.status, http.StatusUnauthorized)
				equal(t, "code", a.errBody(t).Code, api.CodeUnauthenticated)
				equal(t, "backend calls", len(on.fb.Calls()), before)
			}
			for _, a := range []answer{
				on.do(rt.method, rt.path, rt.body, "Authorization", "Bearer s3cret"),
				off.do(rt.method, rt.path, rt.body),
			} {
				if a.status == http.StatusUnauthorized {
					t.Fatalf("refused a good request: %s", a.body)
				}
			}
		})
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		equal(t, p+" stays open", on.do(http.MethodGet, p, "").status, http.StatusOK)
	}
	_, err := on.c.Topics(t.Context())
	check(t, "client with token", err)
}

func TestErrorMapping(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		err    error
		status int
		code   string
		retry  string
	}{
		{wheel.ErrNotFound, 404, api.CodeNotFound, ""},
		{fmt.Errorf("cancel: %w", wheel.ErrConflict), 409, api.CodeConflict, ""},
		{wheel.ErrInvalid, 400, api.CodeInvalidArgument, ""},
		{wheel.ErrTooLarge, 413, api.CodeTooLarge, ""},
		{fmt.Errorf("topics: %w", wheel.ErrOverloaded), 429, api.CodeOverloaded, "1"},
		{wheel.ErrUnavailable, 503, api.CodeUnavailable, "1"},
		{wheel.ErrNotLeader, 503, api.CodeUnavailable, "1"},
		{context.DeadlineExceeded, 503, api.CodeUnavailable, "1"},
		{errors.New("disk on fire"), 500, api.CodeInternal, ""},
	} {
		e.fb.FailWith(tc.err)
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

// forwardPair is a leader and a follower that knows it, with the requests
// that reached the leader recorded.
type forwardPair struct {
	leader, follower *env
	seen             chan *http.Request
}

func newForwardPair(t *testing.T, edit ...func(*transport.Config)) *forwardPair {
	p := &forwardPair{follower: newEnv(t, edit...), seen: make(chan *http.Request, 16)}
	p.leader = newWrappedEnv(t, func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.seen <- r.Clone(context.Background())
			inner.ServeHTTP(w, r)
		})
	}, edit...)
	p.follower.fb.SetLeader(p.leader.srv.Listener.Addr().String(), false, true)
	return p
}

func TestFollowerForwardsWrites(t *testing.T) {
	p := newForwardPair(t, func(c *transport.Config) { c.AuthToken = "tok" })
	ctx := t.Context()
	res, err := p.follower.c.Enqueue(ctx, []api.Message{{Topic: "f", Payload: api.TextBody("hi"), DelayMs: api.Ptr(int64(10))}})
	check(t, "enqueue via follower", err)
	equal(t, "deliver_at from the leader", res[0].DeliverAtMs, startMs+10)
	r := <-p.seen
	equal(t, "forwarded header", r.Header.Get(transport.ForwardedHeader), "1")
	equal(t, "authorization", r.Header.Get("Authorization"), "Bearer tok")
	equal(t, "path", r.URL.Path, "/v1/messages")
	equal(t, "leader calls", strings.Join(p.leader.fb.Calls(), ","), "Enqueue")
	equal(t, "follower calls", len(p.follower.fb.Calls()), 0)

	// A read is answered locally.
	_, err = p.follower.c.Topics(ctx)
	check(t, "topics via follower", err)
	equal(t, "follower answered the read", strings.Join(p.follower.fb.Calls(), ","), "Topics")

	// Query strings are kept; validation happens on the leader.
	a := p.follower.do(http.MethodPost, "/v1/ack?trace=1", `{"receipts":["bad"]}`, "Authorization", "Bearer tok")
	equal(t, "validated by the leader", a.status, http.StatusBadRequest)
	equal(t, "query kept", (<-p.seen).URL.RawQuery, "trace=1")

	// Every write and reserve is forwarded.
	for _, rt := range v1Routes() {
		if rt.method == http.MethodGet {
			continue
		}
		before := len(p.leader.fb.Calls())
		a := p.follower.do(rt.method, rt.path, rt.body, "Authorization", "Bearer tok")
		<-p.seen
		if len(p.leader.fb.Calls()) != before+1 {
			t.Fatalf("%s %s not forwarded (%d): %s", rt.method, rt.path, a.status, a.body)
		}
	}
	equal(t, "follower backend writes", slices.Equal(p.follower.fb.Calls(), []string{"Topics"}), true)
}

func TestForwardLoopAndNoLeader(t *testing.T) {
	p := newForwardPair(t)
	a := p.follower.do(http.MethodPost, "/v1/messages", msgs(okMsg), transport.ForwardedHeader, "1")
	equal(t, "loop status", a.status, http.StatusServiceUnavailable)
	equal(t, "loop code", a.errBody(t).Code, api.CodeUnavailable)
	equal(t, "loop Retry-After", a.header.Get("Retry-After"), "1")
	equal(t, "leader untouched", len(p.leader.fb.Calls()), 0)

	p.follower.fb.SetLeader("", false, false)
	_, err := p.follower.c.Enqueue(t.Context(), []api.Message{{Topic: "t"}})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusServiceUnavailable || ce.Code != api.CodeUnavailable || ce.RetryAfter.Seconds() != 1 {
		t.Fatalf("no leader: %v", err)
	}
	if !strings.Contains(ce.Message, "no leader") {
		t.Fatalf("message %q", ce.Message)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	check(t, "listen", err)
	dead := ln.Addr().String()
	check(t, "close", ln.Close())
	p.follower.fb.SetLeader(dead, false, true)
	a = p.follower.do(http.MethodPost, "/v1/messages", msgs(okMsg))
	equal(t, "unreachable leader", a.status, http.StatusServiceUnavailable)
	if !strings.Contains(a.errBody(t).Message, dead) {
		t.Fatalf("message should name the leader: %s", a.body)
	}
	equal(t, "follower backend", len(p.follower.fb.Calls()), 0)
}

func TestWaitersLimit(t *testing.T) {
	e := newEnv(t, func(c *transport.Config) { c.Limits.MaxWaiters = 1 })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := e.c.Reserve(ctx, "t", api.ReserveRequest{WaitMs: 300000})
		done <- err
	}()
	check(t, "first long-poll waits", e.fb.WaitForWaiters(t.Context(), 1))
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
	fb := transport.NewFakeBackend()
	srv := transport.NewServer(transport.Config{}, fb)
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
	check(t, "long-poll waits", fb.WaitForWaiters(t.Context(), 1))
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
	p := newForwardPair(t)
	hung, release := make(chan struct{}), make(chan struct{})
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(hung)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(stuck.Close)
	t.Cleanup(func() { close(release) })
	p.follower.fb.SetLeader(strings.TrimPrefix(stuck.URL, "http://"), false, true)
	done := make(chan answer, 1)
	go func() { done <- p.follower.do(http.MethodPost, "/v1/messages", msgs(okMsg)) }()
	<-hung
	p.follower.fb.SetLeader("127.0.0.1:1", false, true) // a new leader was elected
	a := <-done
	equal(t, "status after the leader changed", a.status, http.StatusServiceUnavailable)
	equal(t, "Retry-After", a.header.Get("Retry-After"), "1")
}

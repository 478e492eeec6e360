package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

func TestErrorFromErrorBody(t *testing.T) {
	n := transporttest.Start(t, transporttest.Options{Server: func(c *transport.Config) { c.AuthToken = "t" }})
	_, err := client.New(n.URL).Topics(t.Context())
	var ce *client.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %T %v is not a *client.Error", err, err)
	}
	if ce.Status != http.StatusUnauthorized || ce.Code != api.CodeUnauthenticated || ce.Message == "" {
		t.Fatalf("error %+v", ce)
	}
	if !client.HasCode(err, api.CodeUnauthenticated) || client.HasCode(err, api.CodeNotFound) {
		t.Fatal("HasCode")
	}
	if !strings.Contains(err.Error(), "401 unauthenticated") {
		t.Fatalf("Error() = %q", err.Error())
	}
	_, err = client.New(n.URL, client.WithToken("t")).Topics(t.Context())
	if err != nil {
		t.Fatalf("with token: %v", err)
	}
}

func TestErrorFromOtherBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		http.Error(w, "bad gateway", http.StatusBadGateway)
	}))
	defer srv.Close()
	err := client.New(strings.TrimPrefix(srv.URL, "http://")).Healthz(t.Context())
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusBadGateway || ce.Code != "" || ce.Message != "bad gateway" || ce.RetryAfter != 7*time.Second {
		t.Fatalf("error %+v", err)
	}
}

// deadlineTransport records the deadline of a request's context (where
// http.Client puts its Timeout) and answers an empty reserve.
type deadlineTransport struct{ deadline time.Time }

func (d *deadlineTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	d.deadline, _ = r.Context().Deadline()
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"messages":[]}`)), Request: r}, nil
}

func TestReserveIsNotCutByClientTimeout(t *testing.T) {
	rt := &deadlineTransport{}
	hc := &http.Client{Timeout: time.Millisecond, Transport: rt}
	c := client.New("http://node", client.WithHTTPClient(hc))
	ds, err := c.Reserve(t.Context(), "t", api.ReserveRequest{WaitMs: 60000})
	if err != nil {
		t.Fatalf("long-poll cut: %v", err)
	}
	if ds == nil || len(ds) != 0 {
		t.Fatalf("deliveries %v", ds)
	}
	if left := time.Until(rt.deadline); left < 30*time.Second {
		t.Fatalf("long-poll deadline only %v away", left)
	}
	// The caller's context still bounds it.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.Reserve(ctx, "t", api.ReserveRequest{WaitMs: 60000}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled reserve: %v", err)
	}
}

func TestRawResponseAndEscaping(t *testing.T) {
	var (
		mu    sync.Mutex
		paths []string
	)
	n := transporttest.Start(t, transporttest.Options{Handler: func(_ string, inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			paths = append(paths, r.URL.EscapedPath())
			mu.Unlock()
			inner.ServeHTTP(w, r)
		})
	}})
	var raw []string
	c := client.New(n.URL+"/", client.WithRawResponse(func(b []byte) { raw = append(raw, string(b)) }))
	ctx := t.Context()
	if _, err := c.Enqueue(ctx, []api.Message{{Topic: "t", Key: "a/b c"}}); err != nil {
		t.Fatal(err)
	}
	got, err := c.CancelKey(ctx, "t", "a/b c")
	if err != nil {
		t.Fatalf("cancel by a key with a slash: %v", err)
	}
	if got.State != api.StateCancelled {
		t.Fatalf("cancelled %+v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if paths[1] != "/v1/topics/t/keys/a%2Fb%20c" {
		t.Fatalf("path %q", paths[1])
	}
	if len(raw) != 2 || !strings.HasPrefix(raw[0], `{"results":[`) {
		t.Fatalf("raw %q", raw)
	}
}

// TestDotNames: a topic, key or schedule named "." or "..", which the API
// takes, is reached as itself, not as a path step that the server's
// router resolves to another route.
func TestDotNames(t *testing.T) {
	n := transporttest.Start(t, transporttest.Options{})
	c := n.Client
	ctx := t.Context()
	if _, err := c.Enqueue(ctx, []api.Message{{Topic: "..", Key: "."}, {Topic: "t", Key: ".."}}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.CancelKey(ctx, "t", ".."); err != nil || got.State != api.StateCancelled {
		t.Fatalf("cancel key ..: %+v %v", got, err)
	}
	if ds, err := c.Reserve(ctx, "..", api.ReserveRequest{}); err != nil || len(ds) != 1 || ds[0].Key != "." {
		t.Fatalf("reserve of topic ..: %+v %v", ds, err)
	}
	if _, err := c.SetSchedule(ctx, ".", api.ScheduleRequest{Topic: "t", EveryMs: 60000}); err != nil {
		t.Fatalf("set schedule .: %v", err)
	}
	if s, err := c.GetSchedule(ctx, "."); err != nil || s.Name != "." {
		t.Fatalf("get schedule .: %+v %v", s, err)
	}
}

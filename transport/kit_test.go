package transport_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// startMs is the fixed instant every test starts at.
const startMs = int64(1_732_245_600_000)

// env is one server on a fake backend, with a clock the test moves.
type env struct {
	t    *testing.T
	fb   *transport.FakeBackend
	srv  *httptest.Server
	c    *client.Client
	nowM atomic.Int64
}

// newEnv starts a server; edit changes its config before it starts.
func newEnv(t *testing.T, edit ...func(*transport.Config)) *env {
	t.Helper()
	return newWrappedEnv(t, nil, edit...)
}

// newWrappedEnv starts a server whose handler wrap wraps (when not nil).
func newWrappedEnv(t *testing.T, wrap func(http.Handler) http.Handler, edit ...func(*transport.Config)) *env {
	t.Helper()
	e := &env{t: t, fb: transport.NewFakeBackend()}
	e.nowM.Store(startMs)
	clock := func() time.Time { return time.UnixMilli(e.nowM.Load()) }
	e.fb.SetClock(clock)
	cfg := transport.Config{
		Clock:  clock,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	for _, f := range edit {
		f(&cfg)
	}
	h := transport.NewServer(cfg, e.fb).Handler()
	if wrap != nil {
		h = wrap(h)
	}
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	e.c = client.New(e.srv.URL, client.WithToken(cfg.AuthToken))
	return e
}

// advance moves the clock and wakes blocked reserves.
func (e *env) advance(d time.Duration) {
	e.nowM.Add(d.Milliseconds())
	e.fb.Wake()
}

func (e *env) now() int64 { return e.nowM.Load() }

// answer is a raw HTTP answer.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// errBody decodes the answer as an error body, failing if it is not one.
func (a answer) errBody(t *testing.T) api.ErrorDetail {
	t.Helper()
	var b api.ErrorBody
	dec := json.NewDecoder(bytes.NewReader(a.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil || b.Error.Code == "" || b.Error.Message == "" {
		t.Fatalf("not an error body (%v): %s", err, a.body)
	}
	return b.Error
}

// do sends a raw request to the server.
func (e *env) do(method, path, body string, header ...string) answer {
	e.t.Helper()
	return doURL(e.t, method, e.srv.URL+path, body, header...)
}

// doURL sends a raw request; header holds name, value pairs.
func doURL(t *testing.T, method, url, body string, header ...string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: data}
}

// mustEnqueue enqueues msgs through the client.
func (e *env) mustEnqueue(msgs ...api.Message) []api.Result {
	e.t.Helper()
	res, err := e.c.Enqueue(e.t.Context(), msgs)
	if err != nil {
		e.t.Fatalf("enqueue: %v", err)
	}
	return res
}

// check fails the test when err is not nil.
func check(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// equal fails the test when got != want.
func equal[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// asClientError is errors.As for *client.Error.
func asClientError(err error, target **client.Error) bool { return errors.As(err, target) }

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

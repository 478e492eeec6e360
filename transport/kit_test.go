package transport_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

// startMs is the instant every test starts at.
const startMs = transporttest.StartMs

// env is one real node behind its server, on a clock the test moves.
type env struct {
	t *testing.T
	*transporttest.Node
	c *client.Client
}

// newEnv starts a one-node cluster; edit changes its server's config.
func newEnv(t *testing.T, edit ...func(*transport.Config)) *env {
	t.Helper()
	return newEnvWith(t, transporttest.Options{}, edit...)
}

// newEnvWith starts a one-node cluster with the kit options o. Its
// server validates every request and answer against the OpenAPI document
// (validatedOptions).
func newEnvWith(t *testing.T, o transporttest.Options, edit ...func(*transport.Config)) *env {
	t.Helper()
	o.Server = func(c *transport.Config) {
		for _, f := range edit {
			f(c)
		}
	}
	n := startNode(t, o)
	return &env{t: t, Node: n, c: n.Client}
}

// advance moves the clock.
func (e *env) advance(d time.Duration) { e.Clock.Advance(d) }

func (e *env) now() int64 { return e.Clock.Now().UnixMilli() }

// topicCount is the number of topics the node holds: 0 shows that
// refused requests changed nothing.
func (e *env) topicCount() int {
	e.t.Helper()
	ts, err := e.Node.Node.Topics(e.t.Context())
	check(e.t, "topics", err)
	return len(ts)
}

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
	return doURL(e.t, method, e.URL+path, body, header...)
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

package transport_test

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/transport/transporttest"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

func TestMessagesLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	res := e.mustEnqueue(
		api.Message{Topic: "orders.close", Payload: api.TextBody("close order 42"), DelayMs: api.Ptr(int64(1800000)),
			Key: "order-42", Priority: 3, Headers: map[string]string{"tenant": "a"}},
		api.Message{Topic: "orders.close", Payload: api.BinaryBody([]byte{0xff, 0x00, 0x01})},
		api.Message{Topic: "orders.close", Payload: api.TextBody("past"), DeliverAtMs: api.Ptr(startMs - 5000)},
	)
	equal(t, "results", len(res), 3)
	equal(t, "delayed deliver_at", res[0].DeliverAtMs, startMs+1800000)
	equal(t, "now deliver_at", res[1].DeliverAtMs, startMs)
	equal(t, "past deliver_at", res[2].DeliverAtMs, startMs)
	equal(t, "id length", len(res[0].ID), 24)

	dup := e.mustEnqueue(api.Message{Topic: "orders.close", Key: "order-42", DelayMs: api.Ptr(int64(5))})
	equal(t, "duplicate", dup[0].Duplicate, true)
	equal(t, "duplicate id", dup[0].ID, res[0].ID)

	v, err := e.c.Get(ctx, res[0].ID)
	check(t, "get", err)
	equal(t, "state", v.State, api.StateDelayed)
	equal(t, "body", *v.Body, "close order 42")
	equal(t, "key", v.Key, "order-42")
	equal(t, "priority", v.Priority, int64(3))
	equal(t, "header", v.Headers["tenant"], "a")
	equal(t, "enqueued", v.EnqueuedMs, startMs)
	bin, err := e.c.Get(ctx, res[1].ID)
	check(t, "get binary", err)
	if bin.Body != nil || bin.BodyBase64 == nil {
		t.Fatalf("binary body should come as body_base64: %+v", bin.Payload)
	}
	raw, err := bin.Bytes()
	check(t, "decode body", err)
	equal(t, "binary body", string(raw), "\xff\x00\x01")

	rs, err := e.c.Reschedule(ctx, res[0].ID, api.RescheduleRequest{DelayMs: api.Ptr(int64(60000))})
	check(t, "reschedule", err)
	equal(t, "rescheduled", rs.DeliverAtMs, startMs+60000)

	c, err := e.c.CancelKey(ctx, "orders.close", "order-42")
	check(t, "cancel by key", err)
	equal(t, "cancelled id", c.ID, res[0].ID)
	equal(t, "cancelled state", c.State, "cancelled")
	c, err = e.c.Cancel(ctx, res[2].ID)
	check(t, "cancel", err)
	equal(t, "cancelled", c.ID, res[2].ID)
	_, err = e.c.Get(ctx, res[2].ID)
	if !client.HasCode(err, api.CodeNotFound) {
		t.Fatalf("get after cancel: %v, want not_found", err)
	}

	// A message due now is ready once its second has passed.
	e.AdvanceUntil(t, 100*time.Millisecond, "the due message to be ready", func() bool {
		v, err := e.c.Get(ctx, res[1].ID)
		check(t, "get", err)
		return v.State == api.StateReady
	})
}

func TestConsuming(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	res := e.mustEnqueue(
		api.Message{Topic: "t", Payload: api.TextBody("low")},
		api.Message{Topic: "t", Payload: api.TextBody("high"), Priority: 5, TTRMs: api.Ptr(int64(10000))},
		api.Message{Topic: "t", Payload: api.TextBody("later"), DelayMs: api.Ptr(int64(1000))},
	)
	ds, err := e.c.Reserve(ctx, "t", api.ReserveRequest{Max: api.Ptr(10)})
	check(t, "reserve", err)
	equal(t, "due messages", len(ds), 2)
	equal(t, "first by priority", ds[0].ID, res[1].ID)
	equal(t, "attempt", ds[0].Attempt, int32(1))
	equal(t, "lease", ds[0].LeaseExpiresMs, startMs+10000)
	equal(t, "default ttr lease", ds[1].LeaseExpiresMs, startMs+30000)
	if !strings.HasPrefix(ds[0].Receipt, ds[0].ID+".") {
		t.Fatalf("receipt %q does not name the id", ds[0].Receipt)
	}

	touched, err := e.c.Touch(ctx, []string{ds[0].Receipt})
	check(t, "touch", err)
	equal(t, "touched", touched, api.TouchResponse{Touched: 1})
	nacked, err := e.c.Nack(ctx, []string{ds[1].Receipt}, 500)
	check(t, "nack", err)
	equal(t, "nacked", nacked, api.NackResponse{Nacked: 1})
	acked, err := e.c.Ack(ctx, []string{ds[0].Receipt, ds[1].Receipt})
	check(t, "ack", err)
	equal(t, "acked", acked, api.AckResponse{Acked: 1, Stale: 1})

	// Nothing due now; a reserve with ttr_ms override after the clock moves.
	ds, err = e.c.Reserve(ctx, "t", api.ReserveRequest{Max: api.Ptr(10)})
	check(t, "reserve nothing", err)
	equal(t, "nothing due", len(ds), 0)
	e.advance(time.Second)
	ds, err = e.c.Reserve(ctx, "t", api.ReserveRequest{Max: api.Ptr(10), TTRMs: api.Ptr(int64(2000))})
	check(t, "reserve later", err)
	equal(t, "due after a second", len(ds), 2)
	equal(t, "ttr override", ds[0].LeaseExpiresMs, e.now()+2000)

	e.Eventually(t, "both messages counted reserved", func() bool {
		topics, err := e.c.Topics(ctx)
		check(t, "topics", err)
		return len(topics) == 1 && topics[0] == api.TopicCounts{Topic: "t", Reserved: 2}
	})
}

func TestLongPollGetsMessageEnqueuedLater(t *testing.T) {
	polling := make(chan struct{}, 1)
	e := newEnvWith(t, transporttest.Options{Backend: func(b transport.Backend) transport.Backend {
		return reserveSignal{b, polling}
	}})
	type got struct {
		ds  []api.Delivery
		err error
	}
	done := make(chan got, 1)
	go func() {
		ds, err := e.c.Reserve(t.Context(), "lp", api.ReserveRequest{WaitMs: 60000})
		done <- got{ds, err}
	}()
	<-polling
	res := e.mustEnqueue(api.Message{Topic: "lp", Payload: api.TextBody("x")})
	g := <-done
	check(t, "long-poll", g.err)
	equal(t, "delivered", len(g.ds), 1)
	equal(t, "id", g.ds[0].ID, res[0].ID)
}

func TestDeadAndRedrive(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	res := e.mustEnqueue(
		api.Message{Topic: "d", Payload: api.TextBody("a"), MaxAttempts: api.Ptr(int32(1)), TTRMs: api.Ptr(int64(1))},
		api.Message{Topic: "d", Payload: api.TextBody("b"), MaxAttempts: api.Ptr(int32(1)), TTRMs: api.Ptr(int64(1))},
	)
	ds, err := e.c.Reserve(ctx, "d", api.ReserveRequest{Max: api.Ptr(2)})
	check(t, "reserve", err)
	equal(t, "reserved", len(ds), 2)
	// The leases end a millisecond on; with max_attempts 1 both go dead.
	var dead []api.MessageView
	e.AdvanceUntil(t, 100*time.Millisecond, "both messages dead", func() bool {
		dead, err = e.c.Dead(ctx, "d", 0)
		check(t, "dead", err)
		return len(dead) == 2
	})
	equal(t, "dead state", dead[0].State, api.StateDead)
	dead, err = e.c.Dead(ctx, "d", 1)
	check(t, "dead limit", err)
	equal(t, "dead limited", len(dead), 1)

	n, err := e.c.Redrive(ctx, "d", []string{res[0].ID})
	check(t, "redrive one", err)
	equal(t, "redriven", n, 1)
	// "ids": [] names no message: nothing is redriven (only leaving ids
	// out means all).
	a := e.do(http.MethodPost, "/v1/topics/d/dead/redrive", `{"ids":[]}`)
	equal(t, "redrive of ids: [] status", a.status, http.StatusOK)
	equal(t, "redrive of ids: []", strings.TrimSpace(string(a.body)), `{"redriven":0}`)
	dead, err = e.c.Dead(ctx, "d", 0)
	check(t, "dead", err)
	equal(t, "dead after a redrive of ids: []", len(dead), 1)
	n, err = e.c.Redrive(ctx, "d", nil)
	check(t, "redrive all", err)
	equal(t, "redriven all", n, 1)
	// An empty body means all as well.
	a = e.do(http.MethodPost, "/v1/topics/d/dead/redrive", "")
	equal(t, "empty redrive body", a.status, http.StatusOK)
}

func TestWheelAndSlot(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	res := e.mustEnqueue(
		api.Message{Topic: "w", Payload: api.TextBody("12345"), DelayMs: api.Ptr(int64(3000))},
		api.Message{Topic: "w", Payload: api.TextBody("far"), DelayMs: api.Ptr(int64(3 * 3600 * 1000))},
	)
	w, err := e.c.Wheel(ctx)
	check(t, "wheel", err)
	equal(t, "slots", w.Slots, 7200)
	equal(t, "tick", w.TickMs, int64(1000))
	// The cursor is the first second not expired yet: this one, or the one
	// before while its grace lasts.
	if w.CursorMs != startMs && w.CursorMs != startMs-1000 {
		t.Fatalf("cursor %d at %d", w.CursorMs, startMs)
	}
	equal(t, "horizon", w.HorizonMs, w.CursorMs+7200*1000)
	equal(t, "overflow", w.OverflowMessages, int64(1))
	equal(t, "nonempty", len(w.NonEmpty), 1)
	sec := (startMs + 3000) / 1000
	ne := w.NonEmpty[0]
	equal(t, "nonempty slot", ne, api.SlotSummary{Slot: wheel.SlotOf(sec), Second: sec, Messages: 1, Bytes: ne.Bytes})
	if ne.Bytes < 5 { // the slot file's record holds the body and more
		t.Fatalf("slot bytes %d for a 5-byte body", ne.Bytes)
	}

	s, err := e.c.Slot(ctx, wheel.SlotOf(sec), false)
	check(t, "slot", err)
	equal(t, "slot second", s.Second, sec)
	if s.Records != nil {
		t.Fatalf("records without ?records=true: %+v", s.Records)
	}
	s, err = e.c.Slot(ctx, wheel.SlotOf(sec), true)
	check(t, "slot records", err)
	equal(t, "records", len(s.Records), 1)
	equal(t, "record id", s.Records[0].ID, res[0].ID)
	empty := e.do(http.MethodGet, "/v1/wheel/slots/0?records=true", "")
	if !strings.Contains(string(empty.body), `"records":[]`) {
		t.Fatalf("an empty slot asked for records should list none: %s", empty.body)
	}
}

func TestClusterRoutes(t *testing.T) {
	t.Parallel() // the second member spends its start catching up
	// Raft's default timeouts: a second member must catch up in time.
	defaults := func(c *replication.Config) { c.HeartbeatTimeout, c.ElectionTimeout = 0, 0 }
	e := newEnvWith(t, transporttest.Options{Replication: defaults})
	ctx := t.Context()
	j := startJoiner(t, "n2", transporttest.Options{Clock: e.Clock, Replication: defaults})
	n2 := api.Node{ID: j.ID, RaftAddr: j.RaftAddr, HTTPAddr: j.Addr}
	check(t, "add node", e.c.AddNode(ctx, n2))
	c, err := e.c.Cluster(ctx)
	check(t, "cluster", err)
	equal(t, "leader", c.Leader, "n1")
	if c.Term < 1 {
		t.Fatalf("term %d", c.Term)
	}
	equal(t, "nodes", len(c.Nodes), 2)
	equal(t, "leader node", c.Nodes[0].Node, api.Node{ID: "n1", RaftAddr: c.Nodes[0].RaftAddr, HTTPAddr: e.Addr})
	equal(t, "leader state", c.Nodes[0].State, "leader")
	equal(t, "new node", c.Nodes[1].Node, n2)
	err = e.c.AddNode(ctx, api.Node{ID: "n1", RaftAddr: c.Nodes[0].RaftAddr, HTTPAddr: e.Addr})
	check(t, "adding a member again updates its addresses", err)
	check(t, "remove node", e.c.RemoveNode(ctx, "n2"))
	err = e.c.RemoveNode(ctx, "n2")
	if !client.HasCode(err, api.CodeNotFound) {
		t.Fatalf("removing a removed node: %v", err)
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	check(t, "healthz", e.c.Healthz(ctx))
	check(t, "readyz", e.c.Readyz(ctx))
	// A node that waits to be added to a cluster knows no leader.
	// Its 503s are answers to a probe, not failures: no warning each.
	var logs nettest.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	j := startJoiner(t, "n2", transporttest.Options{Clock: e.Clock, Server: func(c *transport.Config) { c.Logger = logger }})
	err := j.Client.Readyz(ctx)
	var ce *client.Error
	if !asClientError(err, &ce) || ce.Status != http.StatusServiceUnavailable || ce.RetryAfter != time.Second {
		t.Fatalf("readyz when not ready: %v", err)
	}
	if out := logs.String(); !strings.Contains(out, "/readyz") || strings.Contains(out, "level=WARN") {
		t.Fatalf("a 503 from /readyz: the server logged\n%s\nwant one debug line", out)
	}
	check(t, "healthz when not ready", j.Client.Healthz(ctx))
	m := e.do(http.MethodGet, "/metrics", "")
	equal(t, "metrics status", m.status, http.StatusOK)
	if !strings.HasPrefix(m.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics content type %q", m.header.Get("Content-Type"))
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	e := newEnv(t)
	a := e.do(http.MethodGet, "/v2/nothing", "")
	equal(t, "unknown route", a.status, http.StatusNotFound)
	equal(t, "code", a.errBody(t).Code, api.CodeNotFound)
	a = e.do(http.MethodPut, "/v1/messages", "{}")
	equal(t, "wrong method", a.status, http.StatusMethodNotAllowed)
	equal(t, "allow", a.header.Get("Allow"), "POST")
	a = e.do(http.MethodPatch, "/v1/messages/0123456789abcdef01234567", "")
	equal(t, "wrong method on id", a.status, http.StatusMethodNotAllowed)
	allow := strings.Split(a.header.Get("Allow"), ", ")
	if !slices.Contains(allow, "GET") || !slices.Contains(allow, "DELETE") {
		t.Fatalf("allow = %v", allow)
	}
	equal(t, "topics after refusals", e.topicCount(), 0)
}

// reserveSignal is the real backend, telling ch each time a long-poll
// reserve reaches it.
type reserveSignal struct {
	transport.Backend
	ch chan<- struct{}
}

func (r reserveSignal) Reserve(ctx context.Context, topic string, max int, wait, ttr time.Duration) ([]model.Delivery, error) {
	if wait > 0 {
		select {
		case r.ch <- struct{}{}:
		default:
		}
	}
	return r.Backend.Reserve(ctx, topic, max, wait, ttr)
}

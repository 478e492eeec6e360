package transport_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

// hookReq is one request a test receiver got.
type hookReq struct {
	header http.Header
	body   string
}

// receiver is a webhook endpoint that answers with status (or, when
// hang, only once the request is cancelled).
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	got      []hookReq
	status   int
	hang     bool
	canceled chan struct{} // a hanging request was cancelled
	stop     chan struct{} // closed at the end of the test: hanging requests return
}

func newReceiver(t *testing.T, status int, hang bool) *receiver {
	rc := &receiver{status: status, hang: hang, canceled: make(chan struct{}, 16), stop: make(chan struct{})}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, hookReq{header: r.Header.Clone(), body: string(b)})
		status := rc.status
		rc.mu.Unlock()
		if rc.hang {
			select {
			case <-r.Context().Done():
				rc.canceled <- struct{}{}
			case <-rc.stop:
			}
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(func() {
		close(rc.stop)
		rc.Close()
	})
	return rc
}

func (rc *receiver) requests() []hookReq {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]hookReq(nil), rc.got...)
}

func (e *env) setHook(topic string, req api.WebhookRequest) api.Webhook {
	e.t.Helper()
	w, err := e.c.SetWebhook(e.t.Context(), topic, req)
	check(e.t, "set webhook", err)
	return w
}

func TestWebhookSignedAndAcked(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	rc := newReceiver(t, http.StatusNoContent, false)
	a := e.do(http.MethodPut, "/v1/topics/h/webhook", `{"url":"`+rc.URL+`/in","secret":"s3cret-value"}`)
	equal(t, "put status", a.status, http.StatusOK)
	if strings.Contains(string(a.body), "s3cret-value") {
		t.Fatalf("the answer echoes the secret: %s", a.body)
	}
	got, err := e.c.Webhook(ctx, "h")
	check(t, "get webhook", err)
	equal(t, "stored", got, api.Webhook{Topic: "h", URL: rc.URL + "/in", TimeoutMs: 10000, MaxConcurrency: 100, HasSecret: true})

	res := e.mustEnqueue(api.Message{Topic: "h", Payload: api.TextBody(`{"order":42}`), Headers: map[string]string{"Content-Type": "application/json"}})
	e.Eventually(t, "the message posted and acked", func() bool {
		ts, err := e.c.Topics(ctx)
		check(t, "topics", err)
		return len(rc.requests()) == 1 && len(ts) == 1 && ts[0] == api.TopicCounts{Topic: "h"}
	})
	r := rc.requests()[0]
	equal(t, "body", r.body, `{"order":42}`)
	equal(t, "content type kept", r.header.Get("Content-Type"), "application/json")
	equal(t, "id", r.header.Get("Delaywheel-Id"), res[0].ID)
	equal(t, "topic", r.header.Get("Delaywheel-Topic"), "h")
	equal(t, "attempt", r.header.Get("Delaywheel-Attempt"), "1")
	equal(t, "deliver at", r.header.Get("Delaywheel-Deliver-At"), strconv.FormatInt(res[0].DeliverAtMs, 10))
	m := hmac.New(sha256.New, []byte("s3cret-value"))
	m.Write([]byte(res[0].ID + "." + strconv.FormatInt(res[0].DeliverAtMs, 10) + "." + r.body))
	equal(t, "signature", r.header.Get("Delaywheel-Signature"), "sha256="+hex.EncodeToString(m.Sum(nil)))
}

func TestWebhookRetriesWithBackoffThenDead(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	rc := newReceiver(t, http.StatusInternalServerError, false)
	e.setHook("r", api.WebhookRequest{URL: rc.URL})
	res := e.mustEnqueue(api.Message{Topic: "r", Payload: api.TextBody("x"), MaxAttempts: api.Ptr(int32(3))})
	start := e.now()
	// Attempt n fails; the next comes 1 s × 2^(n-1) later, by the clock.
	for attempt, backoff := 1, int64(1000); attempt <= 2; attempt, backoff = attempt+1, backoff*2 {
		e.Eventually(t, "attempt "+strconv.Itoa(attempt)+" failed and nacked", func() bool {
			v, err := e.c.Get(ctx, res[0].ID)
			return err == nil && len(rc.requests()) == attempt && v.State == api.StateDelayed
		})
		v, err := e.c.Get(ctx, res[0].ID)
		check(t, "get", err)
		equal(t, "due after the backoff", v.DeliverAtMs, e.now()+backoff)
		equal(t, "attempts", v.Attempts, int32(attempt))
		e.advance(time.Duration(backoff) * time.Millisecond)
	}
	e.Eventually(t, "dead after the third attempt", func() bool {
		dead, err := e.c.Dead(ctx, "r", 10)
		check(t, "dead", err)
		return len(dead) == 1
	})
	rs := rc.requests()
	equal(t, "requests", len(rs), 3)
	for i, r := range rs {
		equal(t, "attempt header", r.header.Get("Delaywheel-Attempt"), strconv.Itoa(i+1))
	}
	equal(t, "time the clock moved", e.now()-start, int64(3000))

	// Redriven, a dead message goes to the webhook again, attempts reset.
	rc.mu.Lock()
	rc.status = http.StatusOK
	rc.mu.Unlock()
	n, err := e.c.Redrive(ctx, "r", nil)
	check(t, "redrive", err)
	equal(t, "redriven", n, 1)
	e.Eventually(t, "the redriven message posted and acked", func() bool {
		ts, err := e.c.Topics(ctx)
		check(t, "topics", err)
		return len(rc.requests()) == 4 && len(ts) == 1 && ts[0] == api.TopicCounts{Topic: "r"}
	})
	equal(t, "attempt after the redrive", rc.requests()[3].header.Get("Delaywheel-Attempt"), "1")
}

func TestWebhookCancelledMessageNeverPosted(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	rc := newReceiver(t, http.StatusOK, false)
	e.setHook("c", api.WebhookRequest{URL: rc.URL})
	first := e.mustEnqueue(api.Message{Topic: "c", Payload: api.TextBody("cancelled"), DelayMs: api.Ptr(int64(5000))})
	_, err := e.c.Cancel(ctx, first[0].ID)
	check(t, "cancel", err)
	e.advance(6 * time.Second)
	second := e.mustEnqueue(api.Message{Topic: "c", Payload: api.TextBody("kept")})
	e.Eventually(t, "the later message posted", func() bool { return len(rc.requests()) >= 1 })
	rs := rc.requests()
	equal(t, "requests", len(rs), 1)
	equal(t, "only the kept message", rs[0].header.Get("Delaywheel-Id"), second[0].ID)
}

func TestWebhookDeletedMidFlight(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	rc := newReceiver(t, 0, true)
	e.setHook("d", api.WebhookRequest{URL: rc.URL, MaxConcurrency: api.Ptr(int64(1))})
	res := e.mustEnqueue(texts(2, "d")...)
	e.Eventually(t, "one request in flight", func() bool { return len(rc.requests()) == 1 })
	// A webhook topic hands nothing to consumers, though a message is due.
	ds, err := e.c.Reserve(ctx, "d", api.ReserveRequest{Max: api.Ptr(10)})
	check(t, "reserve", err)
	equal(t, "reserved from a webhook topic", len(ds), 0)
	a := e.do(http.MethodGet, "/v1/topics/d/stream", "")
	equal(t, "stream of a webhook topic", a.status, http.StatusConflict)

	_, err = e.c.DeleteWebhook(ctx, "d")
	check(t, "delete webhook", err)
	select {
	case <-rc.canceled:
	case <-time.After(20 * time.Second):
		t.Fatal("the request in flight was not cancelled")
	}
	ds, err = e.c.Reserve(ctx, "d", api.ReserveRequest{Max: api.Ptr(10), WaitMs: 20000})
	check(t, "reserve after delete", err)
	for len(ds) < 2 {
		more, err := e.c.Reserve(ctx, "d", api.ReserveRequest{Max: api.Ptr(10), WaitMs: 20000})
		check(t, "reserve after delete", err)
		ds = append(ds, more...)
	}
	inFlight := rc.requests()[0].header.Get("Delaywheel-Id")
	for _, d := range ds {
		if d.ID == inFlight && d.Attempt != 2 {
			t.Fatalf("the message in flight came back with attempt %d, want 2", d.Attempt)
		}
	}
	equal(t, "both messages", len(ds), len(res))
	equal(t, "no more requests", len(rc.requests()), 1)
	_, err = e.c.Webhook(ctx, "d")
	if !client404(err) {
		t.Fatalf("webhook after delete: %v, want 404", err)
	}
}

func client404(err error) bool { return err != nil && strings.Contains(err.Error(), "404") }

func TestWebhookValidation(t *testing.T) {
	e := newEnv(t, func(c *transport.Config) { c.WebhookAllow = []string{"hooks.example.com", "10.0.0.0/8"} })
	for _, c := range []struct{ body, field string }{
		{`{}`, "url"},
		{`{"url":"ftp://hooks.example.com/x"}`, "url"},
		{`{"url":"/relative"}`, "url"},
		{`{"url":"https://evil.example.net/x"}`, "evil.example.net"},
		{`{"url":"http://192.168.1.1/x"}`, "192.168.1.1"},
		{`{"url":"https://hooks.example.com/x","timeout_ms":-1}`, "timeout_ms"},
		{`{"url":"https://hooks.example.com/x","max_concurrency":-5}`, "max_concurrency"},
		{`{"url":"https://hooks.example.com/x","rate_per_s":-1}`, "rate_per_s"},
		{`{"url":"https://hooks.example.com/x","max_concurrency":0}`, "max_concurrency"},
		{`{"url":"https://hooks.example.com/x","url":"https://evil.example.net/x"}`, "url: given more than once"},
		{`{"url":"https://hooks.example.com/x","secret":"` + "\xff" + `"}`, "secret: must be valid UTF-8"},
		{`{"URL":"https://hooks.example.com/x"}`, `request body: unknown field "URL"`},
	} {
		a := e.do(http.MethodPut, "/v1/topics/v/webhook", c.body)
		equal(t, c.body+" status", a.status, http.StatusBadRequest)
		if msg := a.errBody(t).Message; !strings.Contains(msg, c.field) {
			t.Fatalf("%s: message %q does not name %s", c.body, msg, c.field)
		}
		equal(t, c.body+": nothing stored", e.do(http.MethodGet, "/v1/topics/v/webhook", "").status, http.StatusNotFound)
	}
	for _, url := range []string{"https://hooks.example.com/in", "http://10.1.2.3:8080/in"} {
		a := e.do(http.MethodPut, "/v1/topics/v/webhook", `{"url":"`+url+`","rate_per_s":0}`)
		equal(t, url+" allowed", a.status, http.StatusOK)
	}
	equal(t, "delete", e.do(http.MethodDelete, "/v1/topics/v/webhook", "").status, http.StatusOK)
	equal(t, "delete again", e.do(http.MethodDelete, "/v1/topics/v/webhook", "").status, http.StatusNotFound)
}

func TestWebhookReplicatedAndSentByTheNextLeader(t *testing.T) {
	c := startCluster(t, 3, transporttest.Options{})
	ctx := t.Context()
	rc := newReceiver(t, http.StatusOK, false)
	follower := c.Follower()
	_, err := follower.Client.SetWebhook(ctx, "f", api.WebhookRequest{URL: rc.URL, Secret: "k"})
	check(t, "set through a follower", err)
	for _, n := range c.Nodes {
		// A read is local: a replica answers once it has applied the write.
		n.Eventually(t, "the webhook replicated to "+n.ID, func() bool {
			got, err := n.Client.Webhook(ctx, "f")
			return err == nil && got.URL == rc.URL && got.HasSecret
		})
	}
	leader := handOver(t, c)
	res, err := leader.Client.Enqueue(ctx, texts(1, "f"))
	check(t, "enqueue", err)
	leader.Eventually(t, "posted by the new leader", func() bool { return len(rc.requests()) == 1 })
	equal(t, "id", rc.requests()[0].header.Get("Delaywheel-Id"), res[0].ID)
}

func TestWebhookConcurrencyAndRate(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	hang := newReceiver(t, 0, true)
	e.setHook("hang", api.WebhookRequest{URL: hang.URL, MaxConcurrency: api.Ptr(int64(3))})
	e.mustEnqueue(texts(10, "hang")...)
	// A receiver that never answers holds max_concurrency requests, and
	// the sender leases no more than that.
	e.Eventually(t, "three requests in flight, three leased", func() bool {
		ts, err := e.c.Topics(ctx)
		check(t, "topics", err)
		return len(hang.requests()) == 3 && len(ts) == 1 && ts[0].Reserved == 3 && ts[0].Ready == 7
	})

	ok := newReceiver(t, http.StatusOK, false)
	e.setHook("paced", api.WebhookRequest{URL: ok.URL, RatePerS: api.Ptr(int64(1))})
	e.mustEnqueue(texts(3, "paced")...)
	e.Eventually(t, "the first request", func() bool { return len(ok.requests()) == 1 })
	// The next start waits a second of the node's clock, which only the test moves.
	e.advance(time.Second)
	e.Eventually(t, "the second request a second later", func() bool { return len(ok.requests()) == 2 })
	equal(t, "requests after one second", len(ok.requests()), 2)
}

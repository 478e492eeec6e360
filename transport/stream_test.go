package transport_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/transporttest"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// lines is an open stream: its deliveries arrive on ch, which closes when
// the body ends.
type lines struct {
	ch     chan api.Delivery
	cancel context.CancelFunc
	status int
}

// openStream opens GET url and reads its NDJSON body in the background.
func openStream(t *testing.T, url string) *lines {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	check(t, "request", err)
	resp, err := http.DefaultClient.Do(req)
	check(t, "open stream", err)
	l := &lines{ch: make(chan api.Delivery, 100), cancel: cancel, status: resp.StatusCode}
	t.Cleanup(cancel)
	go func() {
		defer close(l.ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if len(strings.TrimSpace(sc.Text())) == 0 {
				continue
			}
			var d api.Delivery
			if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
				if ctx.Err() == nil { // a line cut by the end of the test is no fault
					t.Errorf("stream line %q: %v", sc.Text(), err)
				}
				return
			}
			l.ch <- d
		}
	}()
	return l
}

// next waits for the next delivery.
func (l *lines) next(t *testing.T) api.Delivery {
	t.Helper()
	select {
	case d, ok := <-l.ch:
		if !ok {
			t.Fatal("the stream ended")
		}
		return d
	case <-time.After(20 * time.Second):
		t.Fatal("no delivery on the stream")
	}
	return api.Delivery{}
}

// ended waits for the body to end, discarding deliveries.
func (l *lines) ended(t *testing.T) {
	t.Helper()
	for {
		select {
		case _, ok := <-l.ch:
			if !ok {
				return
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the stream did not end")
		}
	}
}

func texts(n int, topic string) []api.Message {
	out := make([]api.Message, n)
	for i := range out {
		out[i] = api.Message{Topic: topic, Payload: api.TextBody("m")}
	}
	return out
}

func TestStreamWindowAndAckFromAnotherConnection(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.mustEnqueue(texts(6, "w")...)
	s := openStream(t, e.URL+"/v1/topics/w/stream?max_inflight=2&ttr_ms=60000")
	equal(t, "status", s.status, http.StatusOK)
	first, second := s.next(t), s.next(t)
	equal(t, "lease from ttr_ms", first.LeaseExpiresMs, e.now()+60000)
	equal(t, "attempt", second.Attempt, int32(1))

	// An ack on another connection frees one place in the window.
	acked, err := e.c.Ack(ctx, []string{first.Receipt})
	check(t, "ack", err)
	equal(t, "acked", acked.Acked, 1)
	third := s.next(t)
	if third.ID == first.ID || third.ID == second.ID {
		t.Fatalf("third delivery %s repeats an earlier one", third.ID)
	}
	// The window is full again: the stream holds 2, the rest is left.
	ds, err := e.c.Reserve(ctx, "w", api.ReserveRequest{Max: api.Ptr(10)})
	check(t, "reserve", err)
	equal(t, "left for a reserve", len(ds), 3)
}

func TestStreamCloseReleasesDeliveries(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	res := e.mustEnqueue(texts(1, "r")...)
	s := openStream(t, e.URL+"/v1/topics/r/stream")
	d := s.next(t)
	equal(t, "id", d.ID, res[0].ID)
	s.cancel()
	s.ended(t)
	// Released at once, not at the lease's end: the clock does not move.
	ds, err := e.c.Reserve(ctx, "r", api.ReserveRequest{Max: api.Ptr(1), WaitMs: 20000})
	check(t, "reserve", err)
	equal(t, "redelivered", len(ds), 1)
	equal(t, "redelivered id", ds[0].ID, res[0].ID)
	equal(t, "attempt counted", ds[0].Attempt, int32(2))
	stale, err := e.c.Ack(ctx, []string{d.Receipt})
	check(t, "ack of the released receipt", err)
	equal(t, "released receipt is stale", stale.Stale, 1)
}

func TestStreamExpiredLeaseFreesWindow(t *testing.T) {
	e := newEnv(t)
	e.mustEnqueue(texts(2, "x")...)
	s := openStream(t, e.URL+"/v1/topics/x/stream?max_inflight=1&ttr_ms=1000")
	first := s.next(t)
	got := make(chan api.Delivery, 1)
	go func() { got <- s.next(t) }()
	e.AdvanceUntil(t, 500*time.Millisecond, "a second delivery after the first lease ended", func() bool {
		return len(got) == 1
	})
	if d := <-got; d.ID == first.ID && d.Attempt == 1 {
		t.Fatalf("delivery %s handed out twice in one attempt", d.ID)
	}
}

func TestStreamValidation(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ query, field string }{
		{"max_inflight=0", "max_inflight"},
		{"max_inflight=100001", "max_inflight"},
		{"max_inflight=x", "max_inflight"},
		{"ttr_ms=0", "ttr_ms"},
		{"ttr_ms=86400001", "ttr_ms"},
	} {
		a := e.do(http.MethodGet, "/v1/topics/v/stream?"+c.query, "")
		equal(t, c.query+" status", a.status, http.StatusBadRequest)
		if msg := a.errBody(t).Message; !strings.Contains(msg, c.field) {
			t.Fatalf("%s: message %q does not name %s", c.query, msg, c.field)
		}
	}
	a := e.do(http.MethodGet, "/v1/topics/bad%20topic/stream", "")
	equal(t, "bad topic status", a.status, http.StatusBadRequest)
	equal(t, "nothing stored", e.topicCount(), 0)
}

// A HEAD of a stream is refused 405, as the document has no such route:
// served as the GET it would hand out deliveries no one reads, each an
// attempt.
func TestStreamRefusesHead(t *testing.T) {
	e := newEnv(t)
	res := e.mustEnqueue(texts(1, "h")...)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, e.URL+"/v1/topics/h/stream", nil)
	check(t, "request", err)
	req.Close = true // a stream served would hold the connection
	resp, err := http.DefaultClient.Do(req)
	check(t, "head", err)
	resp.Body.Close()
	equal(t, "status", resp.StatusCode, http.StatusMethodNotAllowed)
	equal(t, "allow", resp.Header.Get("Allow"), "GET")
	ds, err := e.c.Reserve(t.Context(), "h", api.ReserveRequest{})
	check(t, "reserve", err)
	equal(t, "reserved", len(ds), 1)
	equal(t, "id", ds[0].ID, res[0].ID)
	equal(t, "attempt", ds[0].Attempt, int32(1))
}

func TestStreamThroughFollowerEndsOnLeaderChange(t *testing.T) {
	c := startCluster(t, 3, transporttest.Options{})
	ctx := t.Context()
	leader, follower := c.Leader(), c.Follower()
	s := openStream(t, follower.URL+"/v1/topics/f/stream")
	equal(t, "status", s.status, http.StatusOK)
	res, err := leader.Client.Enqueue(ctx, texts(1, "f"))
	check(t, "enqueue", err)
	d := s.next(t)
	equal(t, "delivered through the follower", d.ID, res[0].ID)
	acked, err := follower.Client.Ack(ctx, []string{d.Receipt})
	check(t, "ack through the follower", err)
	equal(t, "acked", acked.Acked, 1)

	leader.Node.StepDown()
	s.ended(t)
}

func TestSlowStreamReaderBlocksNoOne(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	// A stream nobody reads, with a window larger than its buffer.
	slow, err := e.Node.Node.Stream(ctx, "s", model.ConsumerOptions{MaxInflight: 5000})
	check(t, "open the slow stream", err)
	defer slow.Close()
	fast := openStream(t, e.URL+"/v1/topics/s/stream")
	fastGot := make(chan int, 1)
	go func() {
		n := 0
		for range fast.ch {
			n++
			select {
			case <-fastGot:
			default:
			}
			fastGot <- n
		}
	}()
	const total = 1500
	e.mustEnqueue(texts(total, "s")...)
	e.Eventually(t, "every message handed out to one of the streams", func() bool {
		ts, err := e.c.Topics(ctx)
		check(t, "topics", err)
		return len(ts) == 1 && ts[0].Reserved == total
	})
	// The dispatcher still serves other topics.
	res := e.mustEnqueue(texts(1, "other")...)
	ds, err := e.c.Reserve(ctx, "other", api.ReserveRequest{Max: api.Ptr(1), WaitMs: 20000})
	check(t, "reserve on another topic", err)
	equal(t, "other topic served", ds[0].ID, res[0].ID)

	got, err := slow.Next(ctx)
	check(t, "slow stream next", err)
	if len(got) > 1024 {
		t.Fatalf("the unread stream buffered %d deliveries, more than its buffer of 1024", len(got))
	}
	e.Eventually(t, "the fast stream got the rest", func() bool {
		select {
		case n := <-fastGot:
			fastGot <- n
			return n == total-len(got)
		default:
			return false
		}
	})
}

func TestStreamKeepalive(t *testing.T) {
	e := newEnv(t, func(c *transport.Config) { c.StreamKeepalive = 10 * time.Millisecond })
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.URL+"/v1/topics/k/stream", nil)
	check(t, "request", err)
	resp, err := http.DefaultClient.Do(req)
	check(t, "open stream", err)
	defer resp.Body.Close()
	equal(t, "content type", resp.Header.Get("Content-Type"), transport.ContentTypeNDJSON)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	check(t, "read a keepalive", err)
	equal(t, "keepalive line", line, "\n")
}

package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

// fakeStream hands out the deliveries it was given, then waits.
type fakeStream struct {
	ch     chan []model.Delivery
	closed chan struct{}
	once   sync.Once
	ended  chan error // cap 1: ends the stream with that error
}

func (f *fakeStream) Next(ctx context.Context) ([]model.Delivery, error) {
	select {
	case ds := <-f.ch:
		return ds, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-f.closed:
		return nil, model.ErrNotLeader
	case err := <-f.ended:
		return nil, err
	}
}

func (f *fakeStream) Close() { f.once.Do(func() { close(f.closed) }) }

// fakeNode records the settlements.
type fakeNode struct {
	st    *fakeStream
	mu    sync.Mutex
	acks  []model.Receipt
	nacks []int64 // delays
	done  chan struct{}
	opts  []model.ConsumerOptions
}

// Stream returns n.st, or a new one once n.st was closed.
func (n *fakeNode) Stream(_ string, opt model.ConsumerOptions) (model.Consumer, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.opts = append(n.opts, opt)
	select {
	case <-n.st.closed:
		n.st = newFakeStream()
	default:
	}
	return n.st, nil
}

func newFakeStream() *fakeStream {
	return &fakeStream{ch: make(chan []model.Delivery, 8), closed: make(chan struct{}), ended: make(chan error, 1)}
}

// stream returns the stream the node handed out last.
func (n *fakeNode) stream() *fakeStream {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.st
}

func (n *fakeNode) Ack(_ context.Context, rs []model.Receipt) (command.Counted, error) {
	n.mu.Lock()
	n.acks = append(n.acks, rs...)
	n.mu.Unlock()
	n.done <- struct{}{}
	return command.Counted{Done: len(rs)}, nil
}

func (n *fakeNode) Nack(_ context.Context, rs []model.Receipt, delayMs int64) (command.Counted, error) {
	n.mu.Lock()
	n.nacks = append(n.nacks, delayMs)
	n.mu.Unlock()
	n.done <- struct{}{}
	return command.Counted{Done: len(rs)}, nil
}

func newFake() *fakeNode {
	return &fakeNode{st: newFakeStream(), done: make(chan struct{}, 8)}
}

func (n *fakeNode) settled(t *testing.T) {
	t.Helper()
	select {
	case <-n.done:
	case <-time.After(20 * time.Second):
		t.Fatal("no ack or nack")
	}
}

func delivery(attempt int32) model.Delivery {
	b := make([]byte, model.IDLen)
	b[model.IDLen-1] = byte(attempt)
	id, _ := model.IDFromBytes(b)
	return model.Delivery{Message: model.Message{ID: id, Topic: "t", Body: []byte("b"), DeliverAtMs: 1000, LeaseExpiresMs: 1 << 60}, Attempt: attempt,
		Receipt: model.Receipt{ID: id, Nonce: uint64(attempt)}}
}

func TestSignIsHMACOfIDDueAndBody(t *testing.T) {
	m := hmac.New(sha256.New, []byte("k"))
	m.Write([]byte("abc.42.body"))
	if got, want := Sign("k", "abc", 42, []byte("body")), "sha256="+hex.EncodeToString(m.Sum(nil)); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

func TestFailuresBackOffExponentially(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	n := newFake()
	var outcomes []string
	var omu sync.Mutex
	s := New(n, Config{Clock: wheeltest.NewFakeClock(time.UnixMilli(5000)), Backoff: time.Second, MaxBackoff: 5 * time.Second,
		Observe: func(_, outcome string, _ float64) { omu.Lock(); outcomes = append(outcomes, outcome); omu.Unlock() }})
	defer s.Stop()
	s.Reconcile(func() []command.Webhook {
		return []command.Webhook{{Topic: "t", URL: srv.URL, TimeoutMs: 10000, MaxConcurrency: 1}}
	})
	want := []int64{1000, 2000, 4000, 5000}
	for i := range want {
		n.st.ch <- []model.Delivery{delivery(int32(i + 1))}
		n.settled(t)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, d := range want {
		if n.nacks[i] != d {
			t.Fatalf("nack delays %v, want %v", n.nacks, want)
		}
	}
	omu.Lock()
	defer omu.Unlock()
	if outcomes[0] != Outcome5xx {
		t.Fatalf("outcome %q, want 5xx", outcomes[0])
	}
}

func TestRefusedAndAcked(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	n := newFake()
	var outcome string
	s := New(n, Config{Observe: func(_, o string, _ float64) { outcome = o }})
	s.Reconcile(func() []command.Webhook {
		return []command.Webhook{{Topic: "t", URL: closed, TimeoutMs: 10000, MaxConcurrency: 1}}
	})
	n.st.ch <- []model.Delivery{delivery(1)}
	n.settled(t)
	s.Stop()
	if outcome != OutcomeRefused {
		t.Fatalf("outcome %q, want refused", outcome)
	}

	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer ok.Close()
	n = newFake()
	s = New(n, Config{})
	defer s.Stop()
	s.Reconcile(func() []command.Webhook {
		return []command.Webhook{{Topic: "t", URL: ok.URL, TimeoutMs: 10000, MaxConcurrency: 1}}
	})
	n.st.ch <- []model.Delivery{delivery(1)}
	n.settled(t)
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.acks) != 1 || len(n.nacks) != 0 {
		t.Fatalf("acks %v nacks %v", n.acks, n.nacks)
	}
}

func TestHostNotAllowedIsNeverDialed(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
	}))
	defer srv.Close()
	n := newFake()
	s := New(n, Config{Allow: func(host string) error { return errors.New("not allowed: " + host) }})
	defer s.Stop()
	s.Reconcile(func() []command.Webhook {
		return []command.Webhook{{Topic: "t", URL: srv.URL, TimeoutMs: 10000, MaxConcurrency: 1}}
	})
	n.st.ch <- []model.Delivery{delivery(1)}
	n.settled(t)
	n.mu.Lock()
	nacks := len(n.nacks)
	n.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if calls != 0 || nacks != 1 {
		t.Fatalf("%d requests, %d nacks; want 0 and 1", calls, nacks)
	}
}

// With rate_per_s, the stream holds no more deliveries than can start
// before their lease ends.
func TestRateLimitsTheWindow(t *testing.T) {
	n := newFake()
	s := New(n, Config{Clock: wheeltest.NewFakeClock(time.UnixMilli(5000))})
	defer s.Stop()
	s.Reconcile(func() []command.Webhook {
		return []command.Webhook{{Topic: "t", URL: "http://127.0.0.1:1", TimeoutMs: 1000, MaxConcurrency: 100, RatePerS: 1}}
	})
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.opts) != 1 || n.opts[0].MaxInflight != 11 {
		t.Fatalf("stream options %+v, want a window of 11 (1/s over an 11 s lease)", n.opts)
	}
}

// A delivery whose lease could end before its request's timeout is
// dropped unsent, neither acked nor nacked.
func TestDeliveryWithShortLeaseIsNotSent(t *testing.T) {
	var mu sync.Mutex
	var attempts []string
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		attempts = append(attempts, r.Header.Get(HeaderAttempt))
		mu.Unlock()
	}))
	defer srv.Close()
	n := newFake()
	s := New(n, Config{Clock: wheeltest.NewFakeClock(time.UnixMilli(5000))})
	s.Reconcile(func() []command.Webhook {
		return []command.Webhook{{Topic: "t", URL: srv.URL, TimeoutMs: 1000, MaxConcurrency: 2}}
	})
	short, ok := delivery(1), delivery(2)
	short.LeaseExpiresMs = 5500 // ends 500 ms from now, before a 1 s timeout could pass
	n.st.ch <- []model.Delivery{short, ok}
	n.settled(t)
	s.Stop() // waits for every send
	n.mu.Lock()
	defer n.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 1 || attempts[0] != "2" || len(n.acks) != 1 || len(n.nacks) != 0 {
		t.Fatalf("requests of attempts %v, %d acks, %d nacks; want only attempt 2, acked", attempts, len(n.acks), len(n.nacks))
	}
}

// A redirect is not followed: it is a failed attempt counted as 3xx.
func TestRedirectIsA3xxFailure(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	}))
	defer srv.Close()
	n := newFake()
	var mu sync.Mutex
	var outcomes []string
	s := New(n, Config{Observe: func(_, o string, _ float64) { mu.Lock(); outcomes = append(outcomes, o); mu.Unlock() }})
	s.Reconcile(func() []command.Webhook {
		return []command.Webhook{{Topic: "t", URL: srv.URL, TimeoutMs: 10000, MaxConcurrency: 1}}
	})
	n.st.ch <- []model.Delivery{delivery(1)}
	n.settled(t)
	s.Stop()
	n.mu.Lock()
	defer n.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if len(outcomes) != 1 || outcomes[0] != Outcome3xx || len(n.nacks) != 1 {
		t.Fatalf("outcomes %v, %d nacks; want [3xx] and a nack", outcomes, len(n.nacks))
	}
}

// A stream that ends while the webhook is still wanted is reopened after
// a pause, and the sender goes on with the new one.
func TestEndedStreamIsReopened(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer ok.Close()
	n := newFake()
	clk := wheeltest.NewFakeClock(time.UnixMilli(5000))
	s := New(n, Config{Clock: clk})
	defer s.Stop()
	s.Reconcile(func() []command.Webhook {
		return []command.Webhook{{Topic: "t", URL: ok.URL, TimeoutMs: 1000, MaxConcurrency: 1}}
	})
	first := n.stream()
	first.ended <- model.ErrUnavailable
	deadline := time.Now().Add(20 * time.Second)
	for n.stream() == first {
		if time.Now().After(deadline) {
			t.Fatal("the stream was not reopened")
		}
		clk.Advance(100 * time.Millisecond)
		time.Sleep(time.Millisecond)
	}
	n.stream().ch <- []model.Delivery{delivery(1)}
	n.settled(t)
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.acks) != 1 || len(n.opts) != 2 || n.opts[1] != n.opts[0] {
		t.Fatalf("%d acks, stream options %+v; want 1 ack and a second stream like the first", len(n.acks), n.opts)
	}
}

// A message header HTTP cannot carry (a name that is no token, a value
// with CR or LF) or that the client writes itself is left out of the
// request, with a warning, and the rest is delivered: the client would
// refuse the whole request, and every attempt would fail alike until the
// message went dead.
func TestUnsendableHeadersAreLeftOut(t *testing.T) {
	_, h, n, logged := deliverWithHeaders(t, "", map[string]string{"a b": "v", "X-Injected": "a\r\nEvil: 1", "Content-Length": "99", "X-Ok": "yes"})
	if h.Get("X-Ok") != "yes" || h.Get("X-Injected") != "" || h.Get("Evil") != "" || h.Get("Content-Length") == "99" {
		t.Fatalf("request headers %v", h)
	}
	n.mu.Lock()
	acks := len(n.acks)
	n.mu.Unlock()
	if acks != 1 {
		t.Fatalf("%d acks, want 1", acks)
	}
	for _, name := range []string{`header="a b"`, "header=X-Injected", "header=Content-Length"} {
		if !strings.Contains(logged(), name) {
			t.Errorf("no warning naming %s in %q", name, logged())
		}
	}
}

// A message header named like the sender's own (Delaywheel-*, in any
// letter case) is left out of the request, with a warning: the receiver
// sees the sender's Delaywheel-Id and Delaywheel-Signature, or none when
// the webhook has no secret, never the message's forged ones.
func TestMessageCannotSetSenderHeaders(t *testing.T) {
	for _, secret := range []string{"", "s3cret"} {
		t.Run("secret="+secret, func(t *testing.T) {
			d, h, _, logged := deliverWithHeaders(t, secret, map[string]string{"delaywheel-signature": "forged", "Delaywheel-Id": "x", "DELAYWHEEL-EXTRA": "y", "X-Ok": "yes"})
			wantSig := ""
			if secret != "" {
				wantSig = Sign(secret, d.ID.String(), d.DeliverAtMs, d.Body)
			}
			if ids := h.Values(HeaderID); len(ids) != 1 || ids[0] != d.ID.String() {
				t.Errorf("%s %q, want [%s]", HeaderID, ids, d.ID)
			}
			if sigs := h.Values(HeaderSignature); (wantSig == "" && len(sigs) != 0) || (wantSig != "" && (len(sigs) != 1 || sigs[0] != wantSig)) {
				t.Errorf("%s %q, want %q", HeaderSignature, sigs, wantSig)
			}
			if h.Get("Delaywheel-Extra") != "" || h.Get("X-Ok") != "yes" {
				t.Errorf("request headers %v", h)
			}
			for _, name := range []string{"header=delaywheel-signature", "header=Delaywheel-Id", "header=DELAYWHEEL-EXTRA"} {
				if !strings.Contains(logged(), name) {
					t.Errorf("no warning naming %s in %q", name, logged())
				}
			}
		})
	}
}

// deliverWithHeaders delivers one message carrying headers to a webhook of
// topic t signed with secret (none when empty), and returns the message,
// the headers of the request its receiver got, the node (its acks) and
// what the sender has logged so far.
func deliverWithHeaders(t *testing.T, secret string, headers map[string]string) (model.Delivery, http.Header, *fakeNode, func() string) {
	t.Helper()
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() }))
	t.Cleanup(srv.Close)
	var logs strings.Builder
	var logMu sync.Mutex
	n := newFake()
	s := New(n, Config{Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))})
	t.Cleanup(func() { s.Stop() }) // before srv.Close: cleanups run last first
	s.Reconcile(func() []command.Webhook {
		return []command.Webhook{{Topic: "t", URL: srv.URL, TimeoutMs: 10000, MaxConcurrency: 1, Secret: secret}}
	})
	d := delivery(1)
	d.Headers = headers
	n.st.ch <- []model.Delivery{d}
	n.settled(t)
	var h http.Header
	select {
	case h = <-got:
	default:
		t.Fatal("the message was settled without a request reaching the receiver")
	}
	logged := func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.String()
	}
	return d, h, n, logged
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// The warning for a header left out is logged once a second per topic,
// header and reason, with the count of those left out, however many
// messages carry the header.
func TestLeftOutHeaderWarnedOncePerSecond(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	var logged strings.Builder
	var logMu sync.Mutex
	n := newFake()
	clock := wheeltest.NewFakeClock(time.Unix(1_700_000_000, 0))
	s := New(n, Config{Clock: clock, Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, nil))})
	defer s.Stop()
	s.Reconcile(func() []command.Webhook {
		return []command.Webhook{{Topic: "t", URL: srv.URL, TimeoutMs: 10000, MaxConcurrency: 1}}
	})
	deliver := func(attempts ...int32) {
		for _, a := range attempts {
			d := delivery(a)
			d.Headers = map[string]string{"Host": "elsewhere"}
			n.stream().ch <- []model.Delivery{d}
			n.settled(t)
		}
	}
	warnings := func() []string {
		logMu.Lock()
		defer logMu.Unlock()
		var out []string
		for _, l := range strings.Split(logged.String(), "\n") {
			if strings.Contains(l, "header is left out") {
				out = append(out, l)
			}
		}
		return out
	}
	deliver(1, 2, 3, 4, 5)
	if w := warnings(); len(w) != 1 {
		t.Fatalf("five messages with the header within a second: %d warnings, want 1:\n%s", len(w), strings.Join(w, "\n"))
	}
	clock.Advance(time.Second)
	deliver(6)
	w := warnings()
	if len(w) != 2 || !strings.Contains(w[1], "repeated=4") {
		t.Fatalf("a second later: %d warnings, want 2, the second with repeated=4:\n%s", len(w), strings.Join(w, "\n"))
	}
}

// A Reconcile that comes after Stop (a webhook set as leadership ends)
// starts nothing: no stream is opened and no goroutine is left running.
func TestReconcileAfterStopStartsNothing(t *testing.T) {
	n := newFake()
	s := New(n, Config{})
	s.Stop()
	s.Reconcile(func() []command.Webhook {
		return []command.Webhook{{Topic: "t", URL: "http://127.0.0.1:1/", MaxConcurrency: 1, TimeoutMs: 1000}}
	})
	n.mu.Lock()
	opened := len(n.opts)
	n.mu.Unlock()
	s.mu.Lock()
	running := len(s.topics)
	s.mu.Unlock()
	if opened != 0 || running != 0 {
		t.Fatalf("after Stop, Reconcile opened %d streams and runs %d topic senders; want none", opened, running)
	}
}

// A request held back by rate_per_s starts once the clock reads its turn,
// even when the clock reached it while the sender armed its wait: nothing
// need move the clock again.
func TestRateStartsWhenClockMovesWhileArming(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer ok.Close()
	n := newFake()
	clk := wheeltest.NewMovingClock(time.UnixMilli(5000)) // its first timer is the second request's turn
	s := New(n, Config{Clock: clk})
	defer s.Stop()
	s.Reconcile(func() []command.Webhook {
		return []command.Webhook{{Topic: "t", URL: ok.URL, TimeoutMs: 1000, MaxConcurrency: 2, RatePerS: 1}}
	})
	n.st.ch <- []model.Delivery{delivery(1), delivery(2)}
	n.settled(t)
	n.settled(t)
	if now := clk.Now().UnixMilli(); now != 6000 {
		t.Fatalf("the clock reads %d, want 6000 (the second request's turn)", now)
	}
}

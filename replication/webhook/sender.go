package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/replication/logrepeat"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Header names of a webhook request.
const (
	HeaderID        = "Delaywheel-Id"
	HeaderTopic     = "Delaywheel-Topic"
	HeaderAttempt   = "Delaywheel-Attempt"
	HeaderDeliverAt = "Delaywheel-Deliver-At"
	HeaderSignature = "Delaywheel-Signature"
)

// senderPrefix begins the name of every header the sender sets; a
// message header so named is left out of the request.
const senderPrefix = "Delaywheel-"

// hasSenderPrefix reports whether name begins with senderPrefix, in any
// letter case.
func hasSenderPrefix(name string) bool {
	return len(name) >= len(senderPrefix) && strings.EqualFold(name[:len(senderPrefix)], senderPrefix)
}

// Outcomes of a request, as the metrics count them.
const (
	Outcome2xx     = "2xx"
	Outcome3xx     = "3xx" // redirects are not followed: a failed attempt
	Outcome4xx     = "4xx"
	Outcome5xx     = "5xx"
	OutcomeTimeout = "timeout"
	OutcomeRefused = "refused"
)

// Queue is what the sender needs from the leader it runs on.
type Queue interface {
	// Stream opens a dispatcher stream of topic (see model.Consumer).
	Stream(topic string, opt model.ConsumerOptions) (model.Consumer, error)
	// Ack finishes deliveries.
	Ack(ctx context.Context, rs []model.Receipt) (command.Counted, error)
	// Nack returns deliveries to delayed, due delayMs from now.
	Nack(ctx context.Context, rs []model.Receipt, delayMs int64) (command.Counted, error)
}

// Config shapes a Sender; zero fields take their defaults.
type Config struct {
	// Clock spaces the starts (rate_per_s) and times lateness (default:
	// the system clock).
	Clock wheel.Clock
	// Logger receives the sender's warnings (default: discarded).
	Logger *slog.Logger
	// Client sends the requests (default: a client of its own).
	Client *http.Client
	// Backoff is the delay after a first failed attempt; each further
	// failure doubles it, up to MaxBackoff (defaults 1 s and 1 h).
	Backoff, MaxBackoff time.Duration
	// SettleTimeout bounds each ack or nack (default 10 s).
	SettleTimeout time.Duration
	// Observe, when set, hears each request's outcome and its lateness
	// in seconds (start minus due time).
	Observe func(topic, outcome string, lateness float64)
	// Allow, when set, says whether a URL's host may be called; a host it
	// refuses is a failed attempt (OutcomeRefused), never dialed.
	Allow func(host string) error
}

// Sender sends the due messages of every topic with a webhook.
type Sender struct {
	n   Queue
	cfg Config
	// repeats logs each cause of a per-delivery warning (a header left
	// out, a host not allowed) at most once a second, with the count of
	// those left out: every message of a topic may carry it.
	repeats *logrepeat.Limiter
	mu      sync.Mutex
	topics  map[string]*topicSender
	stopped bool // Stop ran: Reconcile starts nothing more
}

// New returns a sender with no topic; Reconcile starts them.
func New(n Queue, cfg Config) *Sender {
	if cfg.Clock == nil {
		cfg.Clock = wheel.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Client == nil {
		// A topic keeps up to max_concurrency requests in flight to one
		// host, so the transport keeps an idle connection for each of them:
		// with the default two per host, every request beyond the second
		// would open (and then close) a connection of its own.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = 0 // no limit across hosts; each host's is below
		tr.MaxIdleConnsPerHost = maxIdlePerHost
		cfg.Client = &http.Client{
			Transport:     tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = time.Hour
	}
	if cfg.SettleTimeout <= 0 {
		cfg.SettleTimeout = 10 * time.Second
	}
	return &Sender{n: n, cfg: cfg, repeats: logrepeat.New(time.Second, cfg.Clock.Now), topics: map[string]*topicSender{}}
}

// Reconcile makes the running topic senders those current returns: it
// starts the new ones, restarts the changed ones and stops the removed
// ones. It reads current under its lock, so concurrent calls leave the
// senders of the latest config. After Stop it does nothing: a caller
// that found the sender just before leadership ended would otherwise start
// senders nothing stops.
func (s *Sender) Reconcile(current func() []command.Webhook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	want := map[string]command.Webhook{}
	for _, h := range current() {
		want[h.Topic] = h
	}
	for topic, ts := range s.topics {
		if h, ok := want[topic]; !ok || h != ts.hook {
			ts.stop()
			delete(s.topics, topic)
		}
	}
	for topic, h := range want {
		if _, ok := s.topics[topic]; ok {
			continue
		}
		ts, err := s.start(h)
		if err != nil {
			s.cfg.Logger.Warn("starting a webhook sender", "topic", topic, "err", err)
			continue
		}
		s.topics[topic] = ts
	}
}

// Stop stops every topic sender, for good.
func (s *Sender) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for topic, ts := range s.topics {
		ts.stop()
		delete(s.topics, topic)
	}
}

// topicSender sends one topic's deliveries.
type topicSender struct {
	s      *Sender
	hook   command.Webhook
	opt    model.ConsumerOptions
	st     model.Consumer // replaced only by run; stop reads it after run ended
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the loop, the settlers and the requests in flight
	next   time.Time      // earliest start of the next request (rate_per_s)
	settle chan settlement
}

// maxIdlePerHost bounds the idle connections the default client keeps to
// one host (each one a file descriptor): a topic whose max_concurrency is
// above it keeps only that many connections open between requests.
const maxIdlePerHost = 1024

// settlement is a delivery answered, to be acked (ok) or nacked.
type settlement struct {
	d  model.Delivery
	ok bool
}

// Settling. Answers are acked and nacked in batches by a few settlers:
// every Ack or Nack is one Raft entry, committed on a majority (the
// stream's window frees its room once the entry is submitted), so one
// entry per request would spend the leader's CPU on entries rather than
// requests. A settler takes whatever answers are waiting, up to
// maxSettleBatch, as one entry; while it waits for the commit, the next
// answers gather for another settler.
const (
	settlers       = 4
	maxSettleBatch = 1000
)

func (s *Sender) start(h command.Webhook) (*topicSender, error) {
	// The lease outlasts the request, so no answer comes after its
	// lease ended and the message went to another attempt.
	ttr := time.Duration(h.TimeoutMs)*time.Millisecond + 10*time.Second
	opt := model.ConsumerOptions{MaxInflight: window(h, ttr), TTR: ttr}
	st, err := s.n.Stream(h.Topic, opt)
	if err != nil {
		return nil, err
	}
	ts := &topicSender{s: s, hook: h, opt: opt, st: st, settle: make(chan settlement, opt.MaxInflight)}
	ts.ctx, ts.cancel = context.WithCancel(context.Background())
	ts.wg.Add(1 + settlers)
	go ts.run()
	for range settlers {
		go ts.settler()
	}
	return ts, nil
}

// window is how many deliveries the sender's stream may hold: at most
// max_concurrency, and with rate_per_s no more than can start before the
// lease they were taken with ends.
func window(h command.Webhook, lease time.Duration) int {
	w := max(h.MaxConcurrency, 1)
	if h.RatePerS > 0 {
		w = min(w, max(1, h.RatePerS*int64(lease/time.Second)))
	}
	return int(w)
}

// stop cancels the requests in flight, then closes the stream, which
// releases every delivery not acked for redelivery.
func (ts *topicSender) stop() {
	ts.cancel()
	ts.wg.Wait()
	ts.st.Close()
}

func (ts *topicSender) run() {
	defer ts.wg.Done()
	for {
		ds, err := ts.st.Next(ts.ctx)
		if err != nil {
			if ts.ctx.Err() != nil || !ts.reopen(err) {
				return
			}
			continue
		}
		for _, d := range ds {
			if !ts.pace() {
				return
			}
			ts.wg.Add(1)
			go ts.send(d)
		}
	}
}

// reopenMax bounds the pause between attempts to reopen a stream.
const reopenMax = 30 * time.Second

// reopen replaces the stream that ended with err while the webhook is
// still wanted, pausing before each attempt. It returns false when the
// sender stops or the node no longer leads (the sender is then stopped).
func (ts *topicSender) reopen(err error) bool {
	cfg := ts.s.cfg
	cfg.Logger.Warn("webhook stream ended; reopening it", "topic", ts.hook.Topic, "err", err)
	ts.st.Close()
	for wait := cfg.Backoff; ; wait = min(2*wait, reopenMax) {
		select {
		case <-ts.ctx.Done():
			return false
		case <-cfg.Clock.After(wait):
		}
		st, err := ts.s.n.Stream(ts.hook.Topic, ts.opt)
		if err == nil {
			ts.st = st
			return true
		}
		if errors.Is(err, model.ErrNotLeader) {
			return false
		}
		cfg.Logger.Warn("reopening a webhook stream", "topic", ts.hook.Topic, "err", err)
	}
}

// pace waits until the next request may start (rate_per_s).
func (ts *topicSender) pace() bool {
	if ts.hook.RatePerS <= 0 {
		return ts.ctx.Err() == nil
	}
	clk := ts.s.cfg.Clock
	now := clk.Now()
	if ts.next.After(now) {
		select {
		case <-ts.ctx.Done():
			return false
		case <-clk.At(ts.next):
		}
		now = ts.next
	}
	ts.next = now.Add(time.Second / time.Duration(ts.hook.RatePerS))
	return true
}

// Sign returns the Delaywheel-Signature value of a request: the hex
// HMAC-SHA256 of "<id>.<deliver_at_ms>.<body>" with secret.
func Sign(secret, id string, deliverAtMs int64, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	io.WriteString(m, id+"."+strconv.FormatInt(deliverAtMs, 10)+".")
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// send POSTs one delivery and settles it by the answer.
func (ts *topicSender) send(d model.Delivery) {
	defer ts.wg.Done()
	cfg := ts.s.cfg
	h := ts.hook
	now := cfg.Clock.Now().UnixMilli()
	if d.LeaseExpiresMs-h.TimeoutMs < now {
		// Its lease could end before the request does: the message may be
		// handed out again meanwhile, so this delivery is dropped unsent
		// and its lease left to end.
		cfg.Logger.Debug("webhook delivery dropped: its lease ends too soon", "topic", h.Topic, "id", d.ID)
		return
	}
	late := float64(now-d.DeliverAtMs) / 1000
	outcome := ts.post(d)
	if ts.ctx.Err() != nil {
		return // removed or leadership lost: the stream's close releases it
	}
	if cfg.Observe != nil {
		cfg.Observe(h.Topic, outcome, late)
	}
	select {
	case ts.settle <- settlement{d: d, ok: outcome == Outcome2xx}:
	case <-ts.ctx.Done(): // the stream's close releases it
	}
}

// settler acks and nacks answered deliveries in batches until the sender
// stops.
func (ts *topicSender) settler() {
	defer ts.wg.Done()
	for {
		var batch []settlement
		select {
		case <-ts.ctx.Done():
			return
		case st := <-ts.settle:
			batch = append(batch, st)
		}
	gather:
		for len(batch) < maxSettleBatch {
			select {
			case st := <-ts.settle:
				batch = append(batch, st)
			default:
				break gather
			}
		}
		ts.settleBatch(batch)
	}
}

// settleBatch acks the batch's successes in one entry, and nacks its
// failures in one entry per backoff.
func (ts *topicSender) settleBatch(batch []settlement) {
	cfg := ts.s.cfg
	ctx, cancel := context.WithTimeout(ts.ctx, cfg.SettleTimeout)
	defer cancel()
	var acks []model.Receipt
	nacks := map[int64][]model.Receipt{}
	for _, st := range batch {
		if st.ok {
			acks = append(acks, st.d.Receipt)
		} else {
			delay := ts.backoff(st.d.Attempt).Milliseconds()
			nacks[delay] = append(nacks[delay], st.d.Receipt)
		}
	}
	report := func(what string, n int, err error) {
		if err != nil && ts.ctx.Err() == nil {
			cfg.Logger.Warn("settling webhook deliveries; their leases end on their own", "topic", ts.hook.Topic, "what", what, "deliveries", n, "err", err)
		}
	}
	if len(acks) > 0 {
		_, err := ts.s.n.Ack(ctx, acks)
		report("ack", len(acks), err)
	}
	for delay, rs := range nacks {
		_, err := ts.s.n.Nack(ctx, rs, delay)
		report("nack", len(rs), err)
	}
}

// backoff is the delay before the attempt after a failed attempt.
func (ts *topicSender) backoff(attempt int32) time.Duration {
	b := ts.s.cfg.Backoff
	for i := int32(1); i < attempt && b < ts.s.cfg.MaxBackoff; i++ {
		b *= 2
	}
	return min(b, ts.s.cfg.MaxBackoff)
}

// post sends the request and classifies its outcome.
func (ts *topicSender) post(d model.Delivery) string {
	h := ts.hook
	ctx, cancel := context.WithTimeout(ts.ctx, time.Duration(h.TimeoutMs)*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(d.Body))
	if err != nil {
		return OutcomeRefused
	}
	if allow := ts.s.cfg.Allow; allow != nil {
		if err := allow(req.URL.Hostname()); err != nil {
			ts.s.repeats.Log(ts.s.cfg.Logger, slog.LevelWarn, "host\x00"+h.Topic+"\x00"+err.Error(),
				"webhook host not allowed", "topic", h.Topic, "err", err)
			return OutcomeRefused
		}
	}
	for k, v := range d.Headers {
		var why string
		switch err := api.CheckHeader(k, v); {
		case err != nil:
			// The enqueue refuses such a header; one stored before the
			// rule is left out, as the client would refuse the whole
			// request for it.
			why = err.Error()
		case hasSenderPrefix(k):
			// The sender's headers are its own: a message's
			// Delaywheel-Signature would pass for the sender's when the
			// webhook has no secret.
			why = "name is reserved: the sender sets " + senderPrefix + "* headers itself"
		}
		if why != "" {
			ts.s.repeats.Log(ts.s.cfg.Logger, slog.LevelWarn, "header\x00"+h.Topic+"\x00"+k+"\x00"+why,
				"webhook: a message header is left out of the request", "topic", h.Topic,
				"id", d.ID.String(), "header", k, "why", why)
			continue
		}
		req.Header.Set(k, v)
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	id := d.ID.String()
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTopic, d.Topic)
	req.Header.Set(HeaderAttempt, strconv.Itoa(int(d.Attempt)))
	req.Header.Set(HeaderDeliverAt, strconv.FormatInt(d.DeliverAtMs, 10))
	if h.Secret != "" {
		req.Header.Set(HeaderSignature, Sign(h.Secret, id, d.DeliverAtMs, d.Body))
	}
	resp, err := ts.s.cfg.Client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return OutcomeTimeout
		}
		return OutcomeRefused
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return Outcome2xx
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return Outcome3xx
	case resp.StatusCode < 500:
		return Outcome4xx
	default:
		return Outcome5xx
	}
}

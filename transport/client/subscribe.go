package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
)

// maxStreamLine bounds one line of a stream: a delivery of the largest
// body the server takes, encoded.
const maxStreamLine = 64 << 20

// SubscribeOptions shape a Subscription. The zero value is fine.
type SubscribeOptions struct {
	// MaxInflight is the server's window: deliveries handed out and not
	// yet acked (0: the server's default, 1000).
	MaxInflight int
	// TTRMs is each delivery's lease (0: each message's own).
	TTRMs int64
	// AckBatch bounds the receipts of one ack call (default 1000).
	AckBatch int
	// Ackers is how many ack calls may be in flight at once (default 1).
	// With one, the receipts that arrive while a call is in flight all go
	// in the next call: a busy stream's acks take one log entry per round
	// trip instead of competing with its own leases for commits, which is
	// what holds its lateness down. Raise it only when one call's round
	// trip cannot carry the stream's ack rate.
	Ackers int
	// Buffer is the capacity of Deliveries (default 256).
	Buffer int
	// OnError, when set, hears every error the subscription recovers from
	// by itself: a stream that ended or could not open, a failed ack.
	OnError func(error)
}

// feed is what both subscriptions share: the deliveries handed out, the
// receipts queued for ack, and why the subscription ended.
type feed struct {
	topic string
	opt   SubscribeOptions
	out   chan api.Delivery
	acks  chan string
	nacks nacker

	mu  sync.Mutex
	err error
}

// nacker is the client whose Nack call a subscription nacks with.
type nacker interface {
	Nack(ctx context.Context, receipts []string, delayMs int64) (api.NackResponse, error)
}

// newFeed returns the feed of topic, with opt's defaults set, whose ack
// queue holds the batches of opt.Ackers ackers (or one, with ackers
// false) or a window, whichever is more.
func newFeed(topic string, opt SubscribeOptions, ackers bool, nacks nacker) *feed {
	if opt.AckBatch <= 0 {
		opt.AckBatch = 1000
	}
	if opt.Ackers <= 0 {
		opt.Ackers = 1
	}
	if opt.Buffer <= 0 {
		opt.Buffer = 256
	}
	queue := opt.AckBatch
	if ackers {
		queue *= opt.Ackers
	}
	return &feed{topic: topic, opt: opt, out: make(chan api.Delivery, opt.Buffer),
		acks: make(chan string, max(queue, opt.MaxInflight)), nacks: nacks}
}

// Deliveries returns the channel of deliveries. It is closed once the
// subscription ends.
func (f *feed) Deliveries() <-chan api.Delivery { return f.out }

// Nack returns d to delayed, due delayMs from now, at once.
func (f *feed) Nack(ctx context.Context, d api.Delivery, delayMs int64) error {
	_, err := f.nacks.Nack(ctx, []string{d.Receipt}, delayMs)
	return err
}

// Err returns why the subscription ended, once Deliveries is closed: nil
// after Close or the end of its context.
func (f *feed) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *feed) report(err error) {
	if f.opt.OnError != nil {
		f.opt.OnError(err)
	}
}

// reconnect reads one stream after another with read until ctx ends or
// after says to stop, then closes the deliveries. after looks at why a
// stream ended: whether the subscription ends (with final, for Err), and
// how long to pause before the next (0: the pause, from 10 ms, doubling
// while the streams deliver nothing, up to a second).
func (f *feed) reconnect(ctx context.Context, read func() (got bool, err error), after func(err error) (stop bool, wait time.Duration, final error)) {
	defer close(f.out)
	pause := 10 * time.Millisecond
	for {
		got, err := read()
		if ctx.Err() != nil {
			return
		}
		stop, wait, final := after(err)
		if stop {
			f.mu.Lock()
			f.err = final
			f.mu.Unlock()
			return
		}
		if got {
			pause = 10 * time.Millisecond
		}
		if wait <= 0 {
			wait = pause
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		pause = min(2*pause, time.Second)
	}
}

// nextBatch refills batch with the receipts queued, up to AckBatch: it
// waits for the first until stop or cut closes, then takes what is
// queued. stopped says stop closed; ok is false when cut closed first.
func (f *feed) nextBatch(batch []string, stop, cut <-chan struct{}) (out []string, stopped, ok bool) {
	batch = batch[:0]
	select {
	case r := <-f.acks:
		batch = append(batch, r)
	case <-stop:
		stopped = true
	case <-cut:
		return batch, false, false
	}
	for len(batch) < f.opt.AckBatch {
		select {
		case r := <-f.acks:
			batch = append(batch, r)
		default:
			return batch, stopped, true
		}
	}
	return batch, stopped, true
}

// Subscription reads a topic's stream (GET /v1/topics/{topic}/stream),
// reconnecting whenever it ends (a leader change, a restart), and acks in
// the background: the receipts given to Ack are sent in batches while the
// consumer goes on, so
//
//	for d := range sub.Deliveries() { handle(d); sub.Ack(d) }
//
// is the fast loop. It is safe for concurrent use.
type Subscription struct {
	*feed
	c    *Client
	path string

	ended    chan struct{} // closed by end: Ack drops, the ackers drain and stop
	endOnce  sync.Once
	readCtx  context.Context
	stopRead context.CancelFunc
	ackCtx   context.Context
	stopAcks context.CancelFunc
	reader   sync.WaitGroup
	ackers   sync.WaitGroup

	closeOnce sync.Once
}

// Subscribe starts reading topic's stream. It runs until Close or until
// ctx ends, or until the server refuses the stream for good (a 4xx other
// than 429: a bad topic or option, a wrong token); Deliveries is then
// closed and Err says why. The end of ctx also stops the background acks,
// once the receipts queued so far are sent.
func (c *Client) Subscribe(ctx context.Context, topic string, opt SubscribeOptions) *Subscription {
	q := url.Values{}
	if opt.MaxInflight > 0 {
		q.Set("max_inflight", strconv.Itoa(opt.MaxInflight))
	}
	if opt.TTRMs > 0 {
		q.Set("ttr_ms", strconv.FormatInt(opt.TTRMs, 10))
	}
	path := topicPath(topic, "stream")
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	// A stream lives long: the HTTP client's Timeout must not cut it.
	cc := c.untimed()
	s := &Subscription{feed: newFeed(topic, opt, true, cc), c: cc, path: path, ended: make(chan struct{})}
	s.readCtx, s.stopRead = context.WithCancel(ctx)
	s.ackCtx, s.stopAcks = context.WithCancel(context.WithoutCancel(ctx))
	s.reader.Add(1)
	go s.read()
	for range s.opt.Ackers {
		s.ackers.Add(1)
		go s.ack()
	}
	context.AfterFunc(ctx, s.end)
	return s
}

// Ack queues d's receipt to be acked in the background. It blocks only
// while as many receipts as the window wait to be sent. Once the
// subscription ended (Close, or the end of its context) Ack drops the
// receipt: its lease ends on its own and the message comes back.
func (s *Subscription) Ack(d api.Delivery) {
	select {
	case <-s.ended:
		return
	default:
	}
	select {
	case s.acks <- d.Receipt:
	case <-s.ended:
	}
}

// end stops taking acks: the ackers send what is queued and return.
func (s *Subscription) end() { s.endOnce.Do(func() { close(s.ended) }) }

// Close sends the acks queued so far (waiting up to ctx for them), then
// ends the stream: the server releases the deliveries not acked for
// redelivery. An Ack after Close is dropped.
func (s *Subscription) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		s.end()
		if werr := waitWithin(ctx, &s.ackers); werr != nil {
			err = fmt.Errorf("delaywheel: close subscription of %s: acks not sent: %w", s.topic, werr)
		}
		s.stopRead()
		s.reader.Wait()
		s.stopAcks()
		s.ackers.Wait()
	})
	return err
}

// waitWithin waits for wg until ctx ends; it returns ctx's error when ctx
// ended first.
func waitWithin(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// read opens the stream again each time it ends, until the server
// refuses it for good (a 4xx other than 429), waiting as long as an
// answer's Retry-After asks (at most a second).
func (s *Subscription) read() {
	defer s.reader.Done()
	s.reconnect(s.readCtx, s.readOnce, func(err error) (bool, time.Duration, error) {
		var e *Error
		if errors.As(err, &e) && e.Status >= 400 && e.Status < 500 && e.Status != http.StatusTooManyRequests {
			return true, 0, err
		}
		if err != nil {
			s.report(err)
		}
		if e != nil && e.RetryAfter > 0 {
			return false, min(e.RetryAfter, time.Second), nil
		}
		return false, 0, nil
	})
}

// readOnce reads one stream to its end; got says whether it opened.
func (s *Subscription) readOnce() (got bool, err error) {
	resp, err := s.c.send(s.readCtx, http.MethodGet, s.path, nil, "application/x-ndjson", "")
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxStreamLine)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue // keepalive
		}
		var d api.Delivery
		if err := json.Unmarshal(line, &d); err != nil {
			return true, fmt.Errorf("delaywheel: GET %s: decode delivery: %w", s.path, err)
		}
		select {
		case s.out <- d:
		case <-s.readCtx.Done():
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return true, fmt.Errorf("delaywheel: GET %s: %w", s.path, err)
	}
	return true, fmt.Errorf("delaywheel: GET %s: the stream ended (leader change or restart); reconnecting", s.path)
}

// ack sends the queued receipts in batches until the subscription ended
// and the queue is empty.
func (s *Subscription) ack() {
	defer s.ackers.Done()
	batch := make([]string, 0, s.opt.AckBatch)
	for {
		batch, _, _ = s.nextBatch(batch, s.ended, nil)
		if len(batch) == 0 {
			return // ended, and every queued ack is sent
		}
		s.send(batch)
	}
}

// send acks one batch, trying again a few times while the cluster has no
// leader. A receipt it gives up on comes back when its lease ends.
func (s *Subscription) send(batch []string) {
	pause := 50 * time.Millisecond
	for try := 0; ; try++ {
		_, err := s.c.Ack(s.ackCtx, batch)
		var e *Error
		retry := errors.As(err, &e) && (e.Status == http.StatusServiceUnavailable || e.Status == http.StatusTooManyRequests) ||
			err != nil && e == nil
		if err == nil || !retry || try == 4 || s.ackCtx.Err() != nil {
			if err != nil {
				s.report(fmt.Errorf("delaywheel: ack %d receipts: %w", len(batch), err))
			}
			return
		}
		select {
		case <-s.ackCtx.Done():
			return
		case <-time.After(pause):
		}
		pause *= 2
	}
}

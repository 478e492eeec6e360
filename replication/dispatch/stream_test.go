package dispatch

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

// openStream opens a stream of topic "t" and waits until it queued k
// deliveries that nobody read yet; it returns the stream and those.
func openStream(t *testing.T, d *Dispatcher, k int) (*stream, []model.Delivery) {
	t.Helper()
	ws, err := d.Stream("t", model.ConsumerOptions{MaxInflight: k, TTR: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ws.Close)
	s := ws.(*stream)
	var queued []model.Delivery
	waitFor(t, "the stream to queue its deliveries", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		queued = append([]model.Delivery(nil), s.queue...)
		return len(queued) == k
	})
	return s, queued
}

// nextOrNone reads the stream, or nothing once a short wait passed.
func nextOrNone(t *testing.T, s *stream) []model.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	ds, err := s.Next(ctx)
	if err != nil && ctx.Err() == nil {
		t.Fatalf("next: %v", err)
	}
	return ds
}

// A queued delivery settled before it was read is not handed out.
func TestStreamDropsQueuedDeliverySettled(t *testing.T) {
	d, _, _, s, queued := streamOf(t, 2)
	d.Settled([]model.Receipt{queued[0].Receipt})
	ds := nextOrNone(t, s)
	if len(ds) != 1 || ds[0].Receipt != queued[1].Receipt {
		t.Fatalf("next got %+v, want only the unsettled %v", ds, queued[1].Receipt)
	}
}

// A queued delivery whose lease ended before it was read is not handed
// out: its message may be someone else's by then.
func TestStreamDropsQueuedDeliveryLeaseEnded(t *testing.T) {
	d, n, clk := startFake(t)
	enqueueAt(t, n, clk, "t", clk.Now().UnixMilli())
	s, queued := openStream(t, d, 1)
	clk.Set(time.UnixMilli(queued[0].LeaseExpiresMs + 1))
	for _, dl := range nextOrNone(t, s) {
		if dl.Receipt == queued[0].Receipt {
			t.Fatalf("next handed out %v after its lease ended", dl.Receipt)
		}
	}
}

// Back-pressure on a stream's lease proposals does not end the stream: it
// asks again after a pause on the dispatcher's clock.
func TestStreamRetriesAfterOverload(t *testing.T) {
	d, n, clk := startFake(t)
	n.overload.Store(3)
	enqueueAt(t, n, clk, "t", clk.Now().UnixMilli())
	ws, err := d.Stream("t", model.ConsumerOptions{MaxInflight: 1, TTR: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	s := ws.(*stream)
	waitFor(t, "the stream to take the message", func() bool {
		clk.Advance(10 * time.Millisecond)
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.queue) == 1 || s.ended
	})
	ds, err := s.Next(t.Context())
	if err != nil || len(ds) != 1 {
		t.Fatalf("next got %d deliveries, err %v; want the message", len(ds), err)
	}
}

// Seal ends a topic's consumer streams with its error and answers its
// waiting reserves with nothing; the sender's stream goes on.
func TestSealEndsConsumersButNotTheSender(t *testing.T) {
	d, _, _ := startFake(t)
	consumer, err := d.Stream("t", model.ConsumerOptions{MaxInflight: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	sender, err := d.SenderStream("t", model.ConsumerOptions{MaxInflight: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	reserved := make(chan []model.Delivery, 1)
	go func() {
		ds, _ := d.Reserve(t.Context(), "t", 1, time.Hour, 0)
		reserved <- ds
	}()
	waitFor(t, "both streams and the reserve to wait", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.waiters["t"]) == 3
	})
	sealed := errors.New("sealed")
	d.Seal("t", sealed)
	if _, err := consumer.Next(t.Context()); !errors.Is(err, sealed) {
		t.Fatalf("consumer's next: %v, want the seal's error", err)
	}
	select {
	case ds := <-reserved:
		if len(ds) != 0 {
			t.Fatalf("waiting reserve got %d deliveries, want none", len(ds))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting reserve was not answered")
	}
	s := sender.(*stream)
	s.mu.Lock()
	ended := s.ended
	s.mu.Unlock()
	if ended {
		t.Fatal("the sender's stream ended")
	}
}

// Settling takes the stream's own receipts out of its window at once,
// before any ack is applied, and leaves another stream's alone; a stream
// that closes still releases a settling receipt (its ack may have failed).
func TestStreamSettlingFreesItsOwnWindow(t *testing.T) {
	d, n, clk := startFake(t)
	for range 3 {
		enqueueAt(t, n, clk, "t", clk.Now().UnixMilli())
	}
	a, queued := openStream(t, d, 1)
	b, other := openStream(t, d, 1)
	if ds := nextOrNone(t, a); len(ds) != 1 || ds[0].Receipt != queued[0].Receipt {
		t.Fatalf("next got %+v, want the first delivery", ds)
	}
	a.Settling([]model.Receipt{other[0].Receipt})
	if ds := nextOrNone(t, a); len(ds) != 0 {
		t.Fatalf("next got %+v after settling another stream's receipt; want nothing, the window is full", ds)
	}
	b.mu.Lock()
	_, held := b.inflight[other[0].Receipt]
	b.mu.Unlock()
	if !held {
		t.Fatal("settling a receipt on the wrong stream took it out of its own stream's window")
	}
	a.Settling([]model.Receipt{queued[0].Receipt})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ds, err := a.Next(ctx)
	if err != nil || len(ds) != 1 || ds[0].ID == queued[0].ID || ds[0].ID == other[0].ID {
		t.Fatalf("next got %+v, %v; want the third message once the first is settling", ds, err)
	}
	// Nothing was acked: the window alone moved, and closing releases the
	// settling delivery for redelivery.
	if v, err := n.st.Get(queued[0].ID); err != nil || v.State != wheel.StateReserved {
		t.Fatalf("first message = %+v, %v; want still reserved (no ack was proposed)", v, err)
	}
	a.Close()
	if v, err := n.st.Get(queued[0].ID); err != nil || v.State == wheel.StateReserved || v.Attempts != 1 {
		t.Fatalf("first message after its stream closed = %+v, %v; want released, attempt 1 counted", v, err)
	}
}

// where reports whether a stream holds r in its window, as settling, and
// whether the dispatcher still routes r to it.
func where(s *stream, r model.Receipt) (inflight, settling, routed bool) {
	s.mu.Lock()
	_, inflight = s.inflight[r]
	_, settling = s.settling[r]
	s.mu.Unlock()
	s.d.smu.Lock()
	routed = s.d.streams[r] == s
	s.d.smu.Unlock()
	return inflight, settling, routed
}

// wantForgotten fails the test unless the stream holds r nowhere.
func wantForgotten(t *testing.T, s *stream, r model.Receipt, when string) {
	t.Helper()
	if in, settling, routed := where(s, r); in || settling || routed {
		t.Fatalf("%s: in the window %v, settling %v, routed %v; want forgotten", when, in, settling, routed)
	}
}

// streamOf starts a dispatcher with k messages due, and a stream of
// window k that holds their deliveries.
func streamOf(t *testing.T, k int) (*Dispatcher, *fakeNode, *wheeltest.FakeClock, *stream, []model.Delivery) {
	t.Helper()
	d, n, clk := startFake(t)
	for range k {
		enqueueAt(t, n, clk, "t", clk.Now().UnixMilli())
	}
	s, queued := openStream(t, d, k)
	return d, n, clk, s, queued
}

// The node's Settling (an ack submitted) keeps the receipt the stream's,
// out of its window, and Settled (the ack applied) forgets it.
func TestDispatcherSettlingThenSettled(t *testing.T) {
	d, _, _, s, queued := streamOf(t, 1)
	r := queued[0].Receipt
	d.Settling([]model.Receipt{r})
	if in, settling, routed := where(s, r); in || !settling || !routed {
		t.Fatalf("after Settling: in the window %v, settling %v, routed %v; want settling and routed only", in, settling, routed)
	}
	d.Settled([]model.Receipt{r})
	wantForgotten(t, s, r, "after Settled")
}

// A settling receipt whose ack never applied is forgotten once its lease
// ended, as an unsettled one is.
func TestStreamSweepForgetsSettlingLeasesThatEnded(t *testing.T) {
	_, _, clk, s, queued := streamOf(t, 1)
	r := queued[0].Receipt
	s.Settling([]model.Receipt{r})
	clk.Set(time.UnixMilli(queued[0].LeaseExpiresMs + 1))
	s.sweep(clk.Now())
	wantForgotten(t, s, r, "after its lease ended")
}

// A stream the dispatcher ends (Seal) releases its unsettled deliveries
// but leaves its settling ones to their acks, which may still be on their
// way through the log.
func TestSealLeavesSettlingDeliveriesToTheirAcks(t *testing.T) {
	d, n, _, s, queued := streamOf(t, 2)
	s.Settling([]model.Receipt{queued[0].Receipt})
	d.Seal("t", errors.New("a webhook took the topic"))
	<-s.done
	if v, err := n.st.Get(queued[0].ID); err != nil || v.State != wheel.StateReserved {
		t.Fatalf("settling delivery after the seal = %+v, %v; want still reserved, for its ack", v, err)
	}
	if v, err := n.st.Get(queued[1].ID); err != nil || v.State == wheel.StateReserved {
		t.Fatalf("unsettled delivery after the seal = %+v, %v; want released", v, err)
	}
	for _, dl := range queued {
		if _, _, routed := where(s, dl.Receipt); routed {
			t.Fatalf("receipt %v still routed to the ended stream", dl.Receipt)
		}
	}
}

// spanClock is a fake clock that moves, once, by span just before it arms
// the first timer for span from its reading: as if a test moved it between
// a waiter's read and its arming.
type spanClock struct {
	*wheeltest.FakeClock
	span time.Duration
	once sync.Once
}

func (c *spanClock) After(d time.Duration) <-chan time.Time {
	if d == c.span {
		c.once.Do(func() { c.Advance(d) })
	}
	return c.FakeClock.After(d)
}

func (c *spanClock) At(t time.Time) <-chan time.Time {
	if t.Sub(c.Now()) == c.span {
		c.once.Do(func() { c.Set(t) })
	}
	return c.FakeClock.At(t)
}

// A stream whose window is full looks for ended leases again once the
// clock reads a sweep period past its last look, even when the clock got
// there while the stream armed its wait: the message whose lease ended is
// taken again with nothing moving the clock further.
func TestStreamSweepsWhenClockMovesWhileArming(t *testing.T) {
	var clk *spanClock
	d, n, _ := startFakeWith(t, func(c *Config) {
		clk = &spanClock{FakeClock: c.Clock.(*wheeltest.FakeClock), span: sweepEvery}
		c.Clock = clk
	})
	id := enqueueAt(t, n, clk, "t", clk.Now().UnixMilli())
	// Its lease ends before the stream's first wait for a sweep does.
	ws, err := d.Stream("t", model.ConsumerOptions{MaxInflight: 1, TTR: sweepEvery / 2})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	s := ws.(*stream)
	waitFor(t, "the message taken again once its lease ended", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return slices.ContainsFunc(s.queue, func(dl model.Delivery) bool { return dl.ID == id && dl.Attempt == 2 })
	})
}

package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

// fakeNode is a leader without Raft: a proposal is applied to the store
// when it is submitted, in submission order, and its wait returns once
// commit is closed (at once when it is nil).
type fakeNode struct {
	st        *wheel.Store
	leaseHeld atomic.Bool
	submitted chan struct{} // receives once per Submit, when set
	overload  atomic.Int32  // Submits to refuse with ErrOverloaded

	mu     sync.Mutex
	index  uint64
	commit chan struct{}
	// lose, when set, makes the next Submit an entry that is never
	// applied: its wait fails once lose is closed.
	lose chan struct{}
}

func (f *fakeNode) Store() *wheel.Store { return f.st }
func (f *fakeNode) LeaseHeld() bool     { return f.leaseHeld.Load() }

func (f *fakeNode) apply(cmds []command.Command) ([]command.Result, chan struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	res, err := f.st.Apply([]wheel.Entry{{Index: f.index, Cmds: cmds}})
	if err != nil {
		return nil, nil, err
	}
	return res[0], f.commit, nil
}

func (f *fakeNode) Propose(_ context.Context, cmds ...command.Command) ([]command.Result, error) {
	res, _, err := f.apply(cmds)
	return res, err
}

func (f *fakeNode) SubmitRider(ctx context.Context, cmds ...command.Command) (func() ([]command.Result, error), func(), error) {
	wait, err := f.Submit(ctx, cmds...)
	return wait, func() {}, err
}

func (f *fakeNode) Submit(_ context.Context, cmds ...command.Command) (func() ([]command.Result, error), error) {
	if f.overload.Add(-1) >= 0 {
		return nil, fmt.Errorf("%w: test back-pressure", model.ErrOverloaded)
	}
	f.overload.Store(0)
	f.mu.Lock()
	lose := f.lose
	f.lose = nil
	f.mu.Unlock()
	if lose != nil {
		if f.submitted != nil {
			f.submitted <- struct{}{}
		}
		return func() ([]command.Result, error) {
			<-lose
			return nil, fmt.Errorf("%w: test entry lost", model.ErrUnavailable)
		}, nil
	}
	res, commit, err := f.apply(cmds)
	if err != nil {
		return nil, err
	}
	if f.submitted != nil {
		f.submitted <- struct{}{}
	}
	return func() ([]command.Result, error) {
		if commit != nil {
			<-commit
		}
		return res, nil
	}, nil
}

// startFake starts a dispatcher over a fake node on a fake clock that reads
// a little past the start of the current second.
func startFake(t testing.TB) (*Dispatcher, *fakeNode, *wheeltest.FakeClock) {
	t.Helper()
	return startFakeWith(t, nil)
}

// startFakeWith is startFake with configure adjusting the dispatcher's
// config before it starts.
func startFakeWith(t testing.TB, configure func(*Config)) (*Dispatcher, *fakeNode, *wheeltest.FakeClock) {
	t.Helper()
	clk := wheeltest.NewFakeClock(time.Now().Truncate(time.Second).Add(100 * time.Millisecond))
	st, err := wheel.Open(t.TempDir(), wheel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	n := &fakeNode{st: st}
	n.leaseHeld.Store(true)
	cfg := Config{Clock: clk, ExpireGrace: 200 * time.Millisecond, Preload: time.Second,
		ApplyTimeout: 10 * time.Second, MaxLeaseBatch: 1024}
	if configure != nil {
		configure(&cfg)
	}
	d := New(n, cfg)
	if err := d.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d, n, clk
}

func enqueueAt(t *testing.T, n *fakeNode, clk wheel.Clock, topic string, dueMs int64) model.ID {
	t.Helper()
	res, err := n.Propose(t.Context(), command.Schedule{NowMs: clk.Now().UnixMilli(),
		Messages: []command.NewMessage{{Topic: topic, Body: []byte("x"), DeliverAtMs: dueMs, MaxAttempts: 3}}})
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	if res[0].Err != nil {
		t.Fatalf("enqueue: %v", res[0].Err)
	}
	return res[0].Value.([]wheel.Enqueued)[0].ID
}

func reserveNow(t *testing.T, d *Dispatcher, topic string) []model.Delivery {
	t.Helper()
	ds, err := d.Reserve(t.Context(), topic, 10, 0, 0)
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	return ds
}

// A reserve pops what the clock says is due itself: it does not depend on
// the fire loop having run, and it never takes a message before its time.
func TestReserveTakesWhatCameDue(t *testing.T) {
	d, n, clk := startFake(t)
	due := clk.Now().Add(300 * time.Millisecond).UnixMilli()
	id := enqueueAt(t, n, clk, "t", due)

	clk.Set(time.UnixMilli(due - 1))
	if ds := reserveNow(t, d, "t"); len(ds) != 0 {
		t.Fatalf("reserve a millisecond before the due time got %d messages", len(ds))
	}
	clk.Set(time.UnixMilli(due))
	ds := reserveNow(t, d, "t")
	if len(ds) != 1 || ds[0].Message.ID != id {
		t.Fatalf("reserve at the due time got %+v, want message %s", ds, id)
	}
}

// A topic whose ready queue was read empty is read again once messages
// reach it (here, by the expiry of the slot nobody reserved from).
func TestReadyQueueReadAgainAfterItFills(t *testing.T) {
	d, n, clk := startFake(t)
	due := clk.Now().Add(300 * time.Millisecond).UnixMilli()
	id := enqueueAt(t, n, clk, "t", due)
	if ds := reserveNow(t, d, "t"); len(ds) != 0 {
		t.Fatalf("reserve before the due time got %d messages", len(ds))
	}

	// Past the slot's second and the grace: the tick expires the slot and
	// the message moves to the ready queue.
	clk.Set(time.UnixMilli(due).Truncate(time.Second).Add(time.Second + d.cfg.ExpireGrace + time.Millisecond))
	waitFor(t, "the message to reach the ready queue", func() bool {
		clk.Advance(time.Millisecond) // lets the tick loop run again
		v, err := n.st.Get(id)
		return err == nil && v.State == wheel.StateReady
	})
	ds := reserveNow(t, d, "t")
	if len(ds) != 1 || ds[0].Message.ID != id {
		t.Fatalf("reserve from the ready queue got %+v, want message %s", ds, id)
	}
}

// A first hand-off is answered before its Lease commits while the lease is
// held, and only at its commit while it is not.
func TestHandoffBeforeCommitOnlyUnderLease(t *testing.T) {
	for _, held := range []bool{true, false} {
		t.Run(fmt.Sprintf("held=%v", held), func(t *testing.T) {
			d, n, clk := startFake(t)
			id := enqueueAt(t, n, clk, "t", clk.Now().UnixMilli())
			commit := make(chan struct{})
			n.mu.Lock()
			n.commit = commit
			n.mu.Unlock()
			n.submitted = make(chan struct{}, 1)
			n.leaseHeld.Store(held)
			answered := make(chan []model.Delivery, 1)
			go func() { answered <- reserveNow(t, d, "t") }()
			<-n.submitted // the Lease is in the log order
			var ds []model.Delivery
			if held {
				ds = <-answered // not committed yet
				close(commit)
			} else {
				select {
				case ds = <-answered:
					t.Fatalf("answered %+v before the Lease committed, without the lease", ds)
				default:
				}
				close(commit)
				ds = <-answered
			}
			if len(ds) != 1 || ds[0].Message.ID != id || ds[0].Attempt != 1 {
				t.Fatalf("hand-off %+v, want message %s at attempt 1", ds, id)
			}
			waitFor(t, "the hand-off to end", func() bool { return !d.InFlight(id) })
		})
	}
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// With an injected clock the waker uses the clock's timers.
func TestWakerFollowsInjectedClock(t *testing.T) {
	clk := wheeltest.NewFakeClock(time.Unix(1000, 0))
	w, err := newWaker(clk)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	c, alarm := w.at(clk.Now().Add(5 * time.Millisecond))
	if alarm != nil {
		t.Fatal("an alarm on the system clock armed for an injected clock")
	}
	select {
	case <-c:
		t.Fatal("woke before the clock moved")
	default:
	}
	clk.Advance(5 * time.Millisecond)
	<-c
}

// A clock that reaches the instant while the waker arms its timer fires it:
// nothing need move the clock again.
func TestWakerFiresWhenClockMovesWhileArming(t *testing.T) {
	clk := wheeltest.NewMovingClock(time.Unix(1000, 0))
	w, err := newWaker(clk)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	due := clk.Now().Add(2 * time.Second)
	c, _ := w.at(due)
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("the timer for %v has not fired with the clock at %v", due, clk.Now())
	}
}

// The tick loop ticks by a clock that moved while it armed its timer: the
// slot that reading brings into the preload window is loaded, and its due
// message handed out, with nothing moving the clock again.
func TestTickAfterClockMovesWhileArming(t *testing.T) {
	start := time.Now().Truncate(time.Second).Add(950 * time.Millisecond)
	clk := wheeltest.NewMovingClock(start) // its first timer is the tick loop's
	d, n, _ := startFakeWith(t, func(c *Config) { c.Clock = clk; c.Preload = 0 })
	// Due in the next second, which the tick at start did not load.
	id := enqueueAt(t, n, clk, "t", start.UnixMilli()+50)
	var ds []model.Delivery
	waitFor(t, "the due message handed out", func() bool {
		ds = append(ds, reserveNow(t, d, "t")...)
		return len(ds) > 0
	})
	if len(ds) != 1 || ds[0].ID != id {
		t.Fatalf("handed out %v, want %s", ds, id)
	}
}

// A message whose last allowed lease ends goes dead at the end of the lease,
// not when its slot expires: with an expiry grace of an hour, nothing but
// the dispatcher's burial can move it.
func TestLastLeaseExpiryBuriesAtOnce(t *testing.T) {
	d, n, clk := startFakeWith(t, func(c *Config) { c.ExpireGrace = time.Hour })
	res, err := n.Propose(t.Context(), command.Schedule{NowMs: clk.Now().UnixMilli(), Messages: []command.NewMessage{
		{Topic: "t", Body: []byte("last"), DeliverAtMs: clk.Now().UnixMilli(), TTRMs: 600, MaxAttempts: 1},
		{Topic: "t", Body: []byte("more"), DeliverAtMs: clk.Now().UnixMilli(), TTRMs: 600, MaxAttempts: 2},
	}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("enqueue: %v %v", err, res[0].Err)
	}
	enq := res[0].Value.([]wheel.Enqueued)
	last, more := enq[0].ID, enq[1].ID
	ds := reserveNow(t, d, "t")
	if len(ds) != 2 {
		t.Fatalf("reserve got %d messages, want 2", len(ds))
	}
	exp := ds[0].Message.LeaseExpiresMs
	clk.Set(time.UnixMilli(exp)) // the lease still holds at its last instant
	if v, err := n.st.Get(last); err != nil || v.State != wheel.StateReserved {
		t.Fatalf("at the lease's last instant: %+v, %v; want reserved", v, err)
	}
	clk.Set(time.UnixMilli(exp + 1))
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := n.st.Get(last)
		if err != nil {
			t.Fatal(err)
		}
		if v.State == wheel.StateDead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a millisecond after its last lease ended the message is %s, want dead", v.State)
		}
		time.Sleep(time.Millisecond)
	}
	// The message with an attempt left is not buried: it comes back.
	if v, err := n.st.Get(more); err != nil || v.State == wheel.StateDead {
		t.Fatalf("the message with an attempt left: %+v, %v; want it not dead", v, err)
	}
	if tc := n.st.Topics(); len(tc) != 1 || tc[0].Dead != 1 {
		t.Fatalf("topic counts %+v; want one dead letter", tc)
	}
	if dead, err := n.st.Dead("t", 10); err != nil || len(dead) != 1 || dead[0].ID != last {
		t.Fatalf("dead letters %+v, %v; want the message whose last lease ended", dead, err)
	}
}

// dueLen is how many popped messages the dispatcher holds for a topic.
func (d *Dispatcher) dueLen(topic string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.due[topic])
}

// Messages that come due while nobody reserves from their topic are held
// in memory only until their slot expires: then they are on the ready
// queue, and the dispatcher lets go of them, so its memory does not grow
// with a backlog nobody consumes.
func TestDueMessagesDroppedWhenTheirSlotExpires(t *testing.T) {
	d, n, clk := startFake(t)
	due := clk.Now().Add(300 * time.Millisecond).UnixMilli()
	const count = 50
	ids := make([]model.ID, count)
	for i := range ids {
		ids[i] = enqueueAt(t, n, clk, "idle", due)
	}
	clk.Set(time.UnixMilli(due))
	waitFor(t, "the fire loop to pop the due messages", func() bool { return d.dueLen("idle") == count })

	clk.Set(time.UnixMilli(due).Truncate(time.Second).Add(time.Second + d.cfg.ExpireGrace + time.Millisecond))
	waitFor(t, "the dispatcher to let go of the expired slot's messages", func() bool {
		clk.Advance(time.Millisecond) // lets the tick loop run again
		return d.dueLen("idle") == 0
	})
	for _, id := range ids {
		if v, err := n.st.Get(id); err != nil || v.State != wheel.StateReady {
			t.Fatalf("message %s: %+v, %v; want it on the ready queue", id, v, err)
		}
	}
	if ds, err := d.Reserve(t.Context(), "idle", count, 0, 0); err != nil || len(ds) != count {
		t.Fatalf("reserve after the expiry got %d messages, %v; want %d from the ready queue", len(ds), err, count)
	}
}

// waitingReserve starts a reserve of topic that waits (up to an hour on the
// dispatcher's clock, five seconds of real time) and returns once it is
// the topic's only waiter; its answer comes on the channel returned.
func waitingReserve(t *testing.T, d *Dispatcher, topic string) <-chan []model.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	t.Cleanup(cancel)
	got := make(chan []model.Delivery, 1)
	go func() {
		ds, err := d.Reserve(ctx, topic, 10, time.Hour, 0)
		if err != nil {
			t.Errorf("waiting reserve: %v", err)
		}
		got <- ds
	}()
	waitFor(t, "the reserve to wait", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.waiters[topic]) == 1
	})
	return got
}

// A ready message whose Lease entry failed goes to a reserve that started
// waiting while the hand-off was in flight, not only to the next reserve.
func TestFailedLeaseServesWaiters(t *testing.T) {
	d, n, clk := startFake(t)
	id := enqueueAt(t, n, clk, "t", clk.Now().Add(-2*time.Second).UnixMilli())
	if v, err := n.st.Get(id); err != nil || v.State != wheel.StateReady {
		t.Fatalf("enqueued past due: %+v, %v; want ready", v, err)
	}
	failed := loseLease(t, d, n) // the first reserve waits for the commit
	got := waitingReserve(t, d, "t")
	n.leaseHeld.Store(true)
	failed()
	ds := <-got
	if len(ds) != 1 || ds[0].Message.ID != id {
		t.Fatalf("waiting reserve got %+v, want message %s", ds, id)
	}
}

// After a snapshot restore the fire loop follows the new loader: a message
// loaded into it after the swap is handed to a waiting reserve when due.
func TestFireLoopFollowsReattachedLoader(t *testing.T) {
	d, n, clk := startFake(t)
	got := waitingReserve(t, d, "t")
	d.Reattach(n.st)
	due := clk.Now().Add(150 * time.Millisecond)
	id := enqueueAt(t, n, clk, "t", due.UnixMilli())
	waitFor(t, "the tick to load the message", func() bool {
		clk.Advance(time.Millisecond) // lets the tick loop run
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.loader.Len() == 1
	})
	clk.Set(due)
	ds := <-got
	if len(ds) != 1 || ds[0].Message.ID != id {
		t.Fatalf("waiting reserve got %+v, want message %s", ds, id)
	}
}

// A message popped from the heap whose Lease entry failed before anyone was
// answered is handed out again at once, on the clock's same millisecond,
// not when its slot expires: whether Raft refused the entry (back-pressure)
// or took it and failed it, with a reserve waiting meanwhile.
func TestFailedLeaseRetakesDueMessage(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		d, n, clk := startFake(t)
		id := enqueueAt(t, n, clk, "t", clk.Now().Add(300*time.Millisecond).UnixMilli())
		clk.Advance(300 * time.Millisecond)
		n.overload.Store(1)
		if _, err := d.Reserve(t.Context(), "t", 10, 0, 0); !errors.Is(err, model.ErrOverloaded) {
			t.Fatalf("reserve under back-pressure: %v, want ErrOverloaded", err)
		}
		ds := reserveNow(t, d, "t")
		if len(ds) != 1 || ds[0].Message.ID != id || ds[0].Attempt != 1 {
			t.Fatalf("reserve after the refused Lease got %+v, want message %s at attempt 1", ds, id)
		}
	})
	t.Run("failed", func(t *testing.T) {
		d, n, clk := startFake(t)
		id := enqueueAt(t, n, clk, "t", clk.Now().Add(300*time.Millisecond).UnixMilli())
		clk.Advance(300 * time.Millisecond)
		failed := loseLease(t, d, n)
		got := waitingReserve(t, d, "t")
		n.leaseHeld.Store(true)
		failed()
		ds := <-got
		if len(ds) != 1 || ds[0].Message.ID != id || ds[0].Attempt != 1 {
			t.Fatalf("waiting reserve got %+v, want message %s at attempt 1", ds, id)
		}
	})
}

// loseLease starts a reserve whose Lease entry is taken but not applied,
// answered only at the commit, and returns once the entry is submitted.
// Calling the function returned fails the entry and checks that the
// reserve failed.
func loseLease(t *testing.T, d *Dispatcher, n *fakeNode) func() {
	t.Helper()
	n.leaseHeld.Store(false)
	lose := make(chan struct{})
	n.mu.Lock()
	n.lose = lose
	n.mu.Unlock()
	n.submitted = make(chan struct{}, 1)
	failed := make(chan error, 1)
	go func() {
		_, err := d.Reserve(t.Context(), "t", 10, 0, 0)
		failed <- err
	}()
	<-n.submitted
	n.submitted = nil
	return func() {
		t.Helper()
		close(lose)
		if err := <-failed; err == nil {
			t.Fatal("the reserve whose Lease entry failed succeeded")
		}
	}
}

// A popped message is not handed out again while someone may hold it: not
// once its Lease committed, nor once its hand-off was answered before the
// commit, even if the entry then failed (the consumer holds it; it comes
// back when that lease ends: TestFailedAnsweredLeaseHeldUntilItsEnd).
func TestAnsweredLeaseNotRetaken(t *testing.T) {
	for _, commits := range []bool{true, false} {
		t.Run(fmt.Sprintf("commits=%v", commits), func(t *testing.T) {
			d, n, clk := startFake(t)
			id := enqueueAt(t, n, clk, "t", clk.Now().Add(300*time.Millisecond).UnixMilli())
			clk.Advance(300 * time.Millisecond)
			lose := make(chan struct{})
			if !commits {
				n.mu.Lock()
				n.lose = lose
				n.mu.Unlock()
			}
			ds := reserveNow(t, d, "t") // answered before the commit
			if len(ds) != 1 || ds[0].Message.ID != id {
				t.Fatalf("reserve got %+v, want message %s", ds, id)
			}
			close(lose)
			if err := d.WaitAnswered(t.Context()); err != nil { // the entry applied or failed
				t.Fatal(err)
			}
			if ds := reserveNow(t, d, "t"); len(ds) != 0 {
				t.Fatalf("a message handed out was handed out again: %+v", ds)
			}
			if k := d.dueLen("t"); k != 0 {
				t.Fatalf("the dispatcher holds %d due messages, want none", k)
			}
		})
	}
}

// A message changed while its failed Lease was on its way (here moved half
// a second later) is not handed out again as it was popped: it comes when
// it is due now.
func TestFailedLeaseOfChangedMessageNotRetaken(t *testing.T) {
	d, n, clk := startFake(t)
	due := clk.Now().Add(300 * time.Millisecond)
	id := enqueueAt(t, n, clk, "t", due.UnixMilli())
	clk.Set(due)
	failed := loseLease(t, d, n)
	later := due.Add(500 * time.Millisecond)
	if res, err := n.Propose(t.Context(), command.Reschedule{ID: id, DeliverAtMs: later.UnixMilli()}); err != nil || res[0].Err != nil {
		t.Fatalf("reschedule: %v %v", err, res[0].Err)
	}
	failed()
	if ds := reserveNow(t, d, "t"); len(ds) != 0 {
		t.Fatalf("reserve before the new due time got %+v", ds)
	}
	d.mu.Lock()
	loaded := d.loader.Len()
	d.mu.Unlock()
	if loaded != 1 {
		t.Fatalf("the loader holds %d messages, want the rescheduled one", loaded)
	}
	clk.Set(later)
	ds := reserveNow(t, d, "t")
	if len(ds) != 1 || ds[0].Message.ID != id || ds[0].Attempt != 1 {
		t.Fatalf("reserve at the new due time got %+v, want message %s at attempt 1", ds, id)
	}
}

// A snapshot restore while a popped message's Lease is on its way: the new
// loader yields the message afresh, and once the Lease fails it is handed
// out, once.
func TestFailedLeaseAcrossReattach(t *testing.T) {
	d, n, clk := startFake(t)
	id := enqueueAt(t, n, clk, "t", clk.Now().Add(300*time.Millisecond).UnixMilli())
	clk.Advance(300 * time.Millisecond)
	failed := loseLease(t, d, n)
	d.Reattach(n.st)
	waitFor(t, "the new loader to yield the message", func() bool {
		clk.Advance(time.Millisecond) // lets the tick loop run
		return d.dueLen("t") == 1
	})
	n.leaseHeld.Store(true)
	failed()
	ds := reserveNow(t, d, "t")
	if len(ds) != 1 || ds[0].Message.ID != id || ds[0].Attempt != 1 {
		t.Fatalf("reserve after the failed Lease got %+v, want message %s at attempt 1", ds, id)
	}
	if ds := reserveNow(t, d, "t"); len(ds) != 0 {
		t.Fatalf("the message was handed out again: %+v", ds)
	}
}

// A hand-off answered before its Lease committed, whose entry then failed
// while the node stayed leader, is held back until the lease it was
// answered with ends: its consumer holds it till then, as under a committed
// lease. Once the clock passes that end it is handed out again, to a
// reserve that waits: whether it was read from the ready queue, or popped
// from the heap and its slot expired meanwhile (to the ready queue) or not
// (it goes back to the due list), or a snapshot restore replaced the
// loader meanwhile (whose due list then holds it, busy).
func TestFailedAnsweredLeaseHeldUntilItsEnd(t *testing.T) {
	for _, tc := range []struct {
		name     string
		dueIn    time.Duration // from now; negative: on the ready queue
		ttr      time.Duration
		expire   bool // the slot expires before the lease ends
		reattach bool // a snapshot restore replaces the loader after the failure
	}{
		{name: "ready", dueIn: -2 * time.Second},
		{name: "popped, slot expired", dueIn: 300 * time.Millisecond, expire: true},
		{name: "popped, lease ended first", dueIn: 300 * time.Millisecond, ttr: 100 * time.Millisecond},
		{name: "popped, reattached", dueIn: 300 * time.Millisecond, ttr: 10 * time.Second, reattach: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, n, clk := startFakeWith(t, func(c *Config) {
				if tc.reattach {
					// The new loader's tick moves the clock on: the
					// slot must not expire before the lease ends.
					c.ExpireGrace = time.Hour
				}
			})
			due := clk.Now().Add(tc.dueIn)
			id := enqueueAt(t, n, clk, "t", due.UnixMilli())
			clk.Set(due)
			lose := make(chan struct{})
			n.mu.Lock()
			n.lose = lose
			n.mu.Unlock()
			ds, err := d.Reserve(t.Context(), "t", 10, 0, tc.ttr) // answered before the commit
			if err != nil || len(ds) != 1 || ds[0].Message.ID != id {
				t.Fatalf("reserve got %+v, %v; want message %s", ds, err, id)
			}
			exp := ds[0].Message.LeaseExpiresMs
			close(lose)
			if err := d.WaitAnswered(t.Context()); err != nil {
				t.Fatal(err)
			}
			if ds := reserveNow(t, d, "t"); len(ds) != 0 {
				t.Fatalf("handed out again as soon as its Lease failed: %+v", ds)
			}
			if tc.expire {
				clk.Set(due.Truncate(time.Second).Add(time.Second + d.cfg.ExpireGrace + time.Millisecond))
				waitFor(t, "the message to reach the ready queue", func() bool {
					clk.Advance(time.Millisecond) // lets the tick loop run again
					v, err := n.st.Get(id)
					return err == nil && v.State == wheel.StateReady
				})
				if ds := reserveNow(t, d, "t"); len(ds) != 0 {
					t.Fatalf("handed out again when its slot expired, before its lease ended: %+v", ds)
				}
			}
			if tc.reattach {
				d.Reattach(n.st)
				waitFor(t, "the new loader to yield the message", func() bool {
					clk.Advance(time.Millisecond) // lets the tick loop run
					return d.dueLen("t") == 1
				})
			}
			clk.Set(time.UnixMilli(exp)) // the lease still holds at its last instant
			if ds := reserveNow(t, d, "t"); len(ds) != 0 {
				t.Fatalf("handed out again at its lease's last instant: %+v", ds)
			}
			got := waitingReserve(t, d, "t")
			clk.Set(time.UnixMilli(exp + 1))
			if ds := <-got; len(ds) != 1 || ds[0].Message.ID != id || ds[0].Attempt != 1 {
				t.Fatalf("waiting reserve after the lease ended got %+v, want message %s at attempt 1", ds, id)
			}
			if ds := reserveNow(t, d, "t"); len(ds) != 0 {
				t.Fatalf("handed out twice after the lease ended: %+v", ds)
			}
		})
	}
}

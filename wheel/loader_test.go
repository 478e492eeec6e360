package wheel

import (
	"context"
	"errors"
	"math/rand"
	"reflect"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

// armClock is a FakeClock that records the timers Next arms, so that a
// test knows when Next is blocked on the clock before it moves the clock:
// Next has armed a timer for an instant the clock has not reached.
type armClock struct {
	*wheeltest.FakeClock
	mu     sync.Mutex
	calls  int
	lastAt int64 // unix ms the last timer fires at
}

func (c *armClock) At(t time.Time) <-chan time.Time {
	c.mu.Lock()
	c.calls++
	c.lastAt = t.UnixMilli()
	c.mu.Unlock()
	return c.FakeClock.At(t)
}

func (c *armClock) armed() (calls int, at int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls, c.lastAt
}

func (c *armClock) nowMs() int64 { return c.Now().UnixMilli() }

type nextResult struct {
	m   model.Message
	err error
}

// nextRunner drives one Loader.Next call at a time in a goroutine.
type nextRunner struct {
	t      *testing.T
	l      *Loader
	clk    *armClock
	res    chan nextResult
	seen   int // timers armed that the test has seen
	ctx    context.Context
	cancel context.CancelFunc
}

func newNextRunner(t *testing.T, l *Loader, clk *armClock) *nextRunner {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := &nextRunner{t: t, l: l, clk: clk, res: make(chan nextResult, 1), ctx: ctx, cancel: cancel}
	r.start()
	return r
}

// start begins the next Next call.
func (r *nextRunner) start() {
	r.seen, _ = r.clk.armed()
	go func() {
		m, err := r.l.Next(r.ctx, r.clk)
		r.res <- nextResult{m, err}
	}()
}

// wait returns once the running Next call has yielded (true) or armed a
// timer that has not fired (false). A Next blocked without a timer (empty
// loader) is waited for until something wakes it.
func (r *nextRunner) wait() (model.Message, bool) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case res := <-r.res:
			if res.err != nil {
				r.t.Fatalf("Next: %v", res.err)
			}
			return res.m, true
		default:
		}
		if calls, at := r.clk.armed(); calls > r.seen && at > r.clk.nowMs() {
			r.seen = calls
			return model.Message{}, false
		}
		if time.Now().After(deadline) {
			r.t.Fatal("Next neither yielded nor armed a timer")
		}
		runtime.Gosched()
	}
}

// step moves the clock to ms; if that fires Next's timer, it waits for Next
// to yield or re-arm.
func (r *nextRunner) step(ms int64) (model.Message, bool) {
	r.t.Helper()
	_, at := r.clk.armed()
	r.clk.Set(time.UnixMilli(ms))
	if at > ms {
		// Not fired: Next is still blocked and cannot have yielded.
		select {
		case res := <-r.res:
			r.t.Fatalf("Next returned %s (%v) at %d without a wake-up", res.m.ID, res.err, ms)
		default:
		}
		return model.Message{}, false
	}
	return r.wait()
}

// expectAt checks that the running Next call yields id exactly at due,
// stepping the clock one millisecond at a time from a few before, and
// starts the next call.
func (r *nextRunner) expectAt(id model.ID, due int64) {
	r.t.Helper()
	m, ok := r.wait()
	now := r.clk.nowMs()
	for !ok {
		if now >= due {
			r.t.Fatalf("nothing yielded at %d; %s was due at %d", now, id, due)
		}
		now = max(now+1, due-3)
		m, ok = r.step(now)
	}
	if m.DeliverAtMs > now {
		r.t.Fatalf("yielded %s due %d at %d: early", m.ID, m.DeliverAtMs, now)
	}
	if m.ID != id || now != due {
		r.t.Fatalf("yielded %s (due %d) at %d, want %s at %d", m.ID, m.DeliverAtMs, now, id, due)
	}
	r.start()
}

// idle checks that the running Next call yields nothing: it has no timer
// (nothing loaded) or its timer is for later than now.
func (r *nextRunner) idle() {
	r.t.Helper()
	for i := 0; i < 1000; i++ {
		select {
		case res := <-r.res:
			r.t.Fatalf("Next yielded %s due %d at %d", res.m.ID, res.m.DeliverAtMs, r.clk.nowMs())
		default:
		}
		runtime.Gosched()
	}
}

func newLoaderKit(t *testing.T) (*storeKit, *Loader, *armClock) {
	k := newStoreKit(t, Options{})
	l := NewLoader()
	k.s.AttachLoader(l)
	return k, l, &armClock{FakeClock: wheeltest.NewFakeClock(time.UnixMilli(t0))}
}

func (k *storeKit) load(through int64) int {
	k.t.Helper()
	n, err := k.s.LoadThrough(through)
	if err != nil {
		k.t.Fatal(err)
	}
	return n
}

func TestLoaderNextAtExactDueMillisecond(t *testing.T) {
	k, l, clk := newLoaderKit(t)
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1500},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1500, Priority: 5}, // same instant, higher priority: first
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1499},
		command.NewMessage{Topic: "b", DeliverAtMs: t0 + 2750},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 1},
	)
	if n := k.load(t0s + 3); n != 5 {
		t.Fatalf("loaded %d", n)
	}
	r := newNextRunner(t, l, clk)
	r.expectAt(enq[4].ID, t0+1)
	r.expectAt(enq[2].ID, t0+1499)
	r.expectAt(enq[1].ID, t0+1500)
	r.expectAt(enq[0].ID, t0+1500)
	r.expectAt(enq[3].ID, t0+2750)
	if l.Len() != 0 {
		t.Fatalf("%d left", l.Len())
	}
	// Empty: Next waits on the loader, with no timer, until something is
	// placed into a loaded slot; then it waits for that one's instant.
	r.idle()
	late := k.schedule(t0+2750, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 3200})[0].ID
	r.expectAt(late, t0+3200)
}

func TestLoaderNextWhenClockMovesWhileArming(t *testing.T) {
	k, l, _ := newLoaderKit(t)
	id := k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 2000})[0].ID
	k.load(t0s + 2)
	clk := wheeltest.NewMovingClock(time.UnixMilli(t0))
	got := make(chan nextResult, 1)
	go func() {
		m, err := l.Next(t.Context(), clk)
		got <- nextResult{m, err}
	}()
	// The clock reads the due instant and nothing moves it further: Next
	// must not wait for a later one.
	select {
	case res := <-got:
		if res.err != nil || res.m.ID != id {
			t.Fatalf("Next = %s, %v; want %s", res.m.ID, res.err, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Next still waits with the clock at %d, the message due at %d", clk.Now().UnixMilli(), t0+2000)
	}
}

func TestLoaderEarlierMessageWakesNext(t *testing.T) {
	k, l, clk := newLoaderKit(t)
	far := k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 2900})[0].ID
	k.load(t0s + 2)
	r := newNextRunner(t, l, clk)
	if _, ok := r.wait(); ok {
		t.Fatal("yielded early")
	}
	if _, ok := r.step(t0 + 100); ok {
		t.Fatal("yielded early")
	}
	// Next sleeps until t0+2900; a message due at t0+400 must wake it and
	// come out at exactly t0+400.
	near := k.schedule(t0+100, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 400})[0].ID
	r.expectAt(near, t0+400)
	r.expectAt(far, t0+2900)
}

func TestLoaderOrder(t *testing.T) {
	k, l, _ := newLoaderKit(t)
	rng := rand.New(rand.NewSource(3))
	var msgs []command.NewMessage
	for i := 0; i < 300; i++ {
		msgs = append(msgs, command.NewMessage{Topic: "a", DeliverAtMs: t0 + rng.Int63n(40)*50, Priority: int64(rng.Intn(5) - 2)})
	}
	// Some in one entry, some in another: ids differ by index and position.
	enq := append(k.schedule(t0, msgs[:150]...), k.schedule(t0, msgs[150:]...)...)
	k.load(t0s + 2)
	type want struct {
		id   model.ID
		due  int64
		prio int64
	}
	var ws []want
	for i, e := range enq {
		ws = append(ws, want{e.ID, msgs[i].DeliverAtMs, msgs[i].Priority})
	}
	sort.Slice(ws, func(i, j int) bool {
		a, b := ws[i], ws[j]
		if a.due != b.due {
			return a.due < b.due
		}
		if a.prio != b.prio {
			return a.prio > b.prio
		}
		return a.id.Less(b.id)
	})
	var got []model.Message
	for now := t0; now <= t0+2000; now += 37 {
		due, next := l.PopDue(now)
		for _, m := range due {
			if m.DeliverAtMs > now {
				t.Fatalf("PopDue(%d) returned %s due %d", now, m.ID, m.DeliverAtMs)
			}
		}
		if next != -1 && next <= now {
			t.Fatalf("PopDue(%d) says the next is due at %d", now, next)
		}
		got = append(got, due...)
	}
	if len(got) != len(ws) {
		t.Fatalf("popped %d of %d", len(got), len(ws))
	}
	for i := range ws {
		if got[i].ID != ws[i].id {
			t.Fatalf("position %d: %s (due %d prio %d), want %s (due %d prio %d)", i, got[i].ID, got[i].DeliverAtMs, got[i].Priority, ws[i].id, ws[i].due, ws[i].prio)
		}
	}
}

func TestLoaderFollowsChanges(t *testing.T) {
	k, l, clk := newLoaderKit(t)
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 500},  // cancelled while loaded
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 600},  // rescheduled inside the window
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 700},  // rescheduled out of it
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 800},  // leased early by the leader
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 900},  // stays
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 5000}, // in a slot not loaded yet
	)
	if n := k.load(t0s + 2); n != 5 {
		t.Fatalf("loaded %d", n)
	}
	k.one(command.Cancel{ID: enq[0].ID})
	k.one(command.Reschedule{ID: enq[1].ID, DeliverAtMs: t0 + 2100})
	k.one(command.Reschedule{ID: enq[2].ID, DeliverAtMs: t0 + 9000})
	// A lease with attempts left comes back at its redelivery; loaded slot.
	k.one(command.Lease{NowMs: t0, Items: []command.LeaseItem{{ID: enq[3].ID, Nonce: 1, ExpiresMs: t0 + 1000, RedeliverMs: t0 + 2200}}})
	if l.Len() != 3 {
		t.Fatalf("%d loaded after the changes, want 3", l.Len())
	}
	r := newNextRunner(t, l, clk)
	r.expectAt(enq[4].ID, t0+900)
	r.expectAt(enq[1].ID, t0+2100)
	r.expectAt(enq[3].ID, t0+2200)
	// The slot of t0+5000 is not loaded: nothing until it is.
	clk.Set(time.UnixMilli(t0 + 6000))
	r.idle()
	k.apply(command.Expire{Before: t0s + 3})
	if n := k.load(t0s + 5); n != 1 {
		t.Fatalf("loaded %d from the next slots", n)
	}
	if m, ok := r.wait(); !ok || m.ID != enq[5].ID {
		t.Fatalf("after loading: %v %v", m.ID, ok)
	}
}

// Leases are loaded whether or not attempts are left: each comes due when
// its lease ends, for a redelivery or, out of attempts, for the dead
// letters (the dispatcher proposes Bury).
func TestLoaderLoadsLeasesOutOfAttempts(t *testing.T) {
	k, l, _ := newLoaderKit(t)
	enq := k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0, MaxAttempts: 1}, command.NewMessage{Topic: "a", DeliverAtMs: t0, MaxAttempts: 2})
	k.one(command.Lease{NowMs: t0, Items: []command.LeaseItem{
		{ID: enq[0].ID, Nonce: 1, ExpiresMs: t0 + 1000, RedeliverMs: t0 + 1001},
		{ID: enq[1].ID, Nonce: 2, ExpiresMs: t0 + 1000, RedeliverMs: t0 + 1500},
	}})
	// Loaded after the lease (from the file) and by event (a fresh loader
	// with the slot loaded first) the answer is the same.
	k.load(t0s + 2)
	due, _ := l.PopDue(t0 + 5000)
	if len(due) != 2 || due[0].ID != enq[0].ID || due[0].Receipt != 1 || due[1].ID != enq[1].ID || due[1].Receipt != 2 {
		t.Fatalf("due %+v", due)
	}
	l2 := NewLoader()
	k.s.AttachLoader(l2)
	k.load(t0s + 2)
	k.one(command.Touch{NowMs: t0 + 10, Receipts: []model.Receipt{{ID: enq[0].ID, Nonce: 1}, {ID: enq[1].ID, Nonce: 2}}})
	due, _ = l2.PopDue(t0 + 5000)
	if len(due) != 2 || due[0].ID != enq[0].ID || due[0].DeliverAtMs != t0+1011 || due[1].DeliverAtMs != t0+1510 {
		t.Fatalf("due after touch %+v", due)
	}
	// Buried at the end of its lease, the spent one leaves the heap.
	l3 := NewLoader()
	k.s.AttachLoader(l3)
	k.load(t0s + 2)
	k.one(command.Bury{NowMs: t0 + 1011, Receipts: []model.Receipt{{ID: enq[0].ID, Nonce: 1}, {ID: enq[1].ID, Nonce: 2}}})
	due, _ = l3.PopDue(t0 + 5000)
	if len(due) != 1 || due[0].ID != enq[1].ID {
		t.Fatalf("due after bury %+v", due)
	}
	if v, err := k.s.Get(enq[0].ID); err != nil || v.State != StateDead {
		t.Fatalf("buried message %+v, %v; want dead", v, err)
	}
	if v, err := k.s.Get(enq[1].ID); err != nil || v.State != StateReserved {
		t.Fatalf("message with an attempt left %+v, %v; want still reserved", v, err)
	}
}

func TestLoaderExpiredDropsOlderItems(t *testing.T) {
	k, l, _ := newLoaderKit(t)
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 100},
		command.NewMessage{Topic: "b", DeliverAtMs: t0 + 1100},
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 2100},
	)
	k.load(t0s + 2)
	if got := l.TakeReadyTopics(); len(got) != 0 {
		t.Fatalf("ready topics %v", got)
	}
	changed := l.Changed()
	k.apply(command.Expire{Before: t0s + 2})
	if l.Len() != 1 {
		t.Fatalf("%d loaded after expiring two slots, want 1", l.Len())
	}
	select {
	case <-changed:
	default:
		t.Fatal("messages became ready without a signal")
	}
	if got := l.TakeReadyTopics(); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("ready topics %v", got)
	}
	if got := l.TakeReadyTopics(); len(got) != 0 {
		t.Fatalf("ready topics not cleared: %v", got)
	}
	due, next := l.PopDue(t0 + 1500)
	if len(due) != 0 || next != t0+2100 {
		t.Fatalf("PopDue: %v next %d", due, next)
	}
	due, next = l.PopDue(t0 + 2100)
	if len(due) != 1 || due[0].ID != enq[2].ID || next != -1 {
		t.Fatalf("PopDue: %v next %d", due, next)
	}
	// A jump past the loaded window: loading resumes at the cursor.
	k.schedule(t0+2100, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 60_500})
	k.apply(command.Expire{Before: t0s + 60})
	if n := k.load(t0s + 61); n != 1 {
		t.Fatalf("loaded %d after the jump", n)
	}
}

func TestLoaderNextHonoursContext(t *testing.T) {
	_, l, clk := newLoaderKit(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := l.Next(ctx, clk)
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Next: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next ignored its context")
	}
}

func TestLoadThroughNeedsLoaderAndCapsAtHorizon(t *testing.T) {
	k := newStoreKit(t, Options{})
	if _, err := k.s.LoadThrough(t0s); err == nil {
		t.Fatal("LoadThrough without a loader")
	}
	k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + (Slots-1)*TickMs})
	l := NewLoader()
	k.s.AttachLoader(l)
	if n := k.load(t0s + 10*Slots); n != 1 {
		t.Fatalf("loaded %d", n)
	}
	k.s.DetachLoader()
	k.schedule(t0, command.NewMessage{Topic: "a", DeliverAtMs: t0 + 10})
	if l.Len() != 1 {
		t.Fatal("a detached loader still follows the store")
	}
}

// TestLoaderClaim checks that a popped message is claimable exactly while
// it still lives where it was loaded: changes applied after PopDue (cancel,
// reschedule, lease, the slot's expiry) and a first claim each make it
// unclaimable.
func TestLoaderClaim(t *testing.T) {
	k, l, _ := newLoaderKit(t)
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 100}, // cancelled after the pop
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 200}, // rescheduled after the pop
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 300}, // leased after the pop
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 400}, // untouched
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 500}, // untouched until its slot expires
	)
	if n := k.load(t0s + 2); n != 5 {
		t.Fatalf("loaded %d", n)
	}
	due, _ := l.PopDue(t0 + 999)
	if len(due) != 5 {
		t.Fatalf("popped %d, want 5", len(due))
	}
	k.one(command.Cancel{ID: enq[0].ID})
	k.one(command.Reschedule{ID: enq[1].ID, DeliverAtMs: t0 + 1500})
	k.one(command.Lease{NowMs: t0, Items: []command.LeaseItem{{ID: enq[2].ID, Nonce: 1, ExpiresMs: t0 + 30_000, RedeliverMs: t0 + 30_000}}})
	for i, want := range []bool{false, false, false, true} {
		if got := l.Claim(enq[i].ID); got != want {
			t.Errorf("Claim(message %d) = %v, want %v", i, got, want)
		}
	}
	if l.Claim(enq[3].ID) {
		t.Error("a message was claimed twice")
	}
	if l.Claim(model.ID{Index: 1 << 40}) {
		t.Error("a message never popped was claimed")
	}
	k.apply(command.Expire{Before: t0s + 1})
	if l.Claim(enq[4].ID) {
		t.Error("a message of an expired slot was claimed")
	}
	// The rescheduled message is back in the heap and claimable once
	// popped again.
	due, _ = l.PopDue(t0 + 1500)
	if len(due) != 1 || due[0].ID != enq[1].ID || !l.Claim(enq[1].ID) {
		t.Fatalf("after popping the rescheduled message again: %+v", due)
	}
}

// TestLoaderUnclaim checks that a claimed message is claimable again after
// Unclaim exactly while it still lives where it was loaded: a change
// applied after the claim (cancel, lease, the slot's expiry) makes Unclaim
// report false and leaves it unclaimable.
func TestLoaderUnclaim(t *testing.T) {
	k, l, _ := newLoaderKit(t)
	enq := k.schedule(t0,
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 100}, // untouched
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 200}, // cancelled after the claim
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 300}, // leased after the claim
		command.NewMessage{Topic: "a", DeliverAtMs: t0 + 400}, // untouched until its slot expires
	)
	if n := k.load(t0s + 2); n != 4 {
		t.Fatalf("loaded %d", n)
	}
	if due, _ := l.PopDue(t0 + 999); len(due) != 4 {
		t.Fatalf("popped %d, want 4", len(due))
	}
	for i, e := range enq {
		if !l.Claim(e.ID) {
			t.Fatalf("Claim(message %d) = false", i)
		}
	}
	k.one(command.Cancel{ID: enq[1].ID})
	k.one(command.Lease{NowMs: t0, Items: []command.LeaseItem{{ID: enq[2].ID, Nonce: 1, ExpiresMs: t0 + 30_000, RedeliverMs: t0 + 30_000}}})
	for i, want := range []bool{true, false, false} {
		if got := l.Unclaim(enq[i].ID); got != want {
			t.Errorf("Unclaim(message %d) = %v, want %v", i, got, want)
		}
		if got := l.Claim(enq[i].ID); got != want {
			t.Errorf("Claim(message %d) after Unclaim = %v, want %v", i, got, want)
		}
	}
	if !l.Unclaim(enq[0].ID) || l.Unclaim(enq[0].ID) {
		t.Error("a message claimed once was unclaimed other than once")
	}
	if l.Unclaim(model.ID{Index: 1 << 40}) {
		t.Error("a message never claimed was unclaimed")
	}
	k.apply(command.Expire{Before: t0s + 1})
	if l.Unclaim(enq[3].ID) || l.Claim(enq[3].ID) {
		t.Error("a message of an expired slot was unclaimed")
	}
}

// readingObserver is a loader that, as each batch's events reach it, reads
// what the leader's dispatcher reads without the store's lock once the
// loader wakes it: the ready queue of each topic an event names, and the
// applied index.
type readingObserver struct {
	*Loader
	s     *Store
	ready map[string][]View
	index uint64 // the applied index, as read
}

func (o *readingObserver) applied(events []Event) {
	for _, e := range events {
		if e.Kind == EventReady {
			vs, err := o.s.Ready(e.Topic, 10, nil)
			if err != nil {
				panic(err)
			}
			o.ready[e.Topic] = vs
		}
	}
	o.index = o.s.AppliedIndex()
	o.Loader.applied(events)
}

// A loader is woken once the batch it hears of is readable without the
// store's lock: the dispatcher it wakes reads a new topic's ready queue
// at once, and must not find the topic unknown and think the queue empty.
func TestObserverHearsOfPublishedState(t *testing.T) {
	k := newStoreKit(t, Options{})
	o := &readingObserver{Loader: NewLoader(), s: k.s, ready: map[string][]View{}}
	k.s.AttachLoader(o.Loader)
	k.s.mu.Lock()
	k.s.observer = o
	k.s.mu.Unlock()
	// Due before the cursor: straight to the ready queue of a topic the
	// same batch creates.
	enq := k.schedule(t0, command.NewMessage{Topic: "new", Body: []byte("x")})
	if vs := o.ready["new"]; len(vs) != 1 || vs[0].ID != enq[0].ID {
		t.Fatalf("the observer's read of the ready queue found %v, want message %s", vs, enq[0].ID)
	}
	if o.index != k.idx {
		t.Fatalf("the observer read applied index %d, want %d", o.index, k.idx)
	}
}

// An enqueue's bodies alias the log entry they were decoded from; what the
// store and the loader keep must not. Overwriting the entry's bytes after
// the apply changes no body: not the slot file's, the overflow's or the
// ready queue's records, nor the loaded message's.
func TestDecodedBodiesOutliveTheEntry(t *testing.T) {
	k, l, _ := newLoaderKit(t)
	k.load(t0s + 2)
	k.apply(command.Expire{Before: t0s + 1}) // the cursor past t0: a message due at t0 goes ready
	msgs := []command.NewMessage{
		{Topic: "a", Body: []byte("near, loaded"), DeliverAtMs: t0 + 1500},
		{Topic: "a", Body: []byte("far, a slot file"), DeliverAtMs: t0 + 60_000},
		{Topic: "a", Body: []byte("overflow"), DeliverAtMs: t0 + 2*Slots*TickMs},
		{Topic: "a", Body: []byte("due, ready"), DeliverAtMs: t0},
	}
	entry := command.EncodeCommands([]command.Command{command.Schedule{NowMs: t0, Messages: msgs}})
	cmds, err := command.DecodeCommands(entry)
	if err != nil {
		t.Fatal(err)
	}
	enq := k.one(cmds[0]).([]Enqueued)
	for i := range entry {
		entry[i] = 0xee
	}
	for i, e := range enq {
		if v := k.get(e.ID); string(v.Body) != string(msgs[i].Body) {
			t.Errorf("message %d reads back %q, want %q", i, v.Body, msgs[i].Body)
		}
	}
	got, _ := l.PopDue(t0 + 1500)
	if len(got) != 1 || string(got[0].Body) != "near, loaded" {
		t.Fatalf("loaded: %+v, want the one near message with its body", got)
	}
}

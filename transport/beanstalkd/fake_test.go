package beanstalkd

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

// fakeBackend is an in-memory Backend with the node's semantics, on a
// clock the test moves.
type fakeBackend struct {
	mu       sync.Mutex
	now      time.Time
	index    uint64
	nonce    uint64
	msgs     map[model.ID]*wheel.View
	changed  chan struct{} // closed and replaced at every change
	group    func(topic string) int
	err      error // when set, every call fails with it
	unsent   int   // how many puts fail with ErrNotSent before one is taken
	bare     bool  // deliveries without their lease's length, as over HTTP
	late     bool  // a message stays reserved once its lease ended, as on the node until the lease's slot fires
	puts     []command.NewMessage
	batches  []int                     // the number of messages of each Put
	asked    []int                     // the max of each Reserve
	reserves []int                     // the number of messages each Reserve handed out
	refuse   func(body []byte) bool    // a Put of such a body is refused as invalid
	acks     []int                     // the number of receipts of each AckEach
	ackGate  chan struct{}             // when set, each AckEach waits for a value from it
	ackWait  int                       // the AckEach calls waiting at ackGate
	ackFail  func(model.Receipt) error // when set, the receipts' own AckEach failures (mu held)
	clock    *wheeltest.FakeClock      // the timers of At, moved with now
	armed    []time.Time               // the instant of each At
}

func newFake() *fakeBackend {
	now := time.Unix(1_700_000_000, 0)
	return &fakeBackend{now: now, msgs: map[model.ID]*wheel.View{}, changed: make(chan struct{}),
		group: func(string) int { return 0 }, clock: wheeltest.NewFakeClock(now)}
}

// At is a timer on the fake's clock, for Config.At: it fires once advance
// has moved the clock to t.
func (f *fakeBackend) At(t time.Time) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = append(f.armed, t)
	return f.clock.At(t)
}

// timers returns the instants of the timers armed so far.
func (f *fakeBackend) timers() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.armed)
}

func (f *fakeBackend) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// advance moves the clock.
func (f *fakeBackend) advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	f.clock.Set(f.now)
	f.notify()
}

// notify wakes the waiting reserves. Callers hold f.mu.
func (f *fakeBackend) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// state is the message's state at the fake's now. Callers hold f.mu.
func (f *fakeBackend) state(v *wheel.View) wheel.State {
	if v.State == wheel.StateReserved && v.LeaseExpiresMs <= f.now.UnixMilli() && !f.late {
		v.State, v.Receipt = wheel.StateDelayed, 0
	}
	return v.At(f.now.UnixMilli()).State
}

func (f *fakeBackend) Put(_ context.Context, ms []command.NewMessage) ([]model.ID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if f.unsent > 0 {
		f.unsent--
		return nil, fmt.Errorf("%w: %w: no leader", ErrNotSent, model.ErrUnavailable)
	}
	for i, m := range ms {
		if f.refuse != nil && f.refuse(m.Body) {
			return nil, fmt.Errorf("%w: messages[%d]: refused", model.ErrInvalid, i)
		}
	}
	f.index++
	ids := make([]model.ID, len(ms))
	for i, m := range ms {
		id := model.ID{Index: f.index, Seq: uint32(f.group(m.Topic))<<24 | uint32(i)}
		f.msgs[id] = &wheel.View{Message: model.Message{ID: id, Topic: m.Topic, Body: m.Body, Priority: m.Priority,
			DeliverAtMs: m.DeliverAtMs, TTRMs: m.TTRMs, MaxAttempts: m.MaxAttempts, EnqueuedMs: f.now.UnixMilli()}, State: wheel.StateDelayed}
		ids[i] = id
	}
	f.puts = append(f.puts, ms...)
	f.batches = append(f.batches, len(ms))
	f.notify()
	return ids, nil
}

// add stores a message with the given id, as another front end would.
func (f *fakeBackend) add(id model.ID, topic, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs[id] = &wheel.View{Message: model.Message{ID: id, Topic: topic, Body: []byte(body), DeliverAtMs: f.now.UnixMilli(),
		TTRMs: 30000, MaxAttempts: 10, EnqueuedMs: f.now.UnixMilli()}, State: wheel.StateReady}
	f.notify()
}

// next is the next due message of topic. Callers hold f.mu.
func (f *fakeBackend) next(topic string, st wheel.State) *wheel.View {
	var due []*wheel.View
	for _, v := range f.msgs {
		if v.Topic == topic && f.state(v) == st {
			due = append(due, v)
		}
	}
	slices.SortFunc(due, func(a, b *wheel.View) int {
		return cmp.Or(cmp.Compare(a.DeliverAtMs, b.DeliverAtMs), cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.ID.Index, b.ID.Index), cmp.Compare(a.ID.Seq, b.ID.Seq))
	})
	if len(due) == 0 {
		return nil
	}
	return due[0]
}

func (f *fakeBackend) Reserve(ctx context.Context, topic string, max int, wait time.Duration) ([]model.Delivery, error) {
	f.mu.Lock()
	f.asked = append(f.asked, max)
	f.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		f.mu.Lock()
		if f.err != nil {
			f.mu.Unlock()
			return nil, f.err
		}
		var ds []model.Delivery
		for v := f.next(topic, wheel.StateReady); v != nil && len(ds) < max; v = f.next(topic, wheel.StateReady) {
			ds = append(ds, f.lease(v))
		}
		f.reserves = append(f.reserves, len(ds))
		ch := f.changed
		f.mu.Unlock()
		if len(ds) > 0 || wait <= 0 {
			return ds, nil
		}
		select {
		case <-ch:
		case <-timer.C:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// lease reserves v for its time-to-run. Callers hold f.mu.
func (f *fakeBackend) lease(v *wheel.View) model.Delivery {
	f.nonce++
	v.State, v.Receipt = wheel.StateReserved, f.nonce
	v.Attempts++
	v.LeaseMs = v.TTRMs
	v.LeaseExpiresMs = f.now.UnixMilli() + v.TTRMs
	d := model.Delivery{Message: v.Message, Attempt: v.Attempts, Receipt: model.Receipt{ID: v.ID, Nonce: f.nonce}}
	if f.bare {
		d.LeaseMs, d.TTRMs = 0, 0
	}
	return d
}

// ReserveID leases a ready, delayed or dead message, or one whose lease
// ended, as the node does (a dead one's attempts counted afresh).
func (f *fakeBackend) ReserveID(_ context.Context, id model.ID) (model.Delivery, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return model.Delivery{}, f.err
	}
	v, ok := f.msgs[id]
	if !ok || f.state(v) == wheel.StateReserved && v.LeaseExpiresMs > f.now.UnixMilli() {
		return model.Delivery{}, model.ErrNotFound
	}
	if v.State == wheel.StateDead {
		v.Attempts = 0
	}
	d := f.lease(v)
	f.notify()
	return d, nil
}

// held runs fn on the message r holds.
func (f *fakeBackend) held(r model.Receipt, fn func(v *wheel.View)) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return false, f.err
	}
	v, ok := f.msgs[r.ID]
	if !ok || f.state(v) != wheel.StateReserved || v.Receipt != r.Nonce || v.LeaseExpiresMs <= f.now.UnixMilli() {
		return false, nil
	}
	fn(v)
	f.notify()
	return true, nil
}

func (f *fakeBackend) Ack(_ context.Context, r model.Receipt) (bool, error) {
	return f.held(r, func(v *wheel.View) { delete(f.msgs, v.ID) })
}

// readyJobs adds n ready jobs of the default tube, ids 100 to 100+n-1,
// bodies "0" to "n-1", and wakes the waiting reserves.
func (f *fakeBackend) readyJobs(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range n {
		id := model.ID{Index: uint64(100 + i)}
		f.msgs[id] = &wheel.View{Message: model.Message{ID: id, Topic: defaultTube, Body: []byte(fmt.Sprint(i)), DeliverAtMs: f.now.UnixMilli(),
			TTRMs: 30000, MaxAttempts: 10}, State: wheel.StateReady}
	}
	f.notify()
}

// AckEach acks each receipt as Ack does, once ackGate lets it.
func (f *fakeBackend) AckEach(ctx context.Context, rs []model.Receipt) ([]Acked, error) {
	f.mu.Lock()
	f.acks = append(f.acks, len(rs))
	gate := f.ackGate
	f.ackWait++
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	res := make([]Acked, len(rs))
	f.mu.Lock()
	f.ackWait--
	if f.ackFail != nil {
		for i, r := range rs {
			res[i].Err = f.ackFail(r)
		}
	}
	f.mu.Unlock()
	for i, r := range rs {
		if res[i].Err != nil {
			continue
		}
		var err error
		if res[i].Done, err = f.Ack(ctx, r); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func (f *fakeBackend) Nack(_ context.Context, r model.Receipt, delayMs int64) (bool, error) {
	return f.held(r, func(v *wheel.View) {
		v.State, v.Receipt, v.DeliverAtMs = wheel.StateDelayed, 0, f.now.UnixMilli()+delayMs
	})
}

func (f *fakeBackend) Touch(_ context.Context, r model.Receipt) (bool, error) {
	return f.held(r, func(v *wheel.View) { v.LeaseExpiresMs = f.now.UnixMilli() + v.LeaseMs })
}

func (f *fakeBackend) Bury(_ context.Context, r model.Receipt) (bool, error) {
	return f.held(r, func(v *wheel.View) { v.State, v.Receipt = wheel.StateDead, 0 })
}

func (f *fakeBackend) Get(_ context.Context, id model.ID) (wheel.View, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return wheel.View{}, f.err
	}
	v, ok := f.msgs[id]
	if !ok {
		return wheel.View{}, fmt.Errorf("%w: message %s", model.ErrNotFound, id)
	}
	out := *v
	out.State = f.state(v)
	return out, nil
}

func (f *fakeBackend) Cancel(_ context.Context, id model.ID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.msgs[id]
	switch {
	case !ok:
		return fmt.Errorf("%w: message %s", model.ErrNotFound, id)
	case f.state(v) == wheel.StateReserved:
		return fmt.Errorf("%w: message %s is reserved", model.ErrConflict, id)
	}
	delete(f.msgs, id)
	return nil
}

func (f *fakeBackend) Reschedule(_ context.Context, id model.ID, deliverAtMs int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.msgs[id]
	if !ok || f.state(v) != wheel.StateDelayed && f.state(v) != wheel.StateReady {
		return fmt.Errorf("%w: message %s", model.ErrNotFound, id)
	}
	v.DeliverAtMs = deliverAtMs
	f.notify()
	return nil
}

func (f *fakeBackend) Redrive(_ context.Context, topic string, ids []model.ID) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, id := range ids {
		if v, ok := f.msgs[id]; ok && v.Topic == topic && v.State == wheel.StateDead {
			v.State, v.Attempts, v.DeliverAtMs = wheel.StateReady, 0, f.now.UnixMilli()
			n++
		}
	}
	f.notify()
	return n, nil
}

// list returns up to limit messages of topic in state st, by id.
func (f *fakeBackend) list(topic string, st wheel.State, limit int) []wheel.View {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []wheel.View
	for _, v := range f.msgs {
		if v.Topic == topic && f.state(v) == st {
			out = append(out, *v)
		}
	}
	slices.SortFunc(out, func(a, b wheel.View) int { return cmp.Compare(a.ID.Index, b.ID.Index) })
	return out[:min(limit, len(out))]
}

func (f *fakeBackend) Dead(_ context.Context, topic string, limit int) ([]wheel.View, error) {
	return f.list(topic, wheel.StateDead, limit), nil
}

func (f *fakeBackend) Delayed(_ context.Context, topic string) (wheel.View, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return wheel.View{}, false, f.err
	}
	if v := f.next(topic, wheel.StateDelayed); v != nil {
		return *v, true, nil
	}
	return wheel.View{}, false, nil
}

func (f *fakeBackend) Ready(_ context.Context, topic string, limit int) ([]wheel.View, error) {
	return f.list(topic, wheel.StateReady, limit), nil
}

func (f *fakeBackend) Topics(context.Context) ([]wheel.TopicCounts, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	by := map[string]*wheel.TopicCounts{}
	for _, m := range f.puts { // as on the node, a topic stays once it had a message
		by[m.Topic] = &wheel.TopicCounts{Topic: m.Topic}
	}
	for _, v := range f.msgs {
		tc, ok := by[v.Topic]
		if !ok {
			tc = &wheel.TopicCounts{Topic: v.Topic}
			by[v.Topic] = tc
		}
		switch f.state(v) {
		case wheel.StateDelayed:
			tc.Delayed++
		case wheel.StateReady:
			tc.Ready++
		case wheel.StateReserved:
			tc.Reserved++
		case wheel.StateDead:
			tc.Dead++
		}
	}
	var out []wheel.TopicCounts
	for _, tc := range by {
		out = append(out, *tc)
	}
	return out, nil
}

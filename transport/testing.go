package transport

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
)

// FakeBackend is an in-memory Backend for tests, here and in other
// packages. It is simple but honest: messages live in maps, a reserve hands
// out only messages whose due time has come by the injected clock, leases
// expire by that clock (an expired lease counts as an attempt and, after
// max_attempts, makes the message dead), and keys dedupe while a message is
// pending. It records the Backend calls it gets, can be told to fail every
// call, and can play a follower.
type FakeBackend struct {
	mu      sync.Mutex
	clock   func() time.Time
	leader  string
	isLead  bool
	known   bool
	ready   bool
	failErr error
	calls   []string
	index   uint64 // last id index handed out
	nonce   uint64 // last receipt nonce handed out
	msgs    map[wheel.ID]*fakeMsg
	keys    map[topicKey]wheel.ID
	cluster wheel.ClusterInfo
	waiting int           // reserves blocked in a long-poll
	changed chan struct{} // closed and replaced on every change
}

type fakeMsg struct {
	wheel.Message
	dead bool
}

type topicKey struct{ topic, key string }

// NewFakeBackend returns an empty backend that leads a one-node cluster
// ("n1") and is ready, with time.Now as its clock.
func NewFakeBackend() *FakeBackend {
	return &FakeBackend{
		clock:  time.Now,
		isLead: true, known: true, ready: true,
		msgs:    map[wheel.ID]*fakeMsg{},
		keys:    map[topicKey]wheel.ID{},
		cluster: wheel.ClusterInfo{Leader: "n1", Term: 1, Nodes: []wheel.NodeStatus{{Node: wheel.Node{ID: "n1", RaftAddr: "127.0.0.1:7071", HTTPAddr: "127.0.0.1:7070"}, Suffrage: "voter", State: "leader"}}},
		changed: make(chan struct{}),
	}
}

// SetClock sets the clock that decides what is due; call Wake after moving it.
func (f *FakeBackend) SetClock(clock func() time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clock = clock
	f.broadcastLocked()
}

// Wake makes blocked reserves look again (after the test's clock moved).
func (f *FakeBackend) Wake() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.broadcastLocked()
}

// SetLeader sets what LeaderHTTP answers.
func (f *FakeBackend) SetLeader(addr string, isLeader, known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leader, f.isLead, f.known = addr, isLeader, known
}

// SetReady sets what Ready answers.
func (f *FakeBackend) SetReady(ready bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready = ready
}

// FailWith makes every later call (but LeaderHTTP and Ready) return err;
// nil restores normal behaviour.
func (f *FakeBackend) FailWith(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failErr = err
}

// Calls returns the names of the Backend methods called so far, in order,
// leaving out LeaderHTTP and Ready.
func (f *FakeBackend) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// WaitForWaiters blocks until at least n reserves are blocked in a long-poll,
// or ctx ends.
func (f *FakeBackend) WaitForWaiters(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		waiting, changed := f.waiting, f.changed
		f.mu.Unlock()
		if waiting >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d long-polls (have %d): %w", n, waiting, ctx.Err())
		}
	}
}

func (f *FakeBackend) broadcastLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// begin records a call (unless name is "") and, unless the backend is failing, locks it and
// expires the leases that ran out; the caller must then call f.mu.Unlock.
func (f *FakeBackend) begin(name string) (nowMs int64, err error) {
	f.mu.Lock()
	if name != "" {
		f.calls = append(f.calls, name)
	}
	if f.failErr != nil {
		err = f.failErr
		f.mu.Unlock()
		return 0, err
	}
	nowMs = f.clock().UnixMilli()
	for _, m := range f.msgs {
		if m.Receipt != 0 && nowMs >= m.LeaseExpiresMs {
			m.Receipt, m.DeliverAtMs = 0, m.LeaseExpiresMs
			m.dead = m.Attempts >= m.MaxAttempts
		}
	}
	return nowMs, nil
}

func (m *fakeMsg) state(nowMs int64) wheel.State {
	switch {
	case m.dead:
		return wheel.StateDead
	case m.Receipt != 0:
		return wheel.StateReserved
	case m.DeliverAtMs <= nowMs:
		return wheel.StateReady
	default:
		return wheel.StateDelayed
	}
}

func (m *fakeMsg) view(nowMs int64) wheel.View {
	return wheel.View{Message: m.Message, State: m.state(nowMs)}
}

// LeaderHTTP implements Backend.
func (f *FakeBackend) LeaderHTTP() (addr string, isLeader, known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leader, f.isLead, f.known
}

// Ready implements Backend.
func (f *FakeBackend) Ready() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready
}

// Enqueue implements Backend.
func (f *FakeBackend) Enqueue(_ context.Context, msgs []wheel.NewMessage) ([]wheel.Enqueued, error) {
	nowMs, err := f.begin("Enqueue")
	if err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	f.index++
	out := make([]wheel.Enqueued, len(msgs))
	for i, nm := range msgs {
		tk := topicKey{nm.Topic, nm.Key}
		if old, ok := f.keys[tk]; ok && nm.Key != "" {
			out[i] = wheel.Enqueued{ID: old, DeliverAtMs: f.msgs[old].DeliverAtMs, Duplicate: true}
			continue
		}
		id := wheel.ID{Index: f.index, Seq: uint32(i)}
		f.msgs[id] = &fakeMsg{Message: wheel.Message{ID: id, Topic: nm.Topic, Key: nm.Key, Body: nm.Body,
			Headers: nm.Headers, Priority: nm.Priority, DeliverAtMs: nm.DeliverAtMs, TTRMs: nm.TTRMs,
			MaxAttempts: nm.MaxAttempts, EnqueuedMs: nowMs}}
		if nm.Key != "" {
			f.keys[tk] = id
		}
		out[i] = wheel.Enqueued{ID: id, DeliverAtMs: nm.DeliverAtMs}
	}
	f.broadcastLocked()
	return out, nil
}

// Get implements Backend.
func (f *FakeBackend) Get(_ context.Context, id wheel.ID) (wheel.View, error) {
	nowMs, err := f.begin("Get")
	if err != nil {
		return wheel.View{}, err
	}
	defer f.mu.Unlock()
	m, ok := f.msgs[id]
	if !ok {
		return wheel.View{}, fmt.Errorf("%w: message %s", wheel.ErrNotFound, id)
	}
	return m.view(nowMs), nil
}

// pendingLocked finds a message that may still be cancelled or rescheduled.
func (f *FakeBackend) pendingLocked(id wheel.ID) (*fakeMsg, error) {
	m, ok := f.msgs[id]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: message %s", wheel.ErrNotFound, id)
	case m.Receipt != 0 || m.dead:
		return nil, fmt.Errorf("%w: message %s is reserved or dead", wheel.ErrConflict, id)
	}
	return m, nil
}

// Cancel implements Backend.
func (f *FakeBackend) Cancel(_ context.Context, c wheel.Cancel) (wheel.ID, error) {
	if _, err := f.begin("Cancel"); err != nil {
		return wheel.ID{}, err
	}
	defer f.mu.Unlock()
	id := c.ID
	if c.Topic != "" {
		var ok bool
		if id, ok = f.keys[topicKey{c.Topic, c.Key}]; !ok {
			return wheel.ID{}, fmt.Errorf("%w: no pending message with key %q on topic %q", wheel.ErrNotFound, c.Key, c.Topic)
		}
	}
	if _, err := f.pendingLocked(id); err != nil {
		return wheel.ID{}, err
	}
	f.deleteLocked(id)
	return id, nil
}

func (f *FakeBackend) deleteLocked(id wheel.ID) {
	if m := f.msgs[id]; m != nil && m.Key != "" {
		delete(f.keys, topicKey{m.Topic, m.Key})
	}
	delete(f.msgs, id)
	f.broadcastLocked()
}

// Reschedule implements Backend.
func (f *FakeBackend) Reschedule(_ context.Context, id wheel.ID, deliverAtMs int64) (int64, error) {
	if _, err := f.begin("Reschedule"); err != nil {
		return 0, err
	}
	defer f.mu.Unlock()
	m, err := f.pendingLocked(id)
	if err != nil {
		return 0, err
	}
	m.DeliverAtMs = deliverAtMs
	f.broadcastLocked()
	return deliverAtMs, nil
}

// Reserve implements Backend: it hands out due messages, ordered by due
// time, then priority (higher first), then id; with a wait it blocks until
// one is due, the wait passes or ctx ends.
func (f *FakeBackend) Reserve(ctx context.Context, topic string, max int, wait, ttr time.Duration) ([]wheel.Delivery, error) {
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	name, expired := "Reserve", false
	for {
		nowMs, err := f.begin(name)
		if err != nil {
			return nil, err
		}
		ds := f.takeDueLocked(topic, max, ttr, nowMs)
		if len(ds) > 0 || wait <= 0 || expired {
			f.mu.Unlock()
			return ds, nil
		}
		name = "" // record the call once
		f.waiting++
		f.broadcastLocked()
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-changed:
		case <-timeout:
			expired = true
		case <-ctx.Done():
		}
		f.mu.Lock()
		f.waiting--
		f.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

func (f *FakeBackend) takeDueLocked(topic string, max int, ttr time.Duration, nowMs int64) []wheel.Delivery {
	var due []*fakeMsg
	for _, m := range f.msgs {
		if m.Topic == topic && m.state(nowMs) == wheel.StateReady {
			due = append(due, m)
		}
	}
	slices.SortFunc(due, func(a, b *fakeMsg) int {
		if c := cmp.Compare(a.DeliverAtMs, b.DeliverAtMs); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Priority, a.Priority); c != 0 {
			return c
		}
		return compareIDs(a.ID, b.ID)
	})
	var out []wheel.Delivery
	for _, m := range due[:min(max, len(due))] {
		f.nonce++
		lease := m.TTRMs
		if ttr > 0 {
			lease = ttr.Milliseconds()
		}
		m.Receipt, m.LeaseExpiresMs = f.nonce, nowMs+lease
		m.Attempts++
		out = append(out, wheel.Delivery{Message: m.Message, Attempt: m.Attempts, Receipt: wheel.Receipt{ID: m.ID, Nonce: f.nonce}})
	}
	return out
}

// settle applies fn to every message whose receipt is current.
func (f *FakeBackend) settle(name string, rs []wheel.Receipt, fn func(m *fakeMsg, nowMs int64)) (wheel.Counted, error) {
	nowMs, err := f.begin(name)
	if err != nil {
		return wheel.Counted{}, err
	}
	defer f.mu.Unlock()
	var c wheel.Counted
	for _, r := range rs {
		m, ok := f.msgs[r.ID]
		if !ok || m.Receipt == 0 || m.Receipt != r.Nonce {
			c.Stale++
			continue
		}
		fn(m, nowMs)
		c.Done++
	}
	f.broadcastLocked()
	return c, nil
}

// Ack implements Backend.
func (f *FakeBackend) Ack(_ context.Context, rs []wheel.Receipt) (wheel.Counted, error) {
	return f.settle("Ack", rs, func(m *fakeMsg, _ int64) { f.deleteLocked(m.ID) })
}

// Nack implements Backend.
func (f *FakeBackend) Nack(_ context.Context, rs []wheel.Receipt, delayMs int64) (wheel.Counted, error) {
	return f.settle("Nack", rs, func(m *fakeMsg, nowMs int64) { m.Receipt, m.DeliverAtMs = 0, nowMs+delayMs })
}

// Touch implements Backend.
func (f *FakeBackend) Touch(_ context.Context, rs []wheel.Receipt) (wheel.Counted, error) {
	return f.settle("Touch", rs, func(m *fakeMsg, nowMs int64) { m.LeaseExpiresMs = nowMs + m.TTRMs })
}

// Topics implements Backend.
func (f *FakeBackend) Topics(context.Context) ([]wheel.TopicCounts, error) {
	nowMs, err := f.begin("Topics")
	if err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	byTopic := map[string]*wheel.TopicCounts{}
	for _, m := range f.msgs {
		tc := byTopic[m.Topic]
		if tc == nil {
			tc = &wheel.TopicCounts{Topic: m.Topic}
			byTopic[m.Topic] = tc
		}
		switch m.state(nowMs) {
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
	out := make([]wheel.TopicCounts, 0, len(byTopic))
	for _, tc := range byTopic {
		out = append(out, *tc)
	}
	slices.SortFunc(out, func(a, b wheel.TopicCounts) int { return cmp.Compare(a.Topic, b.Topic) })
	return out, nil
}

// sortedLocked returns the messages that pass keep, by id.
func (f *FakeBackend) sortedLocked(keep func(*fakeMsg) bool) []*fakeMsg {
	var out []*fakeMsg
	for _, m := range f.msgs {
		if keep(m) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *fakeMsg) int { return compareIDs(a.ID, b.ID) })
	return out
}

// Dead implements Backend.
func (f *FakeBackend) Dead(_ context.Context, topic string, limit int) ([]wheel.View, error) {
	nowMs, err := f.begin("Dead")
	if err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	dead := f.sortedLocked(func(m *fakeMsg) bool { return m.Topic == topic && m.dead })
	out := make([]wheel.View, 0, min(limit, len(dead)))
	for _, m := range dead[:min(limit, len(dead))] {
		out = append(out, m.view(nowMs))
	}
	return out, nil
}

// Redrive implements Backend.
func (f *FakeBackend) Redrive(_ context.Context, topic string, ids []wheel.ID) (int, error) {
	nowMs, err := f.begin("Redrive")
	if err != nil {
		return 0, err
	}
	defer f.mu.Unlock()
	n := 0
	for _, m := range f.sortedLocked(func(m *fakeMsg) bool {
		return m.Topic == topic && m.dead && (len(ids) == 0 || slices.Contains(ids, m.ID))
	}) {
		m.dead, m.Attempts, m.DeliverAtMs = false, 0, nowMs
		n++
	}
	f.broadcastLocked()
	return n, nil
}

// wheelSpan returns the cursor's second and the delayed messages by second
// inside the horizon, plus the count beyond it.
func (f *FakeBackend) wheelSpanLocked(nowMs int64) (cursor int64, bySecond map[int64][]*fakeMsg, overflow int64) {
	cursor = wheel.SecondOf(nowMs)
	bySecond = map[int64][]*fakeMsg{}
	for _, m := range f.sortedLocked(func(m *fakeMsg) bool { return m.state(nowMs) == wheel.StateDelayed }) {
		sec := wheel.SecondOf(m.DeliverAtMs)
		if sec >= cursor+wheel.HorizonSecs {
			overflow++
			continue
		}
		bySecond[sec] = append(bySecond[sec], m)
	}
	return cursor, bySecond, overflow
}

func summaryOf(sec int64, ms []*fakeMsg) wheel.SlotSummary {
	s := wheel.SlotSummary{Slot: wheel.SlotOf(sec), Second: sec, Messages: len(ms)}
	for _, m := range ms {
		s.Bytes += int64(len(m.Body))
	}
	return s
}

// Wheel implements Backend with a wheel derived from the delayed messages.
func (f *FakeBackend) Wheel(context.Context) (wheel.WheelInfo, error) {
	nowMs, err := f.begin("Wheel")
	if err != nil {
		return wheel.WheelInfo{}, err
	}
	defer f.mu.Unlock()
	cursor, bySecond, overflow := f.wheelSpanLocked(nowMs)
	w := wheel.WheelInfo{CursorMs: cursor * wheel.TickMs, HorizonMs: (cursor + wheel.HorizonSecs) * wheel.TickMs,
		OpenSegments: len(bySecond), OverflowMessages: overflow}
	for sec, ms := range bySecond {
		w.NonEmpty = append(w.NonEmpty, summaryOf(sec, ms))
	}
	slices.SortFunc(w.NonEmpty, func(a, b wheel.SlotSummary) int { return cmp.Compare(a.Second, b.Second) })
	return w, nil
}

// Slot implements Backend.
func (f *FakeBackend) Slot(_ context.Context, slot int, records bool) (wheel.SlotInfo, error) {
	nowMs, err := f.begin("Slot")
	if err != nil {
		return wheel.SlotInfo{}, err
	}
	defer f.mu.Unlock()
	cursor, bySecond, _ := f.wheelSpanLocked(nowMs)
	sec := cursor + int64((slot-wheel.SlotOf(cursor)+wheel.Slots)%wheel.Slots)
	ms := bySecond[sec]
	si := wheel.SlotInfo{SlotSummary: summaryOf(sec, ms), File: fmt.Sprintf("%012d.seg", sec)}
	if records {
		si.Records = []wheel.SlotRecord{}
		for _, m := range ms {
			si.Records = append(si.Records, wheel.SlotRecord{Type: "message", Index: m.ID.Index, ID: m.ID, Topic: m.Topic,
				DueMs: m.DeliverAtMs, Attempts: m.Attempts, Bytes: len(m.Body), Live: true})
		}
	}
	return si, nil
}

// Cluster implements Backend.
func (f *FakeBackend) Cluster(context.Context) (wheel.ClusterInfo, error) {
	if _, err := f.begin("Cluster"); err != nil {
		return wheel.ClusterInfo{}, err
	}
	defer f.mu.Unlock()
	c := f.cluster
	c.Nodes = slices.Clone(c.Nodes)
	return c, nil
}

// AddNode implements Backend.
func (f *FakeBackend) AddNode(_ context.Context, n wheel.Node) error {
	if _, err := f.begin("AddNode"); err != nil {
		return err
	}
	defer f.mu.Unlock()
	if slices.ContainsFunc(f.cluster.Nodes, func(s wheel.NodeStatus) bool { return s.ID == n.ID }) {
		return fmt.Errorf("%w: node %q is already a member", wheel.ErrConflict, n.ID)
	}
	f.cluster.Nodes = append(f.cluster.Nodes, wheel.NodeStatus{Node: n, Suffrage: "voter", State: "follower"})
	return nil
}

// RemoveNode implements Backend.
func (f *FakeBackend) RemoveNode(_ context.Context, id string) error {
	if _, err := f.begin("RemoveNode"); err != nil {
		return err
	}
	defer f.mu.Unlock()
	i := slices.IndexFunc(f.cluster.Nodes, func(s wheel.NodeStatus) bool { return s.ID == id })
	if i < 0 {
		return fmt.Errorf("%w: node %q", wheel.ErrNotFound, id)
	}
	f.cluster.Nodes = slices.Delete(f.cluster.Nodes, i, i+1)
	return nil
}

func compareIDs(a, b wheel.ID) int {
	switch {
	case a.Less(b):
		return -1
	case b.Less(a):
		return 1
	default:
		return 0
	}
}

// Compile-time check.
var _ Backend = (*FakeBackend)(nil)

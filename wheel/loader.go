package wheel

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/segment"
)

// observer follows what committed batches do to the wheel: the leader's
// loader. The store calls it under its lock, after the batch committed
// and was published to the readers that skip the lock (Ready, Cursor,
// AppliedIndex), so whatever it wakes reads the state it heard of;
// nothing an observer does or answers changes what Apply writes, so a
// store applies the same log to the same state with or without one.
type observer interface {
	// followsThrough is the last slot second whose placements the
	// observer hears of (EventPlaced); -1: none.
	followsThrough() int64
	// applied receives the events of one committed batch, in order.
	applied(events []Event)
}

// EventKind says what an applied batch did that the loader must know.
type EventKind uint8

// Event kinds.
const (
	EventPlaced  EventKind = 1 // a message or lease record now lives in a loaded slot
	EventRemoved EventKind = 2 // a record of a loaded slot no longer lives there
	EventReady   EventKind = 3 // a message moved to its topic's ready queue
	EventExpired EventKind = 4 // slots before Second have expired
)

// Event is one change the loader follows.
type Event struct {
	Kind   EventKind
	Second int64
	ID     ID
	Msg    *Message
	Lease  bool
	Topic  string
}

type item struct {
	msg    Message
	second int64
	idx    int
}

type itemHeap []*item

func (h itemHeap) Len() int { return len(h) }

func (h itemHeap) Less(i, j int) bool {
	a, b := &h[i].msg, &h[j].msg
	if a.DeliverAtMs != b.DeliverAtMs {
		return a.DeliverAtMs < b.DeliverAtMs
	}
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return a.ID.Less(b.ID)
}

func (h itemHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (h *itemHeap) Push(x any) {
	it := x.(*item)
	it.idx = len(*h)
	*h = append(*h, it)
}

func (h *itemHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.idx = -1
	return it
}

// Loader is the precision heap: the messages of the loaded slots, seconds
// [cursor, loadedThrough], ordered by (due_ms, -priority, id), yielded at
// their exact due millisecond. Its memory is bounded by the loaded slots,
// not by the backlog. Attached to a store, it follows the store's applied
// batches: records placed into or removed from loaded slots reach it as
// events under the store's lock. It is memory of the leader only: the
// store never reads it while applying.
type Loader struct {
	mu            sync.Mutex
	loadedThrough int64 // the last loaded slot second
	h             itemHeap
	byID          map[ID]*item
	changed       chan struct{} // closed when the head may be earlier or topics became ready
	ready         map[string]bool
	// popped holds the messages PopDue returned and nobody claimed yet, by
	// id, with the second of the slot they were loaded from; an event that
	// moves or removes one deletes it (see Claim).
	popped map[ID]int64
}

// NewLoader returns an empty loader.
func NewLoader() *Loader {
	return &Loader{byID: map[ID]*item{}, changed: make(chan struct{}), ready: map[string]bool{}, popped: map[ID]int64{}, loadedThrough: -1}
}

// followsThrough implements observer.
func (l *Loader) followsThrough() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.loadedThrough
}

// Len is the number of loaded messages not yet yielded.
func (l *Loader) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.h)
}

func (l *Loader) signal() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// push adds or replaces a message; l.mu is held.
func (l *Loader) push(m Message, second int64) {
	if old := l.byID[m.ID]; old != nil {
		heap.Remove(&l.h, old.idx)
	}
	it := &item{msg: m, second: second}
	heap.Push(&l.h, it)
	l.byID[m.ID] = it
	if it.idx == 0 {
		l.signal()
	}
}

// pushAll adds the messages of a freshly loaded slot, which is then
// loaded: one heap.Init instead of a push each.
func (l *Loader) pushAll(msgs []Message, second int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loadedThrough = second
	if len(msgs) == 0 {
		return
	}
	oldHead := ID{}
	if len(l.h) > 0 {
		oldHead = l.h[0].msg.ID
	}
	items := make([]item, len(msgs))
	for i := range msgs {
		if old := l.byID[msgs[i].ID]; old != nil {
			heap.Remove(&l.h, old.idx)
		}
		it := &items[i]
		it.msg, it.second, it.idx = msgs[i], second, len(l.h)
		l.h = append(l.h, it)
		l.byID[it.msg.ID] = it
	}
	heap.Init(&l.h)
	if len(l.h) > 0 && l.h[0].msg.ID != oldHead {
		l.signal()
	}
}

func (l *Loader) remove(id ID, second int64) {
	if it := l.byID[id]; it != nil && it.second == second {
		heap.Remove(&l.h, it.idx)
		delete(l.byID, id)
	}
}

// applied implements observer: it follows a committed batch's events.
func (l *Loader) applied(events []Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range events {
		switch e.Kind {
		case EventPlaced:
			delete(l.popped, e.ID) // a popped copy is stale
			l.push(*e.Msg, e.Second)
		case EventRemoved:
			l.remove(e.ID, e.Second)
			if sec, ok := l.popped[e.ID]; ok && sec == e.Second {
				delete(l.popped, e.ID)
			}
		case EventReady:
			if !l.ready[e.Topic] {
				l.ready[e.Topic] = true
				l.signal()
			}
		case EventExpired:
			for len(l.h) > 0 && l.h[0].second < e.Second {
				it := heap.Pop(&l.h).(*item)
				delete(l.byID, it.msg.ID)
			}
			maps.DeleteFunc(l.popped, func(_ ID, sec int64) bool { return sec < e.Second })
		}
	}
}

func (l *Loader) secondOf(id ID) int64 {
	if it := l.byID[id]; it != nil {
		return it.second
	}
	return -1
}

// TakeReadyTopics returns and clears the topics that received ready
// messages since the last call.
func (l *Loader) TakeReadyTopics() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.ready))
	for t := range l.ready {
		out = append(out, t)
	}
	clear(l.ready)
	slices.Sort(out)
	return out
}

// PopDue removes and returns the loaded messages due at or before nowMs, in
// order, and the next due instant (-1 when none is loaded). The loader
// keeps following each returned message until it is claimed (see Claim).
func (l *Loader) PopDue(nowMs int64) ([]Message, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Message
	for len(l.h) > 0 && l.h[0].msg.DeliverAtMs <= nowMs {
		it := heap.Pop(&l.h).(*item)
		delete(l.byID, it.msg.ID)
		l.popped[it.msg.ID] = it.second
		out = append(out, it.msg)
	}
	next := int64(-1)
	if len(l.h) > 0 {
		next = l.h[0].msg.DeliverAtMs
	}
	return out, next
}

// Claim reports whether a message PopDue returned still lives in the slot
// it was loaded from, as PopDue returned it: no batch applied since then
// removed it from there (ack, cancel, reschedule, lease), placed it again,
// or expired its slot. It stops following the message: a second Claim of
// the same id reports false. This answers from memory what reading the
// message's state from the index would, on the path of every hand-off.
func (l *Loader) Claim(id ID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.popped[id]
	delete(l.popped, id)
	return ok
}

// Changed returns a channel closed when the head of the heap may have moved
// earlier or a topic became ready.
func (l *Loader) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// Next blocks until the earliest loaded message is due by clk and returns
// it. It never returns a message before its due millisecond.
func (l *Loader) Next(ctx context.Context, clk Clock) (Message, error) {
	for {
		l.mu.Lock()
		now := clk.Now()
		var wait time.Duration = -1
		if len(l.h) > 0 {
			top := l.h[0]
			if top.msg.DeliverAtMs <= now.UnixMilli() {
				heap.Pop(&l.h)
				delete(l.byID, top.msg.ID)
				l.mu.Unlock()
				return top.msg, nil
			}
			wait = time.UnixMilli(top.msg.DeliverAtMs).Sub(now)
		}
		changed := l.changed
		l.mu.Unlock()
		var timer <-chan time.Time
		if wait >= 0 {
			timer = clk.After(wait)
		}
		select {
		case <-ctx.Done():
			return Message{}, ctx.Err()
		case <-changed:
		case <-timer:
		}
	}
}

// AttachLoader makes l follow this store, with no slot loaded: from now on
// records placed into or removed from the slots it loads reach it. The
// leader attaches one; followers have none. It replaces any loader
// attached before.
func (s *Store) AttachLoader(l *Loader) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l.mu.Lock()
	l.loadedThrough = s.cursor - 1
	l.mu.Unlock()
	s.observer = l
}

// DetachLoader stops feeding the attached loader.
func (s *Store) DetachLoader() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.observer = nil
}

// LoadThrough loads every slot up to and including second into the attached
// loader and returns how many messages it added. Loading a slot reads its
// file once; later changes arrive as events.
func (s *Store) LoadThrough(second int64) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.observer.(*Loader)
	if !ok {
		return 0, errors.New("load slots: no loader attached")
	}
	second = min(second, s.cursor+HorizonSecs-1)
	n := 0
	for sec := max(l.followsThrough()+1, s.cursor); sec <= second; sec++ {
		msgs, err := s.liveMessages(sec)
		if err != nil {
			return n, err
		}
		l.pushAll(msgs, sec)
		n += len(msgs)
	}
	return n, nil
}

// liveCommitted returns the live records of the committed slot file of sec
// (none when the index records no file there). s.mu is held.
func (s *Store) liveCommitted(sec int64) ([]segment.Entry, error) {
	v, err := s.get(segLenKey(sec))
	if err != nil || v == nil {
		return nil, err
	}
	_, entries, err := segment.ReadFileFS(s.fs, s.segs.Path(sec))
	if err != nil {
		return nil, err
	}
	return liveEntries(entries), nil
}

// liveMessages decodes the live records of one committed slot file:
// messages, and leases, which come due when they end (for a redelivery, or,
// out of attempts, for the dead letters). s.mu is held.
func (s *Store) liveMessages(sec int64) ([]Message, error) {
	live, err := s.liveCommitted(sec)
	if err != nil {
		return nil, err
	}
	out := make([]Message, 0, len(live))
	intern := map[string]string{}
	for _, e := range live {
		m, err := decodeMessage(e.Payload, intern)
		if err != nil {
			return nil, fmt.Errorf("slot second %d offset %d: %w", sec, e.Offset, err)
		}
		out = append(out, m)
	}
	return out, nil
}

package wheel

import (
	"container/heap"
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// The loader: the leader's heap of the messages of the loaded slots, which
// follows what each committed batch changes (observer) and yields messages
// at their due millisecond (PopDue, Next). How the store attaches and
// fills it is loadthrough.go's.

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
	ID     model.ID
	Msg    *model.Message // EventPlaced: the event's own copy, as the batch left it; nothing changes it after
	Lease  bool
	Topic  string
}

type item struct {
	msg    model.Message
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
//
// A slot is loaded in two steps (see Store.LoadThrough): a snapshot of
// its file's committed length, under the store's lock, from which on the
// loader hears of the slot's changes although the slot is still loading;
// then, without the store's lock, the file's records up to that length,
// which merge makes part of the heap, followed by the events the slot
// received meanwhile, held back until then.
type Loader struct {
	mu            sync.Mutex
	loadedThrough int64 // the last loaded slot second
	// follows is the last slot second whose events the loader hears:
	// loadedThrough, or the last second loading.
	follows int64
	// loading are the slots whose files LoadThrough is reading, in order:
	// consecutive seconds ending at follows. Each holds back the events of
	// its slot until it merges.
	loading []*slotLoad
	h       itemHeap
	byID    map[model.ID]*item
	changed chan struct{} // closed when the head may be earlier or topics became ready
	ready   map[string]bool
	// popped holds the messages PopDue returned and nobody claimed yet, by
	// id, with the second of the slot they were loaded from; an event that
	// moves or removes one deletes it (see Claim).
	popped map[model.ID]int64
	// claimed holds the messages Claim took, as popped holds the others,
	// so that Unclaim can tell whether one still lives where it was
	// loaded. Like popped, it is bounded by the loaded slots: their expiry
	// drops what it holds of them.
	claimed map[model.ID]int64
}

// slotLoad is the load of one slot second in progress.
type slotLoad struct {
	second int64
	// path is the slot's file and length the bytes of it the index
	// covered at the snapshot; 0 when there is no file or no live record
	// in it, so nothing to read.
	path   string
	length int64
	// events are what batches applied since the snapshot placed into or
	// removed from the slot, in order, held back until the merge.
	events []Event
}

// NewLoader returns an empty loader.
func NewLoader() *Loader {
	return &Loader{byID: map[model.ID]*item{}, changed: make(chan struct{}), ready: map[string]bool{}, popped: map[model.ID]int64{}, claimed: map[model.ID]int64{}, loadedThrough: -1, follows: -1}
}

// followsThrough implements observer: the last second loaded or loading.
func (l *Loader) followsThrough() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.follows
}

// reset empties the loader and makes it follow the slots through second,
// none of them loaded or loading: loads in progress are dropped (see
// merge), and so are the messages it held, in the heap or popped, which it
// could not follow while detached, and which would otherwise hide the
// copies loaded afresh (see pushAll).
func (l *Loader) reset(second int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.loadedThrough, l.follows = second, second
	clear(l.loading)
	l.loading = nil
	l.h = nil
	clear(l.byID)
	clear(l.popped)
	clear(l.claimed)
}

// startLoading makes the loader follow the seconds of loads, which follow
// the last one it followed, while their files are read. The store's lock
// is held: no batch is applying, and each one applied from now on reports
// what it does to these slots.
func (l *Loader) startLoading(loads []*slotLoad) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A copy: expire and merge clear the entries they drop, while
	// LoadThrough goes on reading its own list.
	l.loading = slices.Clone(loads)
	l.follows = loads[len(loads)-1].second
}

// loadingOf returns the load in progress of second, nil when the second is
// not loading. l.mu is held.
func (l *Loader) loadingOf(second int64) *slotLoad {
	if len(l.loading) == 0 {
		return nil
	}
	i := second - l.loading[0].second
	if i < 0 || i >= int64(len(l.loading)) {
		return nil
	}
	return l.loading[i]
}

// merge makes ld's slot loaded: the messages read from its file up to the
// snapshot's length, then the events its slot received since the snapshot,
// in order. It returns how many of msgs it added: none when the load was
// dropped since the snapshot (its slot expired, or the loader was attached
// anew). Loads merge in the order of their seconds.
func (l *Loader) merge(ld *slotLoad, msgs []model.Message) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.loading) == 0 || l.loading[0] != ld {
		return 0
	}
	l.loading[0] = nil
	l.loading = l.loading[1:]
	l.loadedThrough = ld.second
	n := l.pushAll(msgs, ld.second)
	for _, e := range ld.events {
		l.follow(e)
	}
	return n
}

// abandon drops the loads in progress: the loader follows the loaded slots
// only, and the next LoadThrough loads the others afresh. The store's lock
// is held: no batch that read followsThrough before is applying, and the
// next ones report what they do to the loaded slots only.
func (l *Loader) abandon() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.follows = l.loadedThrough
	clear(l.loading)
	l.loading = nil
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
func (l *Loader) push(m model.Message, second int64) {
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

// pushAll adds the messages read from the file of a slot being loaded:
// one heap.Init instead of a push each. It returns how many it added.
// l.mu is held.
//
// The messages lived in the slot when its snapshot was taken; a batch
// applied since may have moved one to another slot, loaded already (or
// loaded earlier in the same LoadThrough, from a slot that was loading),
// where the loader heard of it at once. The copy read from the file is
// stale then and must not replace that one: a message the heap (byID)
// holds in another second is skipped. Its removal from this slot is among
// the events merge applies next, and would delete the other slot's copy
// had this one replaced it. (A message the heap holds in another second
// has left this slot since the snapshot: it can live in one slot only, and
// every removal reaches the loader.) A message popped from another second
// is skipped too: it also left this slot since, and the removal merge
// applies next would delete the copy again at once.
func (l *Loader) pushAll(msgs []model.Message, second int64) int {
	if len(msgs) == 0 {
		return 0
	}
	oldHead := model.ID{}
	if len(l.h) > 0 {
		oldHead = l.h[0].msg.ID
	}
	items := make([]item, len(msgs))
	n := 0
	for i := range msgs {
		id := msgs[i].ID
		if sec, ok := l.popped[id]; ok && sec != second {
			continue
		}
		if old := l.byID[id]; old != nil {
			if old.second != second {
				continue
			}
			heap.Remove(&l.h, old.idx)
		}
		it := &items[n]
		n++
		it.msg, it.second, it.idx = msgs[i], second, len(l.h)
		l.h = append(l.h, it)
		l.byID[id] = it
	}
	heap.Init(&l.h)
	if len(l.h) > 0 && l.h[0].msg.ID != oldHead {
		l.signal()
	}
	return n
}

func (l *Loader) remove(id model.ID, second int64) {
	if it := l.byID[id]; it != nil && it.second == second {
		heap.Remove(&l.h, it.idx)
		delete(l.byID, id)
	}
}

// applied implements observer: it follows a committed batch's events.
// What a placement or removal does to the popped messages it does at once,
// whether its slot is loaded or loading: a popped copy is stale from this
// batch on, and Claim must say so. What it does to the heap waits, for a
// loading slot, until the slot's file is merged.
func (l *Loader) applied(events []Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range events {
		switch e.Kind {
		case EventPlaced:
			delete(l.popped, e.ID) // a popped copy is stale
			delete(l.claimed, e.ID)
		case EventRemoved:
			if sec, ok := l.popped[e.ID]; ok && sec == e.Second {
				delete(l.popped, e.ID)
			}
			if sec, ok := l.claimed[e.ID]; ok && sec == e.Second {
				delete(l.claimed, e.ID)
			}
		case EventReady:
			if !l.ready[e.Topic] {
				l.ready[e.Topic] = true
				l.signal()
			}
			continue
		case EventExpired:
			l.expire(e.Second)
			continue
		default:
			continue
		}
		if ld := l.loadingOf(e.Second); ld != nil {
			ld.events = append(ld.events, e)
		} else {
			l.follow(e)
		}
	}
}

// follow applies a placement or removal to the heap. l.mu is held.
func (l *Loader) follow(e Event) {
	if e.Kind == EventPlaced {
		l.push(*e.Msg, e.Second)
	} else {
		l.remove(e.ID, e.Second)
	}
}

// expire drops what the loader holds of the slots before second: their
// messages, popped or not, and their loads in progress, whose files the
// store may delete at any time now. l.mu is held.
func (l *Loader) expire(second int64) {
	for len(l.h) > 0 && l.h[0].second < second {
		it := heap.Pop(&l.h).(*item)
		delete(l.byID, it.msg.ID)
	}
	maps.DeleteFunc(l.popped, func(_ model.ID, sec int64) bool { return sec < second })
	maps.DeleteFunc(l.claimed, func(_ model.ID, sec int64) bool { return sec < second })
	for len(l.loading) > 0 && l.loading[0].second < second {
		l.loading[0] = nil
		l.loading = l.loading[1:]
	}
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
func (l *Loader) PopDue(nowMs int64) ([]model.Message, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []model.Message
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
// or expired its slot. A second Claim of the same id reports false, until
// Unclaim. This answers from memory what reading the message's state from
// the index would, on the path of every hand-off.
func (l *Loader) Claim(id model.ID) bool {
	return l.move(id, l.popped, l.claimed)
}

// Unclaim ends the claim of a message whose hand-off failed (its Lease
// entry did not commit): if no batch applied since PopDue returned it
// changed it (as for Claim), it is claimable again, as PopDue returned
// it, and Unclaim reports true; the caller offers it again rather than
// leave it to its slot's expiry. A message not claimed reports false.
func (l *Loader) Unclaim(id model.ID) bool {
	return l.move(id, l.claimed, l.popped)
}

// move moves id from one of popped and claimed (from) to the other (to)
// and reports whether from held it. The maps are never replaced, only
// cleared, so they may be named before l.mu is taken.
func (l *Loader) move(id model.ID, from, to map[model.ID]int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	sec, ok := from[id]
	if ok {
		delete(from, id)
		to[id] = sec
	}
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
func (l *Loader) Next(ctx context.Context, clk Clock) (model.Message, error) {
	for {
		l.mu.Lock()
		now := clk.Now()
		var due time.Time
		if len(l.h) > 0 {
			top := l.h[0]
			if top.msg.DeliverAtMs <= now.UnixMilli() {
				heap.Pop(&l.h)
				delete(l.byID, top.msg.ID)
				l.mu.Unlock()
				return top.msg, nil
			}
			due = time.UnixMilli(top.msg.DeliverAtMs)
		}
		changed := l.changed
		l.mu.Unlock()
		var timer <-chan time.Time
		if !due.IsZero() {
			timer = clk.At(due)
		}
		select {
		case <-ctx.Done():
			return model.Message{}, ctx.Err()
		case <-changed:
		case <-timer:
		}
	}
}

package systemtest

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// NowMs is the harness clock: milliseconds since the Unix epoch, the same
// clock the nodes on this machine stamp deliver_at_ms with.
func NowMs() int64 { return time.Now().UnixMilli() }

// Enqueue is an enqueue the server acknowledged (answered 2xx).
type Enqueue struct {
	Token       string // the message's body: unique per message sent
	ID          string
	DeliverAtMs int64
	SentMs      int64
	AckedMs     int64
}

// Delivery is one message a reserve answered.
type Delivery struct {
	Consumer       string
	Via            string // the node the reserve was sent to
	Token          string // the body, naming the enqueue it came from
	ID             string
	Attempt        int32
	DeliverAtMs    int64
	Receipt        string
	LeaseExpiresMs int64
	SentMs         int64 // when the reserve was sent
	RecvMs         int64 // when its answer arrived
}

// Outcome is what an ack or nack call answered.
type Outcome int

// Outcomes of an ack or a nack.
const (
	// Settled: every receipt of the call was acked (nacked).
	Settled Outcome = iota
	// Mixed: the call answered, but some receipts were stale; which ones
	// the answer does not say.
	Mixed
	// Failed: the call got no answer or an error; it may or may not have
	// been applied.
	Failed
)

// Settle is one ack or nack call.
type Settle struct {
	Via      string // the node the call was sent to
	Nack     bool
	Receipts []string
	SentMs   int64
	DoneMs   int64
	Outcome  Outcome
	OK       int  // receipts acked (nacked), from the answer
	Stale    int  // receipts stale, from the answer
	Retry    bool // the call repeats one that failed
	Err      string
}

// LeaderChange is a new Raft term of a group seen by polling /v1/cluster.
type LeaderChange struct {
	AtMs   int64
	Group  int
	Leader string
	Term   uint64
}

// Fault is a fault the test injected, for the report.
type Fault struct {
	AtMs int64
	What string
}

// History records what test clients observed. It is safe for concurrent
// use; every recording method takes the times it should record, so a test
// can also build a synthetic history.
type History struct {
	mu         sync.Mutex
	sent       map[string]int64 // token → when first sent
	enqueued   map[string]Enqueue
	byID       map[string]string // id → token, of acknowledged enqueues
	delivered  map[string]bool   // ids delivered at least once
	deliveries []Delivery
	settles    []Settle
	leaders    []LeaderChange
	faults     []Fault
	maxTerm    map[int]uint64 // by group
	failedEnq  int
	calls      []call // every reserve, answered or not
}

// call is one reserve call, for AnsweredVia.
type call struct {
	via        string
	sent, done int64
}

// NewHistory returns an empty history.
func NewHistory() *History {
	return &History{sent: map[string]int64{}, enqueued: map[string]Enqueue{}, byID: map[string]string{}, delivered: map[string]bool{},
		maxTerm: map[int]uint64{}}
}

// EnqueueSent records that messages with these bodies (tokens) were sent.
// Until EnqueueAcked they are indeterminate: maybe stored, maybe not.
func (h *History) EnqueueSent(tokens []string, sentMs int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range tokens {
		if _, ok := h.sent[t]; !ok {
			h.sent[t] = sentMs
		}
	}
}

// EnqueueFailed records that an enqueue call got an error (its messages
// stay indeterminate).
func (h *History) EnqueueFailed() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failedEnq++
}

// EnqueueAcked records the 2xx answer to an enqueue of tokens.
func (h *History) EnqueueAcked(tokens []string, results []api.Result, sentMs, ackedMs int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, t := range tokens {
		if i >= len(results) {
			break
		}
		r := results[i]
		h.enqueued[t] = Enqueue{Token: t, ID: r.ID, DeliverAtMs: r.DeliverAtMs, SentMs: sentMs, AckedMs: ackedMs}
		h.byID[r.ID] = t
	}
}

// Delivered records the messages one reserve, sent to node via, answered.
func (h *History) Delivered(consumer, via string, ds []api.Delivery, sentMs, recvMs int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, call{via, sentMs, recvMs})
	for _, d := range ds {
		tok := ""
		if d.Body != nil {
			tok = *d.Body
		}
		h.deliveries = append(h.deliveries, Delivery{
			Consumer: consumer, Via: via, Token: tok, ID: d.ID, Attempt: d.Attempt, DeliverAtMs: d.DeliverAtMs,
			Receipt: d.Receipt, LeaseExpiresMs: d.LeaseExpiresMs, SentMs: sentMs, RecvMs: recvMs,
		})
		h.delivered[d.ID] = true
	}
}

// ReserveFailed records a reserve call to node via that got an error.
func (h *History) ReserveFailed(via string, sentMs, doneMs int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, call{via, sentMs, doneMs})
}

// Acked records an ack call sent to node via: its answer, or err when it
// got none.
func (h *History) Acked(via string, receipts []string, sentMs, doneMs int64, res api.AckResponse, err error, retry bool) {
	h.settle(via, false, receipts, sentMs, doneMs, res.Acked, res.Stale, err, retry)
}

// Nacked records a nack call sent to node via: its answer, or err when it
// got none.
func (h *History) Nacked(via string, receipts []string, sentMs, doneMs int64, res api.NackResponse, err error, retry bool) {
	h.settle(via, true, receipts, sentMs, doneMs, res.Nacked, res.Stale, err, retry)
}

func (h *History) settle(via string, nack bool, receipts []string, sentMs, doneMs int64, ok, stale int, err error, retry bool) {
	s := Settle{Via: via, Nack: nack, Receipts: slices.Clone(receipts), SentMs: sentMs, DoneMs: doneMs, OK: ok, Stale: stale, Retry: retry}
	switch {
	case err != nil:
		s.Outcome, s.Err = Failed, err.Error()
	case ok == len(receipts):
		s.Outcome = Settled
	default:
		s.Outcome = Mixed
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.settles = append(h.settles, s)
}

// ObserveLeader records a cluster view of group 0 (ObserveGroupLeader).
func (h *History) ObserveLeader(atMs int64, leader string, term uint64) bool {
	return h.ObserveGroupLeader(atMs, 0, leader, term)
}

// ObserveGroupLeader records a view of Raft group g: a term higher than
// any seen before in g is a leader change of g (the first view only sets
// the baseline). It reports whether it recorded a change. A leader change
// explains duplicates of the messages of its group only.
func (h *History) ObserveGroupLeader(atMs int64, g int, leader string, term uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if term <= h.maxTerm[g] {
		return false
	}
	first := h.maxTerm[g] == 0
	h.maxTerm[g] = term
	if first {
		return false
	}
	h.leaders = append(h.leaders, LeaderChange{AtMs: atMs, Group: g, Leader: leader, Term: term})
	return true
}

// LeaderChanges returns the leader changes recorded so far.
func (h *History) LeaderChanges() []LeaderChange {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.leaders)
}

// Fault records a fault the test injected.
func (h *History) Fault(atMs int64, format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = append(h.faults, Fault{AtMs: atMs, What: fmt.Sprintf(format, args...)})
}

// Acknowledged is the number of messages whose enqueue was answered 2xx.
func (h *History) Acknowledged() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byID)
}

// Undelivered is the number of acknowledged enqueues not delivered yet.
func (h *History) Undelivered() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for id := range h.byID {
		if !h.delivered[id] {
			n++
		}
	}
	return n
}

// FirstGroupDeliveryAfter returns the earliest receive time of a delivery
// received after ms, of the messages of group g only (-1: any group).
func (h *History) FirstGroupDeliveryAfter(ms int64, g int) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	best, ok := int64(0), false
	for _, d := range h.deliveries {
		if d.RecvMs > ms && (!ok || d.RecvMs < best) && (g < 0 || GroupOfID(d.ID) == g) {
			best, ok = d.RecvMs, true
		}
	}
	return best, ok
}

// AnsweredVia returns the deliveries and the acks or nacks that settled at
// least one receipt, of calls sent to node in [sentFrom, sentTo] and
// answered in [doneFrom, doneTo] (node "" is any node: a follower forwards
// to the leader), and how many reserve, ack and nack calls that window holds
// in all. A node that cannot commit (paused, cut off)
// must answer no delivery and settle nothing.
func (h *History) AnsweredVia(node string, sentFrom, sentTo, doneFrom, doneTo int64) ([]Delivery, []Settle, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	in := func(via string, sent, done int64) bool {
		return (node == "" || via == node) && sent >= sentFrom && sent <= sentTo && done >= doneFrom && done <= doneTo
	}
	var ds []Delivery
	for _, d := range h.deliveries {
		if in(d.Via, d.SentMs, d.RecvMs) {
			ds = append(ds, d)
		}
	}
	var ss []Settle
	calls := 0
	for _, s := range h.settles {
		if in(s.Via, s.SentMs, s.DoneMs) {
			calls++
			if s.OK > 0 {
				ss = append(ss, s)
			}
		}
	}
	for _, c := range h.calls {
		if in(c.via, c.sent, c.done) {
			calls++
		}
	}
	return ds, ss, calls
}

// GroupOfID is the Raft group a message id names (0 for an id that does
// not parse: a history of one group).
func GroupOfID(id string) int {
	mid, err := model.ParseID(id)
	if err != nil {
		return 0
	}
	return mid.Group()
}

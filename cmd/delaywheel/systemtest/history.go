package systemtest

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
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

// Fault records a fault the test injected.
func (h *History) Fault(atMs int64, format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults = append(h.faults, Fault{AtMs: atMs, What: fmt.Sprintf(format, args...)})
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

// Duplicate reasons, as Report.Duplicates counts them.
const (
	ReasonNack         = "nack"
	ReasonLeaseExpired = "lease expired"
	ReasonLeaderChange = "leader change"
)

// leaderSlack widens the window in which a leader change explains a
// duplicate: changes are seen by polling, a little late.
const leaderSlack = 1000

// Report is the verdict of Check.
type Report struct {
	Sent          int // distinct messages sent
	Acknowledged  int // enqueues answered 2xx
	FailedCalls   int // enqueue calls that got an error
	Delivered     int // acknowledged messages delivered at least once
	Indeterminate int // messages of failed enqueues that were delivered anyway
	Deliveries    int // every delivery, duplicates included
	// Duplicates counts redeliveries by the reason that allows them.
	Duplicates    map[string]int
	Acks          int // ack calls
	AckStale      int // receipts answered stale
	AckFailed     int // ack calls that got no answer
	Nacks         int // nack calls
	LeaderChanges int
	Faults        []Fault
	// Lateness of first deliveries: receive time − deliver_at_ms.
	LatenessP50, LatenessP99, LatenessMax int64

	Missing     []string // acknowledged but never delivered
	Early       []string // received before deliver_at_ms
	Unexplained []string // duplicates no lease expiry, nack or leader change explains
	Violations  []string // anything else impossible: phantoms, an ack that did not hold, …
}

// Failures lists every violation of the report, missing and early first.
func (r Report) Failures() []string {
	var out []string
	out = append(out, r.Missing...)
	out = append(out, r.Early...)
	out = append(out, r.Unexplained...)
	return append(out, r.Violations...)
}

// Err is nil when the history is correct, or an error listing up to 20
// failures.
func (r Report) Err() error {
	f := r.Failures()
	if len(f) == 0 {
		return nil
	}
	more := ""
	if len(f) > 20 {
		more = fmt.Sprintf("\n… and %d more", len(f)-20)
		f = f[:20]
	}
	return fmt.Errorf("history check: %d missing, %d early, %d unexplained duplicates, %d other violations:\n%s%s",
		len(r.Missing), len(r.Early), len(r.Unexplained), len(r.Violations), strings.Join(f, "\n"), more)
}

// String summarizes the report on one line.
func (r Report) String() string {
	var dup []string
	for _, k := range slices.Sorted(maps.Keys(r.Duplicates)) {
		dup = append(dup, fmt.Sprintf("%s %d", k, r.Duplicates[k]))
	}
	if len(dup) == 0 {
		dup = append(dup, "none")
	}
	return fmt.Sprintf("sent %d, acknowledged %d (failed calls %d), delivered %d/%d (+%d indeterminate), deliveries %d, duplicates [%s], "+
		"acks %d (stale receipts %d, failed calls %d), nacks %d, leader changes %d, lateness p50 %d ms p99 %d ms max %d ms; "+
		"missing %d, early %d, unexplained %d, violations %d",
		r.Sent, r.Acknowledged, r.FailedCalls, r.Delivered, r.Acknowledged, r.Indeterminate, r.Deliveries, strings.Join(dup, ", "),
		r.Acks, r.AckStale, r.AckFailed, r.Nacks, r.LeaderChanges, r.LatenessP50, r.LatenessP99, r.LatenessMax,
		len(r.Missing), len(r.Early), len(r.Unexplained), len(r.Violations))
}

// receiptInfo is what the history knows about one receipt.
type receiptInfo struct {
	d          *Delivery
	acked      bool // some ack call answered that every receipt was acked
	ackMaybe   bool // some ack call may have acked it
	nackMaybe  bool
	ackDoneMs  int64
	prevSettle bool // it was in an earlier ack or nack call
}

// Check proves the history correct or lists what is wrong:
//
//   - every acknowledged enqueue was delivered at least once (none missing);
//   - no delivery was received before its deliver_at_ms, neither the one
//     the enqueue answered nor the one the delivery carries (none early);
//   - every delivery names a message a client sent, under the id its
//     enqueue answered, and one message never got two ids;
//   - no receipt is handed out twice, and a redelivery never follows an ack
//     that answered success; every redelivery has a reason:
//     the previous receipt was nacked, its lease had expired by the time the
//     redelivery arrived, or a leader change of the message's group
//     happened in between;
//   - no attempt of a message is handed out twice, unless a leader change
//     happened in between (a leader answers a hand-off before its lease
//     commits, and the next leader hands that attempt out again if it never
//     did); the chaos tests check separately that a deposed leader answers
//     nothing;
//   - an ack answered stale only for receipts whose lease had expired by
//     the time the answer came, that were acked before, that a retried
//     call carried (its first try may have applied), or that were handed
//     out around a leader change (their lease may never have committed).
func (h *History) Check() Report {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := Report{Sent: len(h.sent), Acknowledged: len(h.enqueued), FailedCalls: h.failedEnq,
		Deliveries: len(h.deliveries), Duplicates: map[string]int{}, LeaderChanges: len(h.leaders), Faults: slices.Clone(h.faults)}

	// Receipts and their settles.
	rcpt := map[string]*receiptInfo{}
	for i := range h.deliveries {
		d := &h.deliveries[i]
		if _, dup := rcpt[d.Receipt]; dup {
			r.Violations = append(r.Violations, fmt.Sprintf("receipt %s handed out twice (message %s)", d.Receipt, d.ID))
			continue
		}
		rcpt[d.Receipt] = &receiptInfo{d: d}
	}
	for _, s := range h.settles {
		if s.Nack {
			r.Nacks++
		} else {
			r.Acks++
			r.AckStale += s.Stale
			if s.Outcome == Failed {
				r.AckFailed++
			}
		}
		explainable := 0
		for _, rc := range s.Receipts {
			ri := rcpt[rc]
			if ri == nil {
				ri = &receiptInfo{}
				rcpt[rc] = ri
				r.Violations = append(r.Violations, fmt.Sprintf("settled receipt %s was never delivered", rc))
			}
			if ri.prevSettle || s.Retry || (ri.d != nil && (ri.d.LeaseExpiresMs <= s.DoneMs ||
				h.leaderChangedLocked(GroupOfID(ri.d.ID), ri.d.RecvMs-leaderSlack, s.DoneMs+leaderSlack))) {
				explainable++
			}
			ri.prevSettle = true
			if s.Nack {
				ri.nackMaybe = true
				continue
			}
			if s.Outcome == Settled {
				ri.acked = true
				ri.ackDoneMs = s.DoneMs
			} else {
				ri.ackMaybe = true
			}
		}
		if s.Outcome == Mixed && s.Stale > explainable {
			kind := "ack"
			if s.Nack {
				kind = "nack"
			}
			r.Violations = append(r.Violations, fmt.Sprintf("%s of %d receipts at %d answered %d stale, but only %d had an expired lease or an earlier try (receipts %v)",
				kind, len(s.Receipts), s.DoneMs, s.Stale, explainable, s.Receipts))
		}
	}

	// Deliveries by message, in the order they arrived.
	byMsg := map[string][]*Delivery{}
	tokID := map[string]string{}
	for i := range h.deliveries {
		d := &h.deliveries[i]
		byMsg[d.ID] = append(byMsg[d.ID], d)
		if _, ok := h.sent[d.Token]; !ok {
			r.Violations = append(r.Violations, fmt.Sprintf("phantom: message %s with body %q was never sent", d.ID, d.Token))
		} else if id, ok := tokID[d.Token]; ok && id != d.ID {
			r.Violations = append(r.Violations, fmt.Sprintf("one enqueue became two messages: body %q delivered as %s and %s", d.Token, id, d.ID))
		} else {
			tokID[d.Token] = d.ID
		}
		if e, ok := h.enqueued[d.Token]; ok && e.ID != d.ID {
			r.Violations = append(r.Violations, fmt.Sprintf("body %q was acknowledged as %s but delivered as %s", d.Token, e.ID, d.ID))
		}
		due := d.DeliverAtMs
		if e, ok := h.enqueued[d.Token]; ok && e.DeliverAtMs > due {
			due = e.DeliverAtMs
		}
		if d.RecvMs < due {
			r.Early = append(r.Early, fmt.Sprintf("early: message %s (attempt %d) received at %d, %d ms before its deliver_at_ms %d (enqueue answered %d)",
				d.ID, d.Attempt, d.RecvMs, due-d.RecvMs, d.DeliverAtMs, h.enqueued[d.Token].DeliverAtMs))
		}
	}

	var lateness []int64
	for tok, e := range h.enqueued {
		ds := byMsg[e.ID]
		if len(ds) == 0 {
			r.Missing = append(r.Missing, fmt.Sprintf("missing: message %s (body %q, deliver_at_ms %d, acknowledged at %d) was never delivered",
				e.ID, tok, e.DeliverAtMs, e.AckedMs))
			continue
		}
		r.Delivered++
		first := slices.MinFunc(ds, func(a, b *Delivery) int { return int(a.RecvMs - b.RecvMs) })
		lateness = append(lateness, first.RecvMs-e.DeliverAtMs)
	}
	for id, ds := range byMsg {
		if _, ok := h.byID[id]; !ok && len(ds) > 0 {
			if _, sent := h.sent[ds[0].Token]; sent {
				r.Indeterminate++
			}
		}
	}
	sort.Slice(lateness, func(i, j int) bool { return lateness[i] < lateness[j] })
	if n := len(lateness); n > 0 {
		r.LatenessP50 = lateness[n/2]
		r.LatenessP99 = lateness[min(n-1, n*99/100)]
		r.LatenessMax = lateness[n-1]
	}

	// Redeliveries.
	ids := slices.Sorted(maps.Keys(byMsg))
	for _, id := range ids {
		ds := byMsg[id]
		g := GroupOfID(id)
		// Leases are granted in log order, and each grants the next
		// attempt: order by attempt, not by arrival (an answer can be
		// held up past its lease by a paused process).
		sort.SliceStable(ds, func(i, j int) bool {
			if ds[i].Attempt != ds[j].Attempt {
				return ds[i].Attempt < ds[j].Attempt
			}
			return ds[i].RecvMs < ds[j].RecvMs
		})
		for i := 1; i < len(ds); i++ {
			prev, next := ds[i-1], ds[i]
			if prev.Receipt == next.Receipt {
				continue // reported above
			}
			if next.Attempt == prev.Attempt {
				if pi := rcpt[prev.Receipt]; !pi.acked && h.leaderChangedLocked(g, prev.RecvMs-leaderSlack, next.RecvMs+leaderSlack) {
					r.Duplicates[ReasonLeaderChange]++
					continue
				}
				r.Violations = append(r.Violations, fmt.Sprintf("message %s: attempt %d delivered twice (to %s via %s at %d, receipt %s; to %s via %s at %d, receipt %s)",
					id, next.Attempt, prev.Consumer, prev.Via, prev.RecvMs, prev.Receipt, next.Consumer, next.Via, next.RecvMs, next.Receipt))
				continue
			}
			pi := rcpt[prev.Receipt]
			if pi.acked {
				r.Violations = append(r.Violations, fmt.Sprintf("message %s: delivered again (attempt %d at %d) after the ack of attempt %d succeeded at %d",
					id, next.Attempt, next.RecvMs, prev.Attempt, pi.ackDoneMs))
				continue
			}
			switch {
			case pi.nackMaybe:
				r.Duplicates[ReasonNack]++
			case next.RecvMs >= prev.LeaseExpiresMs:
				r.Duplicates[ReasonLeaseExpired]++
			case h.leaderChangedLocked(g, prev.RecvMs-leaderSlack, next.RecvMs+leaderSlack):
				r.Duplicates[ReasonLeaderChange]++
			default:
				r.Unexplained = append(r.Unexplained, fmt.Sprintf("unexplained duplicate: message %s attempt %d (to %s via %s at %d, lease until %d) and attempt %d (to %s via %s at %d): no nack, lease still valid, no leader change",
					id, prev.Attempt, prev.Consumer, prev.Via, prev.RecvMs, prev.LeaseExpiresMs, next.Attempt, next.Consumer, next.Via, next.RecvMs))
			}
		}
	}
	sort.Strings(r.Missing)
	sort.Strings(r.Early)
	return r
}

// leaderChangedLocked reports whether group g's leader changed between
// fromMs and toMs.
func (h *History) leaderChangedLocked(g int, fromMs, toMs int64) bool {
	for _, l := range h.leaders {
		if l.Group == g && l.AtMs >= fromMs && l.AtMs <= toMs {
			return true
		}
	}
	return false
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

package systemtest

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Check: the verdict of a History, what the cluster did against what it
// promised (every message delivered once acked, on time, duplicates each
// with its reason).

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

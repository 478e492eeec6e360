package systemtest

import (
	"errors"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// synth builds synthetic histories for the checker's own tests.
type synth struct{ h *History }

func newSynth() *synth { return &synth{h: NewHistory()} }

// enq records an acknowledged enqueue of body tok as id, due at due.
func (s *synth) enq(tok, id string, due int64) {
	s.h.EnqueueSent([]string{tok}, due-100)
	s.h.EnqueueAcked([]string{tok}, []api.Result{{ID: id, DeliverAtMs: due}}, due-100, due-90)
}

// del records a delivery of id (body tok) received at recv.
func (s *synth) del(consumer, tok, id string, attempt int32, due, recv, leaseUntil int64, receipt string) {
	s.h.Delivered(consumer, "n1", []api.Delivery{{ID: id, Payload: api.TextBody(tok), Attempt: attempt, DeliverAtMs: due,
		Receipt: receipt, LeaseExpiresMs: leaseUntil}}, recv-50, recv)
}

func (s *synth) ack(receipt string, at int64) {
	s.h.Acked("n1", []string{receipt}, at-5, at, api.AckResponse{Acked: 1}, nil, false)
}

func wantFailure(t *testing.T, r Report, substr string) {
	t.Helper()
	err := r.Err()
	if err == nil {
		t.Fatalf("checker passed a bad history (want a failure mentioning %q): %v", substr, r)
	}
	if !strings.Contains(err.Error(), substr) {
		t.Fatalf("checker failure does not mention %q: %v", substr, err)
	}
}

func TestCheckerCleanHistory(t *testing.T) {
	s := newSynth()
	s.enq("a", "A", 1000)
	s.enq("b", "B", 2000)
	s.del("c0", "a", "A", 1, 1000, 1001, 31001, "A.1")
	s.ack("A.1", 1002)
	// B: the first lease expires unacked, then it comes back.
	s.del("c0", "b", "B", 1, 2000, 2000, 2300, "B.1")
	s.del("c1", "b", "B", 2, 2000, 2301, 2601, "B.2")
	s.h.Acked("n1", []string{"B.1"}, 2400, 2410, api.AckResponse{Stale: 1}, nil, false)
	s.ack("B.2", 2310)
	r := s.h.Check()
	if err := r.Err(); err != nil {
		t.Fatalf("clean history failed: %v", err)
	}
	if r.Delivered != 2 || r.Deliveries != 3 || r.Duplicates[ReasonLeaseExpired] != 1 {
		t.Fatalf("report: %v", r)
	}
	if r.LatenessMax != 1 {
		t.Fatalf("lateness max %d, want 1", r.LatenessMax)
	}
}

func TestCheckerCatchesMissing(t *testing.T) {
	s := newSynth()
	s.enq("a", "A", 1000)
	s.enq("b", "B", 1000)
	s.del("c0", "a", "A", 1, 1000, 1001, 31001, "A.1")
	r := s.h.Check()
	wantFailure(t, r, "missing: message B")
	if len(r.Missing) != 1 {
		t.Fatalf("missing %v", r.Missing)
	}
}

func TestCheckerIgnoresUnacknowledgedEnqueues(t *testing.T) {
	s := newSynth()
	// Sent, no answer: may or may not be delivered.
	s.h.EnqueueSent([]string{"x", "y"}, 900)
	s.h.EnqueueFailed()
	s.del("c0", "x", "X", 1, 1000, 1000, 31000, "X.1")
	r := s.h.Check()
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if r.Indeterminate != 1 {
		t.Fatalf("indeterminate %d, want 1", r.Indeterminate)
	}
}

func TestCheckerCatchesEarly(t *testing.T) {
	s := newSynth()
	s.enq("a", "A", 5000)
	s.del("c0", "a", "A", 1, 5000, 4999, 34999, "A.1")
	wantFailure(t, s.h.Check(), "early: message A")

	// A delivery that claims an earlier due time than the enqueue answered
	// is early all the same.
	s = newSynth()
	s.enq("a", "A", 5000)
	s.del("c0", "a", "A", 1, 3000, 4000, 34000, "A.1")
	wantFailure(t, s.h.Check(), "early: message A")
}

func TestCheckerCatchesUnexplainedDuplicate(t *testing.T) {
	s := newSynth()
	s.enq("a", "A", 1000)
	s.del("c0", "a", "A", 1, 1000, 1000, 31000, "A.1")
	s.del("c1", "a", "A", 2, 1000, 1500, 31500, "A.2") // lease valid, no nack, no leader change
	r := s.h.Check()
	wantFailure(t, r, "unexplained duplicate: message A")
}

func TestCheckerExplainsDuplicates(t *testing.T) {
	s := newSynth()
	s.enq("n", "N", 1000)
	s.enq("l", "L", 1000)
	// Nacked, then back at once.
	s.del("c0", "n", "N", 1, 1000, 1000, 31000, "N.1")
	s.h.Nacked("n1", []string{"N.1"}, 1001, 1002, api.NackResponse{Nacked: 1}, nil, false)
	s.del("c0", "n", "N", 2, 1002, 1003, 31003, "N.2")
	// A leader change between the two deliveries.
	s.h.ObserveLeader(900, "n1", 2) // baseline
	s.h.ObserveLeader(1100, "n2", 3)
	s.del("c0", "l", "L", 1, 1000, 1000, 31000, "L.1")
	s.del("c1", "l", "L", 2, 1000, 1200, 31200, "L.2")
	r := s.h.Check()
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if r.Duplicates[ReasonNack] != 1 || r.Duplicates[ReasonLeaderChange] != 1 || r.LeaderChanges != 1 {
		t.Fatalf("report: %v", r)
	}
}

// A leader change explains the duplicates of its own group's messages
// only: with many groups, another group's election says nothing of a
// message's leases.
func TestCheckerExplainsDuplicatesByTheirGroup(t *testing.T) {
	g0 := model.ID{Index: 7, Seq: 1}.String()
	g1 := model.ID{Index: 7, Seq: 1<<24 | 1}.String()
	dup := func(id string) *synth {
		s := newSynth()
		s.enq("a", id, 1000)
		s.h.ObserveGroupLeader(900, 0, "n1", 2) // baselines
		s.h.ObserveGroupLeader(900, 1, "n2", 2)
		s.h.ObserveGroupLeader(1100, 1, "n3", 3)
		s.del("c0", "a", id, 1, 1000, 1000, 31000, id+".1")
		s.del("c1", "a", id, 2, 1000, 1200, 31200, id+".2")
		return s
	}
	if GroupOfID(g1) != 1 || GroupOfID(g0) != 0 {
		t.Fatalf("groups of %s and %s: %d and %d", g0, g1, GroupOfID(g0), GroupOfID(g1))
	}
	if r := dup(g1).h.Check(); r.Err() != nil || r.Duplicates[ReasonLeaderChange] != 1 {
		t.Fatalf("duplicate of group 1 around its leader change: %v, %v", r, r.Err())
	}
	wantFailure(t, dup(g0).h.Check(), "unexplained duplicate: message "+g0)
}

func TestCheckerCatchesRedeliveryAfterAck(t *testing.T) {
	s := newSynth()
	s.enq("a", "A", 1000)
	s.del("c0", "a", "A", 1, 1000, 1000, 1300, "A.1")
	s.ack("A.1", 1010)
	s.del("c1", "a", "A", 2, 1000, 1400, 1700, "A.2") // lease expired, but the ack held
	wantFailure(t, s.h.Check(), "after the ack of attempt 1 succeeded")
}

func TestCheckerCatchesStaleLeaderDelivery(t *testing.T) {
	// Two consumers get the same attempt with different receipts and no
	// leader change explains it: two leaders handed the message out at once.
	s := newSynth()
	s.enq("a", "A", 1000)
	s.h.ObserveLeader(900, "n1", 2)
	s.del("c0", "a", "A", 1, 1000, 1000, 4000, "A.1")
	s.del("c1", "a", "A", 1, 1000, 1100, 4100, "A.1b")
	wantFailure(t, s.h.Check(), "attempt 1 delivered twice")

	// Around a leader change it is the hand-off of a leader that died
	// before the lease committed, and its receipt may be answered stale...
	s = newSynth()
	s.enq("a", "A", 1000)
	s.h.ObserveLeader(900, "n1", 2)
	s.h.ObserveLeader(3000, "n2", 3)
	s.del("c0", "a", "A", 1, 1000, 1000, 4000, "A.1")
	s.h.Acked("n2", []string{"A.1"}, 1001, 3100, api.AckResponse{Stale: 1}, nil, false)
	s.del("c1", "a", "A", 1, 1000, 3200, 6200, "A.1b")
	r := s.h.Check()
	if err := r.Err(); err != nil || r.Duplicates[ReasonLeaderChange] != 1 {
		t.Fatalf("repeat around a leader change: %v, %v", r, err)
	}
	// ...but not if its ack succeeded: then the lease had committed.
	s = newSynth()
	s.enq("a", "A", 1000)
	s.h.ObserveLeader(900, "n1", 2)
	s.h.ObserveLeader(3000, "n2", 3)
	s.del("c0", "a", "A", 1, 1000, 1000, 4000, "A.1")
	s.ack("A.1", 1010)
	s.del("c1", "a", "A", 1, 1000, 3200, 6200, "A.1b")
	wantFailure(t, s.h.Check(), "attempt 1 delivered twice")

	// The same receipt twice.
	s = newSynth()
	s.enq("a", "A", 1000)
	s.del("c0", "a", "A", 1, 1000, 1000, 4000, "A.1")
	s.del("c1", "a", "A", 1, 1000, 1100, 4100, "A.1")
	wantFailure(t, s.h.Check(), "handed out twice")
}

func TestCheckerCatchesUnexplainedStaleAck(t *testing.T) {
	s := newSynth()
	s.enq("a", "A", 1000)
	s.del("c0", "a", "A", 1, 1000, 1000, 4000, "A.1")
	// Answered stale while the lease still had 3 s to run, first try.
	s.h.Acked("n1", []string{"A.1"}, 1001, 1010, api.AckResponse{Stale: 1}, nil, false)
	wantFailure(t, s.h.Check(), "answered 1 stale")

	// The same after a failed first try is fine: the first may have applied.
	s = newSynth()
	s.enq("a", "A", 1000)
	s.del("c0", "a", "A", 1, 1000, 1000, 4000, "A.1")
	s.h.Acked("n1", []string{"A.1"}, 1001, 1005, api.AckResponse{}, errors.New("503"), false)
	s.h.Acked("n1", []string{"A.1"}, 1101, 1110, api.AckResponse{Stale: 1}, nil, true)
	if err := s.h.Check().Err(); err != nil {
		t.Fatal(err)
	}
}

func TestCheckerCatchesPhantomsAndSplitMessages(t *testing.T) {
	s := newSynth()
	s.del("c0", "never-sent", "Z", 1, 1000, 1000, 4000, "Z.1")
	wantFailure(t, s.h.Check(), "phantom")

	s = newSynth()
	s.enq("a", "A", 1000)
	s.del("c0", "a", "A", 1, 1000, 1000, 4000, "A.1")
	s.del("c0", "a", "A2", 1, 1000, 1000, 4000, "A2.1")
	wantFailure(t, s.h.Check(), "one enqueue became two messages")
}

func TestCheckerOrdersByAttemptNotArrival(t *testing.T) {
	// Attempt 1's answer is held up (a paused node) past its lease; the
	// message came back as attempt 2, which was acked, before attempt 1's
	// answer arrived. That is a lease expiry, not a redelivery after an ack.
	s := newSynth()
	s.enq("a", "A", 1000)
	s.del("c0", "a", "A", 2, 1000, 4100, 7100, "A.2")
	s.ack("A.2", 4110)
	s.del("c1", "a", "A", 1, 1000, 5000, 4000, "A.1")
	s.h.Acked("n1", []string{"A.1"}, 5001, 5010, api.AckResponse{Stale: 1}, nil, false)
	r := s.h.Check()
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if r.Duplicates[ReasonLeaseExpired] != 1 {
		t.Fatalf("report: %v", r)
	}
}

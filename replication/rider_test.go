package replication_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

// enqueueIndex is the log index of the entry that enqueued one message, as
// its id names it.
func enqueueIndex(t *testing.T) func(res []command.Result, err error) uint64 {
	return func(res []command.Result, err error) uint64 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		return res[0].Value.([]wheel.Enqueued)[0].ID.Index
	}
}

func oneMessage(body string) command.Schedule {
	now := time.Now().UnixMilli()
	return command.Schedule{NowMs: now, Messages: []command.NewMessage{{Topic: "t", Body: []byte(body), DeliverAtMs: now + 3600_000}}}
}

// A rider is in the log order from the moment it is queued: every entry
// submitted after it follows it, in the order the riders were queued.
func TestRiderPrecedesLaterEntries(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	n := c.Leader().Node
	ctx := context.Background()
	waitA, _ := n.SubmitRider(ctx, oneMessage("a"))
	waitB, _ := n.SubmitRider(ctx, oneMessage("b"))
	later := enqueueIndex(t)(n.SubmitWait(ctx, oneMessage("c")))
	a := enqueueIndex(t)(waitA())
	b := enqueueIndex(t)(waitB())
	if !(a < b && b < later) {
		t.Fatalf("log indexes: riders %d, %d, then the later entry %d; want them in that order", a, b, later)
	}
}

// A rider that no entry follows reaches the log on its own, and flush
// hands it over at once.
func TestRiderAloneCommits(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	n := c.Leader().Node
	ctx := context.Background()
	wait, _ := n.SubmitRider(ctx, oneMessage("alone"))
	first := enqueueIndex(t)(wait())
	wait, flush := n.SubmitRider(ctx, oneMessage("flushed"))
	flush()
	if got := enqueueIndex(t)(wait()); got <= first {
		t.Fatalf("the flushed rider's index %d, want after %d", got, first)
	}
}

// A rider queued on a node that has lost its leadership fails as an entry
// submitted there does.
func TestRiderFailsOffLeader(t *testing.T) {
	c := repltest.NewCluster(t, 3, nil)
	f := c.Follower().Node
	wait, flush := f.SubmitRider(context.Background(), oneMessage("nowhere"))
	flush()
	if _, err := wait(); err == nil {
		t.Fatal("a rider on a follower committed")
	}
}

// A rider counts as a pending proposal from the moment it is queued, so
// back-pressure refuses it before its hand-off is answered, never after.
func TestRiderRefusedUnderBackPressure(t *testing.T) {
	// A clock that stands still: no tick proposes anything meanwhile.
	c := repltest.NewCluster(t, 1, func(cfg *replication.Config) {
		cfg.MaxPendingApply = 1
		cfg.Clock = wheeltest.NewFakeClock(time.Now())
	})
	n := c.Leader().Node
	r := n.DispatchReplica()
	ctx := context.Background()
	// The leader's own record is its last proposal of its own.
	deadline := time.Now().Add(time.Minute)
	for !n.HasSelf() || n.Pending().Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the leader did not settle its own proposals")
		}
		time.Sleep(time.Millisecond)
	}

	n.Pending().Add(1) // one proposal in flight: the limit
	if _, _, err := r.SubmitRider(ctx, oneMessage("refused")); !errors.Is(err, model.ErrOverloaded) {
		t.Fatalf("SubmitRider at the limit = %v, want ErrOverloaded", err)
	}
	n.Pending().Add(-1)

	wait, flush, err := r.SubmitRider(ctx, oneMessage("taken"))
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Pending().Load(); got != 1 {
		t.Fatalf("pending with a rider queued = %d, want 1", got)
	}
	if _, _, err := r.SubmitRider(ctx, oneMessage("second")); !errors.Is(err, model.ErrOverloaded) {
		t.Fatalf("a second rider past the limit = %v, want ErrOverloaded", err)
	}
	flush()
	enqueueIndex(t)(wait())
	if got := n.Pending().Load(); got != 0 {
		t.Fatalf("pending after the rider settled = %d, want 0", got)
	}
}

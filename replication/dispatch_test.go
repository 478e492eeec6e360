package replication

import (
	"context"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
)

// fakeClockCluster starts n nodes on a fake clock that reads a little past
// the start of the current second.
func fakeClockCluster(t *testing.T, n int) (*TestCluster, *wheel.FakeClock) {
	t.Helper()
	clk := wheel.NewFakeClock(time.Now().Truncate(time.Second).Add(100 * time.Millisecond))
	return NewTestCluster(t, n, func(cfg *Config) { cfg.Clock = clk }), clk
}

func enqueueAt(t *testing.T, n *Node, topic string, dueMs int64) wheel.ID {
	t.Helper()
	res, err := n.Enqueue(context.Background(), []wheel.NewMessage{{Topic: topic, Body: []byte("x"), DeliverAtMs: dueMs, MaxAttempts: 3}})
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return res[0].ID
}

func reserveNow(t *testing.T, n *Node, topic string) []wheel.Delivery {
	t.Helper()
	ds, err := n.Reserve(context.Background(), topic, 10, 0, 0)
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	return ds
}

// A reserve pops what the clock says is due itself: it does not depend on
// the fire loop having run, and it never takes a message before its time.
func TestReserveTakesWhatCameDue(t *testing.T) {
	c, clk := fakeClockCluster(t, 1)
	n := c.Leader().Node
	due := clk.Now().Add(300 * time.Millisecond).UnixMilli()
	id := enqueueAt(t, n, "t", due)

	clk.Set(time.UnixMilli(due - 1))
	if ds := reserveNow(t, n, "t"); len(ds) != 0 {
		t.Fatalf("reserve a millisecond before the due time got %d messages", len(ds))
	}
	clk.Set(time.UnixMilli(due))
	ds := reserveNow(t, n, "t")
	if len(ds) != 1 || ds[0].Message.ID != id {
		t.Fatalf("reserve at the due time got %+v, want message %s", ds, id)
	}
}

// A topic whose ready queue was read empty is read again once messages
// reach it (here, by the expiry of the slot nobody reserved from).
func TestReadyQueueReadAgainAfterItFills(t *testing.T) {
	c, clk := fakeClockCluster(t, 1)
	n := c.Leader().Node
	due := clk.Now().Add(300 * time.Millisecond).UnixMilli()
	id := enqueueAt(t, n, "t", due)
	if ds := reserveNow(t, n, "t"); len(ds) != 0 {
		t.Fatalf("reserve before the due time got %d messages", len(ds))
	}

	// Past the slot's second and the grace: the tick expires the slot and
	// the message moves to the ready queue.
	clk.Set(time.UnixMilli(due).Truncate(time.Second).Add(time.Second + n.cfg.ExpireGrace + time.Millisecond))
	WaitFor(t, 10*time.Second, "the message to reach the ready queue", func() bool {
		clk.Advance(time.Millisecond) // lets the tick loop run again
		v, err := n.Get(context.Background(), id)
		return err == nil && v.State == wheel.StateReady
	})
	ds := reserveNow(t, n, "t")
	if len(ds) != 1 || ds[0].Message.ID != id {
		t.Fatalf("reserve from the ready queue got %+v, want message %s", ds, id)
	}
}

// The only voter holds the leadership lease without confirmations; with
// other voters, it takes a quorum's.
func TestLeaseHeldBySoleVoterOnly(t *testing.T) {
	c, _ := fakeClockCluster(t, 1)
	d := newDispatcher(c.Leader().Node) // never started: nothing confirms
	if !d.leaseHeld() {
		t.Fatal("the only voter does not hold the lease")
	}
	d.revokeLease()
	if d.leaseHeld() {
		t.Fatal("a revoked lease is held")
	}

	c3, _ := fakeClockCluster(t, 3)
	if d := newDispatcher(c3.Leader().Node); d.leaseHeld() {
		t.Fatal("a leader of three holds the lease without any confirmation")
	}
}

// With an injected clock the waker uses the clock's timers.
func TestWakerFollowsInjectedClock(t *testing.T) {
	clk := wheel.NewFakeClock(time.Unix(1000, 0))
	w, err := newWaker(clk)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	c := w.at(clk.Now().Add(5 * time.Millisecond))
	select {
	case <-c:
		t.Fatal("woke before the clock moved")
	default:
	}
	clk.Advance(5 * time.Millisecond)
	<-c
}

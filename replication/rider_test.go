package replication_test

import (
	"context"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
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

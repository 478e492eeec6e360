package dispatch

import (
	"errors"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// ReserveID leases a ready or a delayed message by id for the ttr given,
// at attempt 1; the reserves by due time then do not hand it out, and its
// receipt acks it. A reserved, acked, unknown or skipped message is not
// found.
func TestReserveIDLeasesReadyAndDelayed(t *testing.T) {
	d, n, clk := startFake(t)
	now := clk.Now().UnixMilli()
	ready := enqueueAt(t, n, clk, "t", now)
	later := enqueueAt(t, n, clk, "t", now+5_000)
	soon := enqueueAt(t, n, clk, "t", now+400) // within the preload: in the heap
	waitFor(t, "the heap to load the next second", func() bool { return d.loader.Len() > 0 })
	for _, id := range []model.ID{ready, later, soon} {
		dl, err := d.ReserveID(t.Context(), id, 7*time.Second, nil)
		if err != nil {
			t.Fatalf("ReserveID %s: %v", id, err)
		}
		if dl.Message.ID != id || dl.Attempt != 1 || dl.LeaseExpiresMs != now+7_000 || string(dl.Body) != "x" {
			t.Fatalf("delivery %+v, want message %s at attempt 1, lease to %d", dl, id, now+7_000)
		}
		if v, _ := n.st.Get(id); v.State != wheel.StateReserved {
			t.Fatalf("message %s is %s, want reserved", id, v.State)
		}
	}
	clk.Advance(6 * time.Second)
	if ds := reserveNow(t, d, "t"); len(ds) != 0 {
		t.Fatalf("a reserve handed out %+v; all are reserved by id", ds)
	}
	res, err := n.Propose(t.Context(), command.Ack{NowMs: clk.Now().UnixMilli(), Receipts: []model.Receipt{{ID: ready}}})
	if err != nil || res[0].Value.(command.Counted).Done != 0 {
		t.Fatalf("ack without the receipt: %+v %v", res, err)
	}
	for _, id := range []model.ID{ready, later, soon, {Index: 999, Seq: 1}} {
		if _, err := d.ReserveID(t.Context(), id, 0, nil); !errors.Is(err, model.ErrNotFound) {
			t.Fatalf("ReserveID of reserved or unknown %s: %v, want not found", id, err)
		}
	}
	skipped := enqueueAt(t, n, clk, "hooked", clk.Now().UnixMilli())
	if _, err := d.ReserveID(t.Context(), skipped, 0, func(topic string) bool { return topic == "hooked" }); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("ReserveID of a skipped topic: %v, want not found", err)
	}
	if v, _ := n.st.Get(skipped); v.State == wheel.StateReserved {
		t.Fatalf("skipped message is %s", v.State)
	}
}

// ReserveID is answered once its Lease commits, even under the leadership
// lease, and refuses a message a reserve is handing out.
func TestReserveIDAnsweredAtCommitAndNotTwice(t *testing.T) {
	d, n, clk := startFake(t)
	a := enqueueAt(t, n, clk, "t", clk.Now().UnixMilli())
	b := enqueueAt(t, n, clk, "t", clk.Now().UnixMilli()+60_000)
	commit := make(chan struct{})
	n.mu.Lock()
	n.commit = commit
	n.mu.Unlock()
	n.submitted = make(chan struct{}, 1)

	ds := reserveNow(t, d, "t") // answered before its commit, under the lease
	<-n.submitted
	if len(ds) != 1 || ds[0].Message.ID != a {
		t.Fatalf("reserve %+v, want %s", ds, a)
	}
	if _, err := d.ReserveID(t.Context(), a, 0, nil); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("ReserveID of a message being handed out: %v, want not found", err)
	}

	answered := make(chan error, 1)
	go func() {
		_, err := d.ReserveID(t.Context(), b, 0, nil)
		answered <- err
	}()
	<-n.submitted // the Lease is in the log order
	select {
	case err := <-answered:
		t.Fatalf("ReserveID answered %v before its Lease committed", err)
	default:
	}
	close(commit)
	if err := <-answered; err != nil {
		t.Fatalf("ReserveID: %v", err)
	}
	waitFor(t, "the hand-offs to end", func() bool { return !d.InFlight(a) && !d.InFlight(b) })
}

// ReserveID of a dead (buried) message redrives and leases it in one
// entry: reserved at attempt 1, its attempts counted afresh.
func TestReserveIDOfADeadMessage(t *testing.T) {
	d, n, clk := startFake(t)
	id := enqueueAt(t, n, clk, "t", clk.Now().UnixMilli())
	ds := reserveNow(t, d, "t")
	if len(ds) != 1 {
		t.Fatalf("reserve %+v", ds)
	}
	waitFor(t, "the hand-off to end", func() bool { return !d.InFlight(id) })
	res, err := n.Propose(t.Context(), command.DeadLetter{NowMs: clk.Now().UnixMilli(), Receipts: []model.Receipt{ds[0].Receipt}})
	if err != nil || res[0].Value.(command.Counted).Done != 1 {
		t.Fatalf("dead letter: %+v %v", res, err)
	}
	dl, err := d.ReserveID(t.Context(), id, 0, nil)
	if err != nil || dl.Message.ID != id || dl.Attempt != 1 {
		t.Fatalf("ReserveID of a dead message: %+v %v; want attempt 1", dl, err)
	}
	if v, _ := n.st.Get(id); v.State != wheel.StateReserved || v.Attempts != 1 || v.Receipt != dl.Receipt.Nonce {
		t.Fatalf("message is %s at attempt %d, want reserved at 1 under the new receipt", v.State, v.Attempts)
	}
	if c := n.st.Topics(); len(c) != 1 || c[0].Dead != 0 || c[0].Reserved != 1 {
		t.Fatalf("counts %+v", c)
	}
}

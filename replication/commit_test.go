package replication_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	dto "github.com/prometheus/client_model/go"

	. "github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

// answeredAtCommit is how many enqueues the node answered at commit.
func answeredAtCommit(t *testing.T, n *Node) uint64 {
	t.Helper()
	var m dto.Metric
	if err := n.Answered().Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// applyHold holds a node's state machine: while gate is set, a batch that
// holds an entry past after waits until gate is closed. Entries logged
// before the hold still apply, so none of them queues the held one behind it.
type applyHold struct {
	gate atomic.Pointer[chan struct{}]
	from atomic.Uint64
}

func (h *applyHold) wait(logs []*raft.Log) {
	if g := h.gate.Load(); g != nil && len(logs) > 0 && logs[len(logs)-1].Index > h.from.Load() {
		<-*g
	}
}

// after holds every batch of entries past index until release, which may
// be called more than once.
func (h *applyHold) after(index uint64) (release func()) {
	gate := make(chan struct{})
	h.from.Store(index)
	h.gate.Store(&gate)
	var once sync.Once
	return func() {
		once.Do(func() {
			h.gate.Store(nil)
			close(gate)
		})
	}
}

// An enqueue without keys is answered once its entry commits, before the
// leader applies it, with the IDs the apply gives; reads on the leader
// wait for the apply, so they see what was answered.
func TestEnqueueAnsweredAtCommit(t *testing.T) {
	for _, size := range []int{1, 3} {
		t.Run(fmt.Sprintf("%dnodes", size), func(t *testing.T) {
			// A clock that stands still: the leader's tick loop proposes no
			// Expire, whose batch, held in the state machine below, would
			// keep the enqueue's batch (and so its answer, on three nodes)
			// queued behind it.
			holds := map[string]*applyHold{}
			c := repltest.NewCluster(t, size, func(cfg *Config) {
				cfg.Clock = wheeltest.NewFakeClock(time.Now())
				h := holds[cfg.ID]
				if h == nil {
					h = &applyHold{}
					holds[cfg.ID] = h
				}
				SetBeforeApply(cfg, h.wait)
			})
			n := c.Leader().Node
			hold := holds[n.Cfg().ID]
			ctx := context.Background()
			now := time.Now().UnixMilli()
			msgs := []command.NewMessage{
				{Topic: "t", Body: []byte("a"), DeliverAtMs: now + 60_000},
				{Topic: "t", Body: []byte("b"), DeliverAtMs: -5},
				{Topic: "t", Body: []byte("c"), DeliverAtMs: now + 3*3600_000},
			}

			// Every node's address is recorded first: a SetNode logged after
			// the hold would keep the enqueue's batch queued behind it.
			nettest.WaitFor(t, nettest.Patience, "every node's address to be recorded", func() bool {
				for _, tn := range c.Nodes {
					if !tn.Node.HasSelf() {
						return false
					}
				}
				return true
			})
			// Hold the leader's state machine: nothing logged from here on
			// can be applied.
			mark := n.Raft().LastIndex()
			release := hold.after(mark)
			defer release()
			nettest.WaitFor(t, nettest.Patience, "the entries logged before the hold to apply", func() bool {
				return n.Raft().AppliedIndex() >= mark
			})
			before := n.Store().AppliedIndex()
			done := make(chan struct{})
			var res []wheel.Enqueued
			var err error
			go func() {
				defer close(done)
				res, err = n.Enqueue(ctx, msgs)
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("enqueue was not answered while the state machine was held")
			}
			if err != nil {
				t.Fatalf("enqueue: %v", err)
			}
			if got := n.Store().AppliedIndex(); got != before {
				t.Fatalf("applied index moved from %d to %d while the state machine was held", before, got)
			}
			if got := answeredAtCommit(t, n); got != 1 {
				t.Fatalf("%d enqueues answered at commit, want 1", got)
			}
			if n.Solo() != (size == 1) {
				t.Fatalf("the log store says only voter %v in a cluster of %d", n.Solo(), size)
			}
			if res[1].DeliverAtMs != 0 {
				t.Errorf("a due time in the past was answered as %d, want it clamped to 0", res[1].DeliverAtMs)
			}

			// A read waits for the apply, then finds every message as answered.
			got := make(chan error, 1)
			go func() {
				for i, r := range res {
					v, err := n.Get(ctx, r.ID)
					if err != nil {
						got <- fmt.Errorf("message %d (%s): %w", i, r.ID, err)
						return
					}
					if v.DeliverAtMs != r.DeliverAtMs || string(v.Body) != string(msgs[i].Body) {
						got <- fmt.Errorf("message %d: read due %d body %q, answered due %d body %q",
							i, v.DeliverAtMs, v.Body, r.DeliverAtMs, msgs[i].Body)
						return
					}
				}
				got <- nil
			}()
			counted := make(chan error, 1)
			go func() {
				ts, err := n.Topics(ctx)
				if err != nil {
					counted <- err
					return
				}
				for _, tc := range ts {
					if tc.Topic == "t" && tc.Delayed+tc.Ready == int64(len(msgs)) {
						counted <- nil
						return
					}
				}
				counted <- fmt.Errorf("topic counts %+v, want %d pending on t", ts, len(msgs))
			}()
			select {
			case err := <-got:
				t.Fatalf("a read returned before the apply: %v", err)
			case err := <-counted:
				t.Fatalf("the topic counts returned before the apply: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
			release()
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			if err := <-counted; err != nil {
				t.Fatal(err)
			}

			// With a key, the answer depends on the state: it waits for the apply.
			keyed := []command.NewMessage{{Topic: "t", Key: "k", Body: []byte("d"), DeliverAtMs: now + 60_000}}
			first, err := n.Enqueue(ctx, keyed)
			if err != nil {
				t.Fatal(err)
			}
			again, err := n.Enqueue(ctx, keyed)
			if err != nil {
				t.Fatal(err)
			}
			if !again[0].Duplicate || again[0].ID != first[0].ID {
				t.Fatalf("second enqueue with the key answered %+v, want a duplicate of %s", again[0], first[0].ID)
			}
			if got := answeredAtCommit(t, n); got != 1 {
				t.Fatalf("%d enqueues answered at commit, want only the one without keys", got)
			}
		})
	}
}

// wheel.Scheduled predicts what the apply answers for keyless messages, and
// a node answers at commit with it, in group 0 and in another group.
func TestScheduledMatchesApply(t *testing.T) {
	for _, group := range []int{0, 3} {
		t.Run(fmt.Sprintf("group=%d", group), func(t *testing.T) {
			c := repltest.NewCluster(t, 1, func(cfg *Config) { cfg.Store.Group = group })
			n := c.Leader().Node
			now := time.Now().UnixMilli()
			msgs := []command.NewMessage{
				{Topic: "t", Body: []byte("a"), DeliverAtMs: now + 1000},
				{Topic: "t", Body: []byte("b"), DeliverAtMs: -1},
				{Topic: "u", Body: []byte("c"), DeliverAtMs: wheel.MaxDueMs + 1},
				{Topic: "t", Body: []byte("d"), DeliverAtMs: now + 10*3600_000},
			}
			res, err := n.SubmitWait(context.Background(), command.Schedule{NowMs: now, Messages: msgs})
			if err != nil {
				t.Fatal(err)
			}
			applied := res[0].Value.([]wheel.Enqueued)
			predicted := wheel.Scheduled(group, applied[0].ID.Index, msgs)
			for i := range msgs {
				if applied[i] != predicted[i] {
					t.Errorf("message %d: applied %+v, predicted %+v", i, applied[i], predicted[i])
				}
				if applied[i].ID.Group() != group {
					t.Errorf("message %d: id %s names group %d", i, applied[i].ID, applied[i].ID.Group())
				}
			}
			// Answered at commit, the ids name the group too, and read back.
			enq, err := n.Enqueue(context.Background(), msgs[:1])
			if err != nil {
				t.Fatal(err)
			}
			if enq[0].ID.Group() != group {
				t.Fatalf("enqueue answered %s, of group %d", enq[0].ID, enq[0].ID.Group())
			}
			if v, err := n.Get(context.Background(), enq[0].ID); err != nil || string(v.Body) != "a" {
				t.Fatalf("get %s: %+v, %v", enq[0].ID, v, err)
			}
		})
	}
}

// refresh takes Raft's configuration unless the log store recorded one
// meanwhile.
func TestSoloVoterRefresh(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	n := c.Leader().Node
	s := NewSoloVoter(n.Cfg().ID)
	s.Refresh(context.Background(), n.Raft())
	if !s.Solo() {
		t.Fatal("a single-node cluster's node is not the only voter after refresh")
	}
	other := NewSoloVoter("n9")
	other.Refresh(context.Background(), n.Raft())
	if other.Solo() {
		t.Fatal("a node outside the configuration is the only voter after refresh")
	}
	// A configuration stored later wins until refresh reads Raft's again.
	s.Stored(ConfigLog(0, "n1", "n2"))
	if s.Solo() {
		t.Fatal("the only voter after storing a configuration of two")
	}
	s.Refresh(context.Background(), n.Raft())
	if !s.Solo() {
		t.Fatal("refresh with nothing stored meanwhile did not take Raft's configuration")
	}
}

// heldNode starts a one-node cluster on a fake clock whose state machine
// a test can hold (applyHold.after).
func heldNode(t *testing.T) (*Node, *wheeltest.FakeClock, *applyHold) {
	t.Helper()
	hold := &applyHold{}
	clock := wheeltest.NewFakeClock(time.Now())
	c := repltest.NewCluster(t, 1, func(cfg *Config) {
		cfg.Clock = clock
		SetBeforeApply(cfg, hold.wait)
	})
	return c.Leader().Node, clock, hold
}

// A reserve answered before its Lease is applied (one node holds the
// leadership lease) is followed by reads on that node that see the lease:
// while the Lease waits in the state machine, a read of the message waits
// for it rather than answering the state before the hand-off.
func TestReadOwnLease(t *testing.T) {
	n, clock, hold := heldNode(t)
	ctx := context.Background()
	res, err := n.Enqueue(ctx, []command.NewMessage{{Topic: "t", Body: []byte("a"), DeliverAtMs: clock.Now().UnixMilli() - 5, MaxAttempts: 3}})
	if err != nil {
		t.Fatal(err)
	}
	id := res[0].ID
	if _, err := n.Get(ctx, id); err != nil {
		t.Fatal(err)
	}
	// Hold the state machine: the Lease the reserve proposes is not applied.
	release := hold.after(n.Raft().LastIndex())
	defer release()
	ds, err := n.Reserve(ctx, "t", 1, 10*time.Second, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != id {
		t.Fatalf("reserve = %+v, %v; want message %s", ds, err, id)
	}
	if applied := n.Store().AppliedIndex(); applied > hold.from.Load() {
		t.Fatalf("the Lease was applied (index %d) before the reserve was answered: the test holds nothing", applied)
	}
	// While the Lease is held, a read must not answer the state before it.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	v, err := n.Get(short, id)
	cancel()
	if err == nil {
		t.Fatalf("Get while the lease is unapplied = %+v; want a wait for the lease, not the state before it", v)
	}
	if !errors.Is(err, model.ErrUnavailable) {
		t.Fatalf("Get while the lease is unapplied: %v; want ErrUnavailable", err)
	}
	release()
	v, err = n.Get(ctx, id)
	if err != nil || v.State != wheel.StateReserved || v.Attempts != 1 {
		t.Fatalf("Get after the reserve = %+v, %v; want reserved, attempt 1", v, err)
	}
}

// An ack frees its stream's window once it is in the log's order: while
// the state machine holds the ack's entry, the stream hands out the next
// message, and the ack is answered only after its apply.
func TestAckFreesStreamWindowBeforeItsApply(t *testing.T) {
	n, clock, hold := heldNode(t)
	ctx := t.Context()
	due := clock.Now().UnixMilli() - 5
	res, err := n.Enqueue(ctx, []command.NewMessage{
		{Topic: "t", Body: []byte("a"), DeliverAtMs: due, MaxAttempts: 3},
		{Topic: "t", Body: []byte("b"), DeliverAtMs: due, MaxAttempts: 3},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Get(ctx, res[1].ID); err != nil {
		t.Fatal(err)
	}
	st, err := n.Stream(ctx, "t", model.ConsumerOptions{MaxInflight: 1, TTR: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	first, err := st.Next(ctx)
	if err != nil || len(first) != 1 {
		t.Fatalf("first delivery = %+v, %v", first, err)
	}
	// Hold the state machine: the ack's entry commits but is not applied.
	release := hold.after(n.Raft().LastIndex())
	defer release()
	acked := make(chan error, 1)
	go func() {
		_, err := n.Ack(context.WithoutCancel(ctx), []model.Receipt{first[0].Receipt})
		acked <- err
	}()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	second, err := st.Next(wctx)
	if err != nil || len(second) != 1 || second[0].ID == first[0].ID {
		t.Fatalf("second delivery = %+v, %v; want the other message while the ack waits for its apply", second, err)
	}
	if applied := n.Store().AppliedIndex(); applied > hold.from.Load() {
		t.Fatalf("the ack was applied (index %d) before the window freed: the test holds nothing", applied)
	}
	select {
	case err := <-acked:
		t.Fatalf("the ack was answered (%v) before its apply", err)
	default:
	}
	release()
	if err := <-acked; err != nil {
		t.Fatalf("ack: %v", err)
	}
	if _, err := n.Get(ctx, first[0].ID); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("the acked message after the apply: %v; want not found", err)
	}
}

package transport_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

// behind is a node that reports its applied index short by lag, as a
// follower with entries in flight to its state machine does, and that is
// not ready while notReady holds an error.
type behind struct {
	transport.Backend
	lag      *atomic.Uint64
	notReady *atomic.Pointer[error]
}

func (b behind) Indexes() (applied, commit uint64) {
	applied, commit = b.Backend.Indexes()
	return applied - min(applied, b.lag.Load()), commit
}

func (b behind) Ready() error {
	if err := b.notReady.Load(); err != nil {
		return *err
	}
	return b.Backend.Ready()
}

// A follower's readiness is the node's own (it knows a leader and has
// caught up): an entry in flight to its state machine does not make it
// 503, nor does a leader whose HTTP API does not answer; when the node
// says it is not ready, readyz says why.
func TestReadyzIsTheNodesOwn(t *testing.T) {
	type knobs struct {
		lag      *atomic.Uint64
		notReady *atomic.Pointer[error]
	}
	nodes := map[transport.Backend]knobs{}
	o := transporttest.Options{Backend: func(b transport.Backend) transport.Backend {
		k := knobs{new(atomic.Uint64), new(atomic.Pointer[error])}
		nodes[b] = k
		return behind{b, k.lag, k.notReady}
	}}
	c := startCluster(t, 3, o)
	ctx := t.Context()
	leader, f := c.Leader(), c.Follower()
	_, err := leader.Client.Enqueue(ctx, []api.Message{{Topic: "t", Payload: api.TextBody("x")}})
	check(t, "enqueue", err)
	wantReady(t, f, "the follower")

	nodes[f.Node].lag.Store(1)
	wantReady(t, f, "the follower with an entry in flight")
	wantReady(t, leader, "the leader")
	nodes[f.Node].lag.Store(0)

	leader.CloseHTTP()
	wantReady(t, f, "the follower with the leader's HTTP API down")

	why := errors.New("catching up: applied 3 of the leader's commit index 9")
	nodes[f.Node].notReady.Store(&why)
	wantUnavailable(t, f.Client.Readyz(ctx), "not ready: ", why.Error())
}

// wantReady waits until n answers readyz with 200. An election, which a
// loaded machine can bring on, makes a node unready for a moment; what the
// test sets up to keep the node unready keeps it so, and fails the test
// with the last answer.
func wantReady(t *testing.T, n *transporttest.Node, what string) {
	t.Helper()
	deadline := time.Now().Add(nettest.Patience)
	for {
		err := n.Client.Readyz(t.Context())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: readyz answers %v after %v", what, err, nettest.Patience)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantUnavailable fails unless err is a 503 whose message holds every part.
func wantUnavailable(t *testing.T, err error, parts ...string) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 503 {
		t.Fatalf("readyz: %v, want a 503", err)
	}
	for _, p := range parts {
		if !strings.Contains(ce.Message, p) {
			t.Fatalf("readyz: %q, want it to say %q", ce.Message, p)
		}
	}
}

// A follower restarted behind a backlog is not ready before it has
// applied the commit index the cluster had reached when it restarted, and
// what it says ready on holds the backlog, whether it catches up from the
// log or from a snapshot.
func TestReadyzAfterRestartWithBacklog(t *testing.T) {
	t.Run("log", func(t *testing.T) { testReadyzAfterRestart(t, nil) })
	t.Run("snapshot", func(t *testing.T) {
		testReadyzAfterRestart(t, func(c *replication.Config) {
			c.SnapshotThreshold, c.SnapshotInterval, c.TrailingLogs = 8, 200*time.Millisecond, 2
		})
	})
}

func testReadyzAfterRestart(t *testing.T, edit func(*replication.Config)) {
	c := startCluster(t, 3, transporttest.Options{Replication: edit})
	ctx := t.Context()
	i := c.FollowerIndex()
	f := c.Nodes[i]
	c.Stop(i)
	// Keys make a retried batch a duplicate: the two nodes left may
	// change leader while they take the backlog.
	const batches, per = 10, 1000
	for b := range batches {
		msgs := make([]api.Message, per)
		for j := range msgs {
			msgs[j] = api.Message{Topic: "backlog", Key: fmt.Sprintf("%d-%d", b, j), Payload: api.TextBody("x")}
		}
		f.Eventually(t, "a batch to be enqueued", func() bool {
			_, err := c.Leader().Client.Enqueue(ctx, msgs)
			var ce *client.Error
			if err != nil && (!errors.As(err, &ce) || ce.Status != 503) {
				t.Fatalf("enqueue: %v", err)
			}
			return err == nil
		})
	}
	if edit != nil {
		leader := c.Leader()
		leader.Eventually(t, "the leader to snapshot past the stopped follower", func() bool {
			return leader.Node.Raft().Stats()["last_snapshot_index"] != "0"
		})
	}
	// The backlog ends at the highest commit index of the nodes left (no
	// node's passes the leader's). Once both know it, any leader the
	// follower hears from after its restart has committed it too. An
	// entry committed later (a new leader's first entry, after an
	// election a loaded machine brings on) is not backlog: a node that
	// has caught up is ready while it trails the leader by at most
	// ReadyMaxLag entries.
	var backlog uint64
	for _, n := range c.Nodes {
		if n != f {
			_, ci := n.Node.Indexes()
			backlog = max(backlog, ci)
		}
	}
	f.Eventually(t, fmt.Sprintf("both running nodes to know the commit index %d", backlog), func() bool {
		for _, n := range c.Nodes {
			if n == f {
				continue
			}
			if _, ci := n.Node.Indexes(); ci < backlog {
				return false
			}
		}
		return true
	})
	c.Restart(i)
	notReady := 0
	f.Eventually(t, "the restarted follower to be ready", func() bool {
		err := f.Client.Readyz(ctx)
		if err != nil {
			if notReady++; notReady == 1 {
				t.Logf("first answer: %v", err)
			}
			return false
		}
		t.Logf("ready after %d answers of not ready", notReady)
		if applied, _ := f.Node.Indexes(); applied < backlog {
			t.Fatalf("ready at applied index %d, below the backlog's commit index %d", applied, backlog)
		}
		for _, tc := range f.Node.Store().Topics() {
			if tc.Topic == "backlog" && tc.Delayed+tc.Ready == batches*per {
				return true
			}
		}
		t.Fatalf("ready without the backlog: %+v", f.Node.Store().Topics())
		return false
	})
}

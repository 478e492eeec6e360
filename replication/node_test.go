package replication_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	. "github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// msg is a message due after delay, with the HTTP API's default lease
// time and attempts.
func msg(topic, body string, delay time.Duration) command.NewMessage {
	return command.NewMessage{Topic: topic, Body: []byte(body), DeliverAtMs: time.Now().Add(delay).UnixMilli(),
		TTRMs: 30_000, MaxAttempts: 10}
}

func enqueue(t testing.TB, n *Node, msgs ...command.NewMessage) []wheel.Enqueued {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := n.Enqueue(ctx, msgs)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	return res
}

func reserve(t *testing.T, n *Node, topic string, max int, wait time.Duration) []model.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait+10*time.Second)
	defer cancel()
	d, err := n.Reserve(ctx, topic, max, wait, 0)
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	return d
}

func TestSingleNodeLifecycle(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	n := c.Leader().Node
	m := msg("orders", "hello", 300*time.Millisecond)
	m.Key = "k1"
	res := enqueue(t, n, m)
	m = msg("orders", "hello", 0)
	m.Key = "k1"
	dup := enqueue(t, n, m)
	if !dup[0].Duplicate || dup[0].ID != res[0].ID {
		t.Fatalf("dedupe by key: %+v vs %+v", dup, res)
	}
	got := reserve(t, n, "orders", 10, 10*time.Second)
	if len(got) != 1 || got[0].Message.ID != res[0].ID || got[0].Attempt != 1 {
		t.Fatalf("reserve: %+v", got)
	}
	recv := time.Now().UnixMilli()
	if recv < got[0].Message.DeliverAtMs {
		t.Fatalf("delivered %d ms early", got[0].Message.DeliverAtMs-recv)
	}
	ack, err := n.Ack(context.Background(), []model.Receipt{got[0].Receipt})
	if err != nil || ack.Done != 1 {
		t.Fatalf("ack: %+v %v", ack, err)
	}
	if _, err := n.Get(context.Background(), res[0].ID); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("get after ack: %v", err)
	}
}

// A follower knows where the leader serves and refuses what only the
// leader can do; a message due after the leader dies is delivered by the
// new leader.
func TestThreeNodesFailover(t *testing.T) {
	c := repltest.NewCluster(t, 3, nil)
	leader := c.Leader()
	f := c.Follower()
	nettest.WaitFor(t, nettest.Patience, "the follower to know the leader's HTTP address", func() bool {
		addr, isLeader, known := f.Node.LeaderHTTP()
		return known && !isLeader && addr == leader.Cfg.HTTPAddr
	})
	if _, err := f.Node.Enqueue(context.Background(), []command.NewMessage{msg("t", "x", 0)}); !errors.Is(err, model.ErrNotLeader) {
		t.Fatalf("enqueue on a follower: %v, want ErrNotLeader", err)
	}
	if _, err := f.Node.Reserve(context.Background(), "t", 1, 0, 0); !errors.Is(err, model.ErrNotLeader) {
		t.Fatalf("reserve on a follower: %v, want ErrNotLeader", err)
	}
	res := enqueue(t, leader.Node, msg("t", "x", 200*time.Millisecond))
	got := reserve(t, leader.Node, "t", 1, 10*time.Second)
	if len(got) != 1 || got[0].Message.ID != res[0].ID {
		t.Fatalf("reserve: %+v", got)
	}
	if _, err := leader.Node.Ack(context.Background(), []model.Receipt{got[0].Receipt}); err != nil {
		t.Fatal(err)
	}

	res = enqueue(t, leader.Node, msg("t", "x", 1500*time.Millisecond))
	for i, tn := range c.Nodes {
		if tn == leader {
			c.Stop(i)
		}
	}
	nl := c.Leader()
	if nl == leader {
		t.Fatal("old leader still leads")
	}
	got = reserve(t, nl.Node, "t", 1, 15*time.Second)
	if len(got) != 1 || got[0].Message.ID != res[0].ID {
		t.Fatalf("after failover: %+v", got)
	}
	if now := time.Now().UnixMilli(); now < got[0].Message.DeliverAtMs {
		t.Fatalf("early by %d ms", got[0].Message.DeliverAtMs-now)
	}
}

func TestRestartKeepsState(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	res := enqueue(t, c.Leader().Node, msg("a", "later", 3*time.Hour))
	c.Stop(0)
	c.Start(0)
	n := c.Leader().Node
	v, err := n.Get(context.Background(), res[0].ID)
	if err != nil || v.State != wheel.StateDelayed {
		t.Fatalf("after restart: %+v %v", v, err)
	}
	if _, err = n.Get(context.Background(), model.ID{Index: 1 << 40}); !errors.Is(err, model.ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
}

// Replication to followers is not pipelined: hashicorp/raft's pipeline can
// deadlock after a follower answers Success=false (see Open).
func TestReplicationNotPipelined(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	n := c.Leader().Node
	_, err := n.Trans().AppendEntriesPipeline("n2", raft.ServerAddress(nettest.FreeAddr(t)))
	if !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("AppendEntriesPipeline: %v, want raft.ErrPipelineReplicationNotSupported", err)
	}
}

// Raft sees the log as monotonic through the node's wrappers, so that a
// follower installing a snapshot empties its log; otherwise it keeps a
// prefix, the log refuses the entries after the snapshot, and the
// follower never catches up.
func TestLogIsMonotonicToRaft(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	n := c.Leader().Node
	cache, err := raft.NewLogCache(1, n.Ents())
	if err != nil {
		t.Fatal(err)
	}
	if !cache.IsMonotonic() {
		t.Fatal("the log store Raft gets does not say it is monotonic")
	}
}

// A second node opened on a data dir in use fails at once, naming the dir
// and the process holding it; once the first closes, the dir opens again.
func TestDataDirLockedFailsFast(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	tn := c.Nodes[0]
	cfg := tn.Cfg
	addrs := nettest.FreeAddrs(t, 2)
	cfg.RaftAddr, cfg.HTTPAddr = addrs[0], addrs[1]
	_, err := Open(cfg)
	if !errors.Is(err, ErrDataDirLocked) {
		t.Fatalf("second Open on %s: %v; want ErrDataDirLocked", cfg.DataDir, err)
	}
	if msg := err.Error(); !strings.Contains(msg, cfg.DataDir) || !strings.Contains(msg, fmt.Sprintf("process %d", os.Getpid())) {
		t.Fatalf("error %q does not name the data dir and the holding process", msg)
	}
	c.Stop(0)
	n, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open after the holder closed: %v", err)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A store whose slot file lost bytes it had recorded (a torn write on a
// disk that lied about its fsync) and no snapshot to restore is rebuilt by
// replaying the log from its first entry: nothing is lost.
func TestDamagedStoreWithoutSnapshotReplaysTheLog(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	n := c.Leader().Node
	ctx := context.Background()
	due := n.Clock().Now().Add(time.Hour).UnixMilli()
	var ids []model.ID
	for i := 0; i < 5; i++ {
		res, err := n.Enqueue(ctx, []command.NewMessage{{Topic: "t", Body: []byte(fmt.Sprintf("m%d", i)), DeliverAtMs: due}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res[0].ID)
	}
	if _, err := n.Get(ctx, ids[4]); err != nil {
		t.Fatal(err)
	}
	dir := c.Nodes[0].Cfg.DataDir
	c.Stop(0)
	segs, err := filepath.Glob(filepath.Join(dir, "fsm", "segments", "*.seg"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("slot files %v, %v; want one", segs, err)
	}
	fi, err := os.Stat(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(segs[0], fi.Size()-3); err != nil {
		t.Fatal(err)
	}
	c.Start(0)
	n = c.Nodes[0].Node
	nettest.WaitFor(t, nettest.Patience, "the rebuilt node to lead", func() bool { return n.Ready() == nil })
	for i, id := range ids {
		v, err := n.Get(ctx, id)
		if err != nil || string(v.Body) != fmt.Sprintf("m%d", i) || v.State != wheel.StateDelayed {
			t.Fatalf("message %d after the rebuild: %+v, %v", i, v, err)
		}
	}
	aside, _ := filepath.Glob(filepath.Join(dir, "fsm.damaged-*"))
	if len(aside) != 1 {
		t.Fatalf("damaged store kept aside: %v; want one", aside)
	}
}

// A batch whose new topics would take the store past MaxTopics is refused
// whole, naming the first message over the limit, though the store was
// under the limit when it came.
func TestMaxTopicsCountsTheBatch(t *testing.T) {
	c := repltest.NewCluster(t, 1, func(cfg *Config) { cfg.MaxTopics = 2 })
	n := c.Leader().Node
	first := msg("a", "x", time.Minute)
	first.Key = "k" // answered once applied, so the store counts its topic
	enqueue(t, n, first)
	_, err := n.Enqueue(t.Context(), []command.NewMessage{msg("a", "y", time.Minute), msg("b", "y", time.Minute), msg("b", "z", time.Minute), msg("c", "y", time.Minute)})
	if !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), `messages[3].topic: "c" would be topic number 3; the limit is 2 topics`) {
		t.Fatalf("enqueue of two new topics at one of two: %v", err)
	}
	if got := n.Store().NumTopics(); got != 1 {
		t.Fatalf("%d topics after the refused batch, want 1", got)
	}
	enqueue(t, n, msg("b", "y", time.Minute)) // one new topic still fits
}

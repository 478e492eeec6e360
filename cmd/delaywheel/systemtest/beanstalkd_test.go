package systemtest

import (
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/beanstalkd/go-beanstalk"

	"github.com/delaywheel/delaywheel/replication/nettest"
)

// TestBeanstalkdLeaderKill drives go-beanstalk through a follower's
// beanstalkd port while the leader is killed (-9): the connection
// outlives the change of leader, and every job answered INSERTED, before
// or after the kill, is reserved, none before its delay.
func TestBeanstalkdLeaderKill(t *testing.T) {
	t.Parallel()
	c := NewCluster(t, binary(t), Options{Nodes: 3})
	ctx := ctxFor(t, 3*time.Minute)
	bsAddr := map[string]string{}
	for _, n := range c.Servers() {
		ports, err := nettest.FreePorts(n.IP, 1)
		if err != nil {
			t.Fatal(err)
		}
		bsAddr[n.ID] = net.JoinHostPort(n.IP, strconv.Itoa(ports[0]))
		n.SetFlags(append(append([]string{}, DefaultFlags...), "--beanstalkd-addr", bsAddr[n.ID])...)
		if err := n.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	follower := c.Others(leader)[0]
	conn, err := beanstalk.DialTimeout("tcp", bsAddr[follower.ID], 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	topic := uniqueTopic(t, "bs")
	tube, ts := beanstalk.NewTube(conn, topic), beanstalk.NewTubeSet(conn, topic)
	const delay = 2 * time.Second
	due := map[uint64]time.Time{}
	put := func(n int) {
		for range n {
			sent := time.Now()
			id, err := tube.Put([]byte("job"), 1024, delay, 30*time.Second)
			if err != nil {
				t.Logf("put during the change of leader: %v", err) // not answered INSERTED: not counted
				continue
			}
			due[id] = sent.Add(delay)
		}
	}
	put(50)
	leader.Kill()
	put(50)
	if len(due) < 50 {
		t.Fatalf("only %d of 100 puts answered INSERTED", len(due))
	}
	got := map[uint64]bool{}
	for len(got) < len(due) && ctx.Err() == nil {
		id, _, err := ts.Reserve(5 * time.Second)
		if errors.Is(err, beanstalk.ErrTimeout) || errors.Is(err, beanstalk.ErrInternal) {
			continue
		}
		if err != nil {
			t.Fatalf("reserve after %d of %d: %v", len(got), len(due), err)
		}
		at, ok := due[id]
		if ok && time.Now().Before(at) {
			t.Errorf("job %d reserved %v before its due time", id, time.Until(at))
		}
		got[id] = ok || got[id]
		if err := conn.Delete(id); err != nil {
			t.Logf("delete %d: %v", id, err)
		}
	}
	lost := 0
	for id := range due {
		if !got[id] {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d jobs answered INSERTED were never reserved", lost, len(due))
	}
}

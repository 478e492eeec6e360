package replication_test

import (
	"context"
	"testing"
	"time"

	. "github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel/wheeltest"
)

// fakeClockCluster starts n nodes on a fake clock that reads a little past
// the start of the current second.
func fakeClockCluster(t *testing.T, n int) (*repltest.Cluster, *wheeltest.FakeClock) {
	t.Helper()
	clk := wheeltest.NewFakeClock(time.Now().Truncate(time.Second).Add(100 * time.Millisecond))
	return repltest.NewCluster(t, n, func(cfg *Config) { cfg.Clock = clk }), clk
}

// The only voter holds the leadership lease without confirmations; with
// other voters, it takes a quorum's, and holds it for half a heartbeat
// timeout after.
func TestLeaseHeldBySoleVoterOnly(t *testing.T) {
	c, _ := fakeClockCluster(t, 1)
	l := NewLeadershipLease(c.Leader().Node) // never started: nothing confirms
	if !l.Held() {
		t.Fatal("the only voter does not hold the lease")
	}
	l.Revoke()
	if l.Held() {
		t.Fatal("a revoked lease is held")
	}

	c3, clk := fakeClockCluster(t, 3)
	n := c3.Leader().Node
	l = NewLeadershipLease(n)
	if l.Held() {
		t.Fatal("a leader of three holds the lease without any confirmation")
	}
	l.Confirmed(clk.Now())
	if !l.Held() {
		t.Fatal("a leader of three does not hold the lease just after a confirmation")
	}
	clk.Advance(n.Cfg().HeartbeatTimeout / 2)
	if l.Held() {
		t.Fatal("the lease is held half a heartbeat timeout after the last confirmation")
	}
}

// A leadership transfer that fails gives the leader a fresh lease, and
// the revoked one's confirmation loop ends: it does not go on sending
// rounds of heartbeats until the node closes.
func TestFailedTransferEndsTheRevokedLease(t *testing.T) {
	c := repltest.NewCluster(t, 3, nil)
	n := c.Leader().Node
	old := n.CurrentLease()
	// No voter of that id: Raft refuses the transfer at once.
	if err := n.TransferLeadership(context.Background(), "nobody", "127.0.0.1:1"); err == nil {
		t.Fatal("a transfer to no voter succeeded")
	}
	if n.CurrentLease().Same(old) {
		t.Skip("leadership changed meanwhile: no fresh lease to compare")
	}
	select {
	case <-old.Ended():
	case <-time.After(nettest.Patience):
		t.Fatal("the revoked lease's confirmation loop still runs after the failed transfer")
	}
}

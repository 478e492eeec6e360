package replication_test

import (
	"testing"
	"time"

	. "github.com/delaywheel/delaywheel/replication"
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

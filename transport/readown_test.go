package transport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

// TestFollowerReadsWhatItForwarded: a client that reserves or enqueues
// through a follower reads the result on that follower at once. The leader
// answers a forwarded write with the index it had applied (the lease or the
// enqueue included), and the follower's reads wait until it has applied it.
//
// Each round goes through a follower of one leader. A node kept from
// running on a loaded machine can miss the leader's heartbeats and start
// an election; a round during which any node changed its Raft state or
// the leader it knows was not served by one follower of one leader, and
// is run again (on a topic of its own, so nothing it left behind is taken
// by the next). Every round under one leader must pass.
func TestFollowerReadsWhatItForwarded(t *testing.T) {
	c := startCluster(t, 3, transporttest.Options{})
	ctx := t.Context()
	changes := watchLeadership(t, c)
	const rounds = 20
	deadline := time.Now().Add(2 * time.Minute)
	for done, try := 0, 0; done < rounds; try++ {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d rounds ran under one leader in %d tries: elections all along", done, rounds, try)
		}
		c.Leader() // waits for one, ready
		before := changes.Load()
		err := readOwnRound(ctx, c.Follower(), fmt.Sprintf("own-%d", try))
		if changes.Load() != before {
			t.Logf("try %d: a node's Raft state or leader changed during the round; run again (%v)", try, err)
			continue
		}
		if err != nil {
			t.Fatalf("round %d (try %d): %v", done, try, err)
		}
		done++
	}
}

// watchLeadership counts, on every node of c, the changes of Raft state
// (follower, candidate, leader) and of the leader the node knows.
func watchLeadership(t *testing.T, c *transporttest.Cluster) *atomic.Uint64 {
	var n atomic.Uint64
	for _, kn := range c.Nodes {
		r := kn.Node.Raft()
		o := raft.NewObserver(nil, false, func(o *raft.Observation) bool {
			switch o.Data.(type) {
			case raft.RaftState, raft.LeaderObservation:
				n.Add(1)
			}
			return false
		})
		r.RegisterObserver(o)
		t.Cleanup(func() { r.DeregisterObserver(o) })
	}
	return &n
}

// readOwnRound enqueues a message to topic through follower and reads it
// there, reserves it there and reads its lease, acks it there and finds
// it gone.
func readOwnRound(ctx context.Context, follower *transporttest.Node, topic string) error {
	res, err := follower.Client.Enqueue(ctx, texts(1, topic))
	if err != nil {
		return fmt.Errorf("enqueue through the follower %s: %w", follower.ID, err)
	}
	id := res[0].ID
	v, err := follower.Client.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("get after the enqueue: %w", err)
	}
	if v.State != api.StateReady {
		return fmt.Errorf("state after the enqueue: %s, want %s", v.State, api.StateReady)
	}

	body, _ := json.Marshal(api.ReserveRequest{Max: api.Ptr(1), WaitMs: 5000})
	resp, err := http.Post(follower.URL+"/v1/topics/"+topic+"/reserve", "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("reserve through the follower: %w", err)
	}
	var rr api.ReserveResponse
	err = json.NewDecoder(resp.Body).Decode(&rr)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("decode the reserve: %w", err)
	}
	if resp.StatusCode != http.StatusOK || len(rr.Messages) != 1 || rr.Messages[0].ID != id {
		return fmt.Errorf("reserve = %d %+v; want message %s", resp.StatusCode, rr, id)
	}
	index, err := strconv.ParseUint(resp.Header.Get(transport.AppliedIndexHeader), 10, 64)
	if err != nil || index == 0 {
		return fmt.Errorf("the forwarded reserve's answer has %s %q; want the leader's applied index",
			transport.AppliedIndexHeader, resp.Header.Get(transport.AppliedIndexHeader))
	}
	v, err = follower.Client.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("get after the reserve: %w", err)
	}
	if v.State != api.StateReserved || v.Attempts != 1 {
		return fmt.Errorf("on the follower after its reserve: state %s, attempts %d; want reserved, 1", v.State, v.Attempts)
	}
	if _, err := follower.Client.Ack(ctx, []string{rr.Messages[0].Receipt}); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	if _, err := follower.Client.Get(ctx, id); err == nil {
		return fmt.Errorf("message %s still readable on the follower after its ack", id)
	}
	return nil
}

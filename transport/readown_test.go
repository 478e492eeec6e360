package transport_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

// TestFollowerReadsWhatItForwarded: a client that reserves or enqueues
// through a follower reads the result on that follower at once. The leader
// answers a forwarded write with the index it had applied (the lease or the
// enqueue included), and the follower's reads wait until it has applied it.
func TestFollowerReadsWhatItForwarded(t *testing.T) {
	c := startCluster(t, 3, transporttest.Options{})
	ctx := t.Context()
	follower := c.Follower()
	for i := range 20 {
		res, err := follower.Client.Enqueue(ctx, texts(1, "own"))
		check(t, "enqueue through the follower", err)
		id := res[0].ID
		v, err := follower.Client.Get(ctx, id)
		check(t, "get after the enqueue", err)
		equal(t, "state after the enqueue", v.State, api.StateReady)

		body, _ := json.Marshal(api.ReserveRequest{Max: api.Ptr(1), WaitMs: 5000})
		resp, err := http.Post(follower.URL+"/v1/topics/own/reserve", "application/json", bytes.NewReader(body))
		check(t, "reserve through the follower", err)
		var rr api.ReserveResponse
		err = json.NewDecoder(resp.Body).Decode(&rr)
		resp.Body.Close()
		check(t, "decode the reserve", err)
		if resp.StatusCode != http.StatusOK || len(rr.Messages) != 1 || rr.Messages[0].ID != id {
			t.Fatalf("round %d: reserve = %d %+v; want message %s", i, resp.StatusCode, rr, id)
		}
		index, err := strconv.ParseUint(resp.Header.Get(transport.AppliedIndexHeader), 10, 64)
		if err != nil || index == 0 {
			t.Fatalf("round %d: the forwarded reserve's answer has %s %q; want the leader's applied index",
				i, transport.AppliedIndexHeader, resp.Header.Get(transport.AppliedIndexHeader))
		}
		v, err = follower.Client.Get(ctx, id)
		check(t, "get after the reserve", err)
		if v.State != api.StateReserved || v.Attempts != 1 {
			t.Fatalf("round %d: on the follower after its reserve: state %s, attempts %d; want reserved, 1", i, v.State, v.Attempts)
		}
		_, err = follower.Client.Ack(ctx, []string{rr.Messages[0].Receipt})
		check(t, "ack", err)
		if _, err := follower.Client.Get(ctx, id); err == nil {
			t.Fatalf("round %d: message %s still readable on the follower after its ack", i, id)
		}
	}
}

package transport_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/delaywheel/delaywheel/transport/api"
)

// POST /v1/messages/{id}/reserve leases a ready, a delayed or a dead
// message now, for its own ttr or the body's; the delivery is settled by
// its receipt; a reserved, acked or unknown message is 404, a ttr_ms over the limit 400.
func TestReserveByID(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	res := e.mustEnqueue(
		api.Message{Topic: "t", Payload: api.TextBody("now")},
		api.Message{Topic: "t", Payload: api.TextBody("in an hour"), DelayMs: api.Ptr(int64(3_600_000))},
	)
	reserve := func(id, body string, status int) api.Delivery {
		t.Helper()
		a := e.do(http.MethodPost, "/v1/messages/"+id+"/reserve", body)
		if a.status != status {
			t.Fatalf("reserve %s: %d %s, want %d", id, a.status, a.body, status)
		}
		if status != http.StatusOK {
			return api.Delivery{}
		}
		var out api.ReserveResponse
		if err := json.Unmarshal(a.body, &out); err != nil || len(out.Messages) != 1 {
			t.Fatalf("reserve %s: %s %v", id, a.body, err)
		}
		return out.Messages[0]
	}
	d := reserve(res[1].ID, `{"ttr_ms":5000}`, http.StatusOK)
	equal(t, "delayed one", d.ID, res[1].ID)
	equal(t, "its body", *d.Body, "in an hour")
	equal(t, "attempt", d.Attempt, int32(1))
	equal(t, "lease", d.LeaseExpiresMs, startMs+5000)
	acked, err := e.c.Ack(ctx, []string{d.Receipt})
	check(t, "ack", err)
	equal(t, "acked", acked, api.AckResponse{Acked: 1})
	reserve(res[1].ID, "", http.StatusNotFound) // acked

	d = reserve(res[0].ID, "", http.StatusOK)
	equal(t, "default ttr lease", d.LeaseExpiresMs, startMs+30000)
	reserve(res[0].ID, "", http.StatusNotFound) // reserved
	if ds, err := e.c.Reserve(ctx, "t", api.ReserveRequest{Max: api.Ptr(10)}); err != nil || len(ds) != 0 {
		t.Fatalf("reserve of the topic: %+v %v; want nothing", ds, err)
	}
	// Dead: redriven and leased at once, its attempts counted afresh.
	buried, err := e.c.Bury(ctx, []string{d.Receipt})
	check(t, "bury", err)
	equal(t, "buried", buried.Buried, 1)
	d = reserve(res[0].ID, "", http.StatusOK)
	equal(t, "dead one", d.ID, res[0].ID)
	equal(t, "attempt afresh", d.Attempt, int32(1))
	reserve("000000000000000000000001", "", http.StatusNotFound)
	reserve(res[0].ID, `{"ttr_ms":86400001}`, http.StatusBadRequest) // over 24 h
}

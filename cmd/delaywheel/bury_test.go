package main

import (
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
)

// TestBury buries a reserved message over HTTP and over gRPC: it is dead
// at once (dead lists it), a second bury of its receipt is stale, and
// bury without receipts is a usage error.
func TestBury(t *testing.T) {
	n := newNode(t, "")
	g := &node{Node: n.Node, addr: "grpc://" + serveNodeGRPC(t, n, "")}
	for _, over := range []*node{n, g} {
		topic := "b" + strings.Split(over.addr, ":")[0]
		var ids []string
		for _, body := range []string{"a", "b"} {
			ids = append(ids, fields(over.mustRun(t, "push", topic, body, "--max-attempts", "5"))[1][0])
		}
		n.AdvanceUntil(t, 100*time.Millisecond, "the messages of "+topic+" to be ready", func() bool {
			v, err := n.Client.Get(t.Context(), ids[1])
			return err == nil && v.State == api.StateReady
		})
		var rr api.ReserveResponse
		decodeJSON(t, over.mustRun(t, "reserve", topic, "--max", "2", "--json"), &rr)
		if len(rr.Messages) != 2 {
			t.Fatalf("%s: reserve: %+v", over.addr, rr)
		}
		buried := rr.Messages[0]
		out := over.mustRun(t, "bury", buried.Receipt)
		hasRow(t, out, "buried:", "1")
		hasRow(t, out, "stale:", "0")
		if dead := fields(over.mustRun(t, "dead", topic)); len(dead) != 2 || dead[1][0] != buried.ID || dead[1][1] != "1" {
			t.Fatalf("%s: dead letters after the bury: %v; want %s alone, attempt 1", over.addr, dead, buried.ID)
		}
		if v, err := n.Client.Get(t.Context(), rr.Messages[1].ID); err != nil || v.State != api.StateReserved {
			t.Fatalf("%s: the message not buried: %+v (error %v); want reserved", over.addr, v, err)
		}
		var again api.BuryResponse
		decodeJSON(t, over.mustRun(t, "bury", buried.Receipt, "--json"), &again)
		if again != (api.BuryResponse{Stale: 1}) {
			t.Fatalf("%s: second bury: %+v", over.addr, again)
		}
		if _, err := run(t, "bury", "--addr", over.addr); err == nil || !strings.HasPrefix(err.Error(), "usage: delaywheel bury [flags] RECEIPT...") {
			t.Fatalf("%s: bury without receipts: %v", over.addr, err)
		}
	}
}

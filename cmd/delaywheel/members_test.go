package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication"
)

// remove-node removes a member from every group of a running cluster
// through any other member; the removed node then refuses to be ready.
// Removing it again names it as no member, and the command refuses a gRPC
// --addr, which does not serve membership.
func TestRemoveNode(t *testing.T) {
	const groups = 2
	httpAddrs, cls := startCluster(t, 3, groups)
	ctx := t.Context()
	out, err := run(t, "remove-node", "--addr", "http://"+httpAddrs[1], "n3")
	if err != nil || out != "removed n3\n" {
		t.Fatalf("remove-node n3: %q, %v; want \"removed n3\"", out, err)
	}
	v, err := cls[0].Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, n := range v.Nodes {
		ids = append(ids, n.ID)
	}
	if slices.Contains(ids, "n3") || len(v.Groups) != groups {
		t.Fatalf("members after the removal: %v, %d groups; want n3 gone and %d groups", ids, len(v.Groups), groups)
	}
	replication.WaitFor(t, 10*time.Second, "the removed n3 to be unready", func() bool { return cls[2].Readyz(ctx) != nil })

	_, err = run(t, "remove-node", "--addr", "http://"+httpAddrs[0], "n3")
	if err == nil || !strings.Contains(err.Error(), `node "n3" is not a member`) {
		t.Errorf("removing n3 again: %v; want it named as no member", err)
	}
	_, err = run(t, "remove-node", "--addr", "grpc://"+httpAddrs[0], "n2")
	if err == nil || !strings.Contains(err.Error(), "is served over HTTP only") {
		t.Errorf("remove-node over gRPC: %v; want it refused", err)
	}
}

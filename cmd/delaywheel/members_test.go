package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
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
	// Another node's view follows the removal once that node hears of it:
	// an election at the same moment can leave n1 answering its own view,
	// one entry behind, for a while.
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("n1's last view: %s", last)
		}
	}()
	nettest.WaitFor(t, nettest.Patience, "n1's view to drop n3", func() bool {
		v, err := cls[0].Cluster(ctx)
		if err != nil {
			last = err.Error()
			return false
		}
		var ids []string
		for _, n := range v.Nodes {
			ids = append(ids, n.ID)
		}
		last = fmt.Sprintf("members %v, %d groups; want n3 gone and %d groups", ids, len(v.Groups), groups)
		return !slices.Contains(ids, "n3") && len(v.Groups) == groups
	})
	nettest.WaitFor(t, nettest.Patience, "the removed n3 to be unready", func() bool { return cls[2].Readyz(ctx) != nil })

	_, err = run(t, "remove-node", "--addr", "http://"+httpAddrs[0], "n3")
	if err == nil || !strings.Contains(err.Error(), `node "n3" is not a member`) {
		t.Errorf("removing n3 again: %v; want it named as no member", err)
	}
	_, err = run(t, "remove-node", "--addr", "grpc://"+httpAddrs[0], "n2")
	if err == nil || !strings.Contains(err.Error(), "is served over HTTP only") {
		t.Errorf("remove-node over gRPC: %v; want it refused", err)
	}
}

// A member removed while it was down never receives its removal: restarted
// on its data dir with --join, it finds that the cluster does not list it
// and asks to be added back, in every group, rather than campaigning
// forever and answering that it knows no leader.
func TestRemovedWhileDownRejoins(t *testing.T) {
	for _, groups := range []int{1, 2} {
		t.Run(fmt.Sprintf("groups=%d", groups), func(t *testing.T) { testRemovedWhileDownRejoins(t, groups) })
	}
}

func testRemovedWhileDownRejoins(t *testing.T, groups int) {
	// Each node's addresses are held from their choice until the node
	// binds them, and n3's again while it is down: the servers start one
	// after another, seconds apart on a busy machine, and a port left free
	// meanwhile may be taken by another process.
	var raftAddrs, httpAddrs, dirs, members []string
	var held []*heldAddrs
	for i := range 3 {
		h := holdFreeAddrs(t, 2)
		held = append(held, h)
		raftAddrs = append(raftAddrs, h.addrs[0])
		httpAddrs = append(httpAddrs, h.addrs[1])
		dirs = append(dirs, t.TempDir())
		members = append(members, fmt.Sprintf("n%d=%s", i+1, raftAddrs[i]))
	}
	args := func(i int, extra ...string) []string {
		return append([]string{"--node-id", fmt.Sprintf("n%d", i+1), "--data-dir", dirs[i], "--raft-addr", raftAddrs[i],
			"--groups", fmt.Sprint(groups)}, extra...)
	}
	var stops []func()
	for i := range 3 {
		held[i].release()
		stops = append(stops, startServer(t, httpAddrs[i], args(i, "--initial-cluster", strings.Join(members, ","))...))
	}
	ctx := t.Context()
	cl := client.New("http://" + httpAddrs[0])
	n3 := client.New("http://" + httpAddrs[2])
	for _, c := range []*client.Client{cl, n3} {
		nettest.WaitFor(t, 30*time.Second, "the cluster to be ready", func() bool { return c.Readyz(ctx) == nil })
	}
	// n3 has announced itself (the leader records its HTTP address), so
	// that it restarts as a member by its own data.
	nettest.WaitFor(t, 30*time.Second, "n3's HTTP address to be recorded", func() bool {
		v, err := cl.Cluster(ctx)
		return err == nil && slices.ContainsFunc(v.Nodes, func(m api.NodeStatus) bool { return m.ID == "n3" && m.HTTPAddr == httpAddrs[2] })
	})
	stops[2]()
	down := holdAddrs(t, raftAddrs[2], httpAddrs[2])
	nettest.WaitFor(t, 30*time.Second, "n3 to be removed while it is down", func() bool {
		_, err := run(t, "remove-node", "--addr", "http://"+httpAddrs[0], "n3")
		return err == nil
	})
	down.release()
	startServer(t, httpAddrs[2], args(2, "--join", httpAddrs[0])...)
	nettest.WaitFor(t, 30*time.Second, "n3 to be added back and ready", func() bool { return n3.Readyz(ctx) == nil })
	v, err := cl.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(v.Nodes, func(m api.NodeStatus) bool { return m.ID == "n3" }) {
		t.Fatalf("members after n3 rejoined: %+v, want n3", v.Nodes)
	}
}

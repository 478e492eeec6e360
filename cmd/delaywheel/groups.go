package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// checkGroups validates --groups.
func checkGroups(n int) error {
	if n < 1 || n > model.MaxGroups {
		return fmt.Errorf("--groups %d: want 1 to %d Raft groups", n, model.MaxGroups)
	}
	return nil
}

// registerGroups registers each group's node collectors with reg: with
// one group as they are, else under the label group="<g>", so that the
// groups' series of one name do not collide.
func registerGroups(reg prometheus.Registerer, gs *replication.Groups) {
	if gs.Count() == 1 {
		reg.MustRegister(gs.Node(0).Collector())
		return
	}
	for g := range gs.Count() {
		prometheus.WrapRegistererWith(prometheus.Labels{"group": strconv.Itoa(g)}, reg).MustRegister(gs.Node(g).Collector())
	}
}

// appliedSum is the sum of the groups' applied indexes: it moves whenever
// any group applies an entry, which is all the idle-heap releaser asks.
func appliedSum(gs *replication.Groups) func() uint64 {
	return func() uint64 {
		var sum uint64
		for g := range gs.Count() {
			sum += gs.Node(g).Raft().AppliedIndex()
		}
		return sum
	}
}

// stepDown marks every group as shutting down (so /readyz answers 503
// from here on), then hands the leadership of every group this node leads
// over.
func stepDown(gs *replication.Groups) {
	for g := range gs.Count() {
		gs.Node(g).Stopping()
	}
	for g := range gs.Count() {
		gs.Node(g).StepDown()
	}
}

// announced reports whether every group's replicated metadata holds this
// node, and, when rejoin, whether no group counts it removed.
func announced(gs *replication.Groups, rejoin bool) bool {
	for g := range gs.Count() {
		n := gs.Node(g)
		if !n.HasSelf() || (rejoin && n.Removed() != nil) {
			return false
		}
	}
	return true
}

// leaderOfEvery reports whether every group knows a leader: only a member
// hears one.
func leaderOfEvery(gs *replication.Groups) bool {
	for g := range gs.Count() {
		if _, _, known := gs.Node(g).LeaderHTTP(); !known {
			return false
		}
	}
	return true
}

// removedAnywhere reports whether some group counts this node removed.
func removedAnywhere(gs *replication.Groups) bool {
	for g := range gs.Count() {
		if gs.Node(g).Removed() != nil {
			return true
		}
	}
	return false
}

// announceTarget is the HTTP address to ask to add this node: the leader
// of a group that knows another node as its leader (POST
// /v1/cluster/nodes there adds it to every group, each through its own
// leader), else join when no group knows a leader yet.
func announceTarget(gs *replication.Groups, join string) string {
	anyKnown := false
	for g := range gs.Count() {
		addr, isLeader, known := gs.Node(g).LeaderHTTP()
		if known && !isLeader && addr != "" {
			return addr
		}
		anyKnown = anyKnown || known
	}
	if !anyKnown {
		return join
	}
	return ""
}

// closeGroups closes the node's groups within ctx.
func closeGroups(ctx context.Context, gs *replication.Groups) error {
	if err := gs.Close(ctx); err != nil {
		return fmt.Errorf("close node: %w", err)
	}
	return nil
}

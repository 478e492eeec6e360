package main

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// announce makes sure the replicated metadata holds this node's addresses:
// a joining node, or one restarted with --join after its removal (known to
// it, or, removed while it was down, learnt from the member it was given,
// which no longer lists it), asks that member to add it; a member of an initial cluster asks the
// leader to record its HTTP address. With many groups it asks until every
// group holds it; one request adds it to every group.
func announce(ctx context.Context, log *slog.Logger, gs *replication.Groups, self api.Node, join, token, scheme string, rt http.RoundTripper) {
	opts := []client.Option{client.WithToken(token)}
	if rt != nil {
		opts = append(opts, client.WithHTTPClient(&http.Client{Transport: rt}))
	}
	// A node removed from its cluster before it started asks to be added
	// back only when given --join; one removed while running stays out.
	rejoin := removedAnywhere(gs)
	if rejoin && join == "" {
		return
	}
	withScheme := func(addr string) string {
		if !strings.Contains(addr, "://") {
			return scheme + "://" + addr
		}
		return addr
	}
	// A member by its own data that is given --join checks that the
	// cluster agrees, until it hears a leader of every group: one removed
	// while it was down never receives its removal, and would campaign
	// forever, refused.
	check := join != "" && !rejoin && announced(gs, false)
	for attempt := 0; ; attempt++ {
		var target string
		switch {
		case check:
			switch {
			case !listed(ctx, client.New(withScheme(join), opts...), self.ID):
				log.Warn("the cluster at --join does not list this node, removed while it was down: asking to be added back", "join", join)
				target = withScheme(join)
			case !leaderOfEvery(gs):
				// Not caught up yet: wait to hear every group's leader.
			case announced(gs, true):
				return
			default:
				// A leader of every group is heard, but a group lacks
				// this node's record or counts it removed: an addition
				// that got half way (its answer lost, or the record's
				// step not taken). Adding is idempotent: ask again.
				if t := announceTarget(gs, join); t != "" {
					target = withScheme(t)
				}
			}
		case announced(gs, rejoin):
			return
		default:
			if t := announceTarget(gs, join); t != "" {
				target = withScheme(t)
			}
		}
		if target != "" {
			cl := client.New(target, opts...)
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := cl.AddNode(rctx, self)
			cancel()
			if err != nil && attempt%10 == 0 {
				log.Info("announcing this node to the cluster", "via", target, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// listed reports whether the members cl's node reports, as the leader it
// knows sees them, hold id; true when it cannot tell (no answer, or no
// leader known), so that only a cluster that answers for itself makes a
// node ask to be added back.
func listed(ctx context.Context, cl *client.Client, id string) bool {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := cl.Cluster(rctx)
	if err != nil || v.Leader == "" || v.ViewOf != v.Leader {
		return true
	}
	return slices.ContainsFunc(v.Nodes, func(m api.NodeStatus) bool { return m.ID == id })
}

package bench

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// How the delaywheel target finds the node to call: the leader of the
// cluster, or of a topic's group, learned from the nodes' cluster views,
// and retried across a failover.

// refreshLeader asks the nodes who leads and points the target at it.
func (t *dwTarget) refreshLeader(ctx context.Context) {
	n := len(t.clients)
	start := int(t.leader.Load())
	for k := range n {
		i := (start + k) % n
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := t.clients[i].ClusterLocal(cctx)
		cancel()
		if err != nil || info.Leader == "" {
			continue
		}
		for _, ns := range info.Nodes {
			if ns.ID != info.Leader {
				continue
			}
			for j, a := range t.addrs {
				if a == ns.HTTPAddr {
					t.leader.Store(int32(j))
					return
				}
			}
		}
		return // a leader this target was not given the address of: keep going through i
	}
}

// refreshGroups learns which node leads each Raft group, when the run
// spreads over topics and the cluster has several groups. The nodes are
// matched to the target's addresses by HTTP address or, when the cluster
// knows them by other names (containers), by position: the i-th address
// for the i-th node in id order.
func (t *dwTarget) refreshGroups(ctx context.Context) {
	t.groupNodes.Store(nil)
	if len(t.topics) < 2 || len(t.clients) < 2 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := t.clients[t.leader.Load()].Cluster(cctx)
	if err != nil || len(info.Groups) < 2 {
		return
	}
	index := map[string]int32{}
	for _, ns := range info.Nodes {
		if j := slices.Index(t.addrs, ns.HTTPAddr); j >= 0 {
			index[ns.ID] = int32(j)
		}
	}
	if len(index) < len(info.Nodes) && len(info.Nodes) == len(t.addrs) {
		ids := make([]string, 0, len(info.Nodes))
		for _, ns := range info.Nodes {
			ids = append(ids, ns.ID)
		}
		slices.Sort(ids)
		for j, id := range ids {
			index[id] = int32(j)
		}
	}
	leaders := make([]int32, len(info.Groups))
	for _, g := range info.Groups {
		i, ok := index[g.Leader]
		if !ok || g.Group < 0 || g.Group >= len(leaders) {
			return
		}
		leaders[g.Group] = i
	}
	t.groupNodes.Store(&leaders)
}

// failover moves the target off node i after a failed call.
func (t *dwTarget) failover(ctx context.Context, i int32) {
	if len(t.clients) == 1 {
		return
	}
	if t.leader.CompareAndSwap(i, (i+1)%int32(len(t.clients))) {
		t.refreshLeader(ctx)
	}
	if t.groupNodes.Load() != nil {
		t.refreshGroups(ctx)
	}
}

// retryable reports whether a failed call may succeed if repeated, and how
// long to wait first; moveOn says the node itself failed.
func retryable(err error, attempt int) (wait time.Duration, moveOn, ok bool) {
	backoff := min(time.Duration(attempt+1)*20*time.Millisecond, 500*time.Millisecond)
	var ce *client.Error
	if !errors.As(err, &ce) {
		return backoff, true, true // the connection failed
	}
	switch ce.Status {
	case http.StatusTooManyRequests:
		return max(ce.RetryAfter, backoff), false, true
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return min(max(ce.RetryAfter, backoff), time.Second), true, true
	}
	return 0, false, false
}

// retryFor is how long a call keeps being retried.
const retryFor = time.Minute

// call runs fn against the believed leader, retrying on another node or
// after back-pressure until it succeeds, fails for good or retryFor passes.
func (t *dwTarget) call(ctx context.Context, fn func(*client.Client) error) error {
	return t.callTopic(ctx, "", fn)
}

// callTopic is call for a request about topic: its first try goes to the
// node leading the topic's group (nodeFor).
func (t *dwTarget) callTopic(ctx context.Context, topic string, fn func(*client.Client) error) error {
	return t.retry(ctx, topic, func(i int32) error { return fn(t.clients[i]) })
}

// nodeFor is the node believed to lead topic's group: on a cluster of
// several groups the one refreshGroups learned, otherwise (or for no
// topic) the node believed to lead.
func (t *dwTarget) nodeFor(topic string) int32 {
	if g := t.groupNodes.Load(); g != nil && topic != "" {
		return (*g)[model.GroupOf(topic, len(*g))]
	}
	return t.leader.Load()
}

// retry runs fn with the index of the node believed to lead topic's group
// first, then of the believed leader, retrying as call does.
func (t *dwTarget) retry(ctx context.Context, topic string, fn func(leader int32) error) error {
	deadline := time.Now().Add(retryFor)
	for attempt := 0; ; attempt++ {
		i := t.leader.Load()
		if attempt == 0 {
			i = t.nodeFor(topic)
		}
		err := fn(i)
		if err == nil || ctx.Err() != nil {
			return err
		}
		wait, moveOn, ok := retryable(err, attempt)
		if !ok || time.Now().Add(wait).After(deadline) {
			return err
		}
		t.retries.Add(1)
		if moveOn {
			t.failover(ctx, i)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// leaderNode is the spawned node believed to lead.
func (t *dwTarget) leaderNode() *dwNode {
	i := int(t.leader.Load())
	for _, nd := range t.cluster.nodes {
		if nd.httpAddr == t.addrs[i] {
			return nd
		}
	}
	return t.cluster.nodes[0]
}

package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
)

// What the cluster's nodes say of its leaders: who leads each group, and
// waiting until one does, or until every node is ready.

// Leader returns the live node that considers itself leader and that every
// other live node of excluding none names as leader, or an error.
func (c *Cluster) Leader(ctx context.Context) (*Server, api.Cluster, error) {
	return c.leader(ctx, 0, nil)
}

// leader is Leader of group g, asking only the nodes not in exclude.
func (c *Cluster) leader(ctx context.Context, g int, exclude map[*Server]bool) (*Server, api.Cluster, error) {
	live := c.Live()
	var leader string
	var view api.Cluster
	for _, n := range live {
		if exclude[n] {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		v, err := n.ClusterOf(rctx, g, false)
		cancel()
		if err != nil {
			return nil, view, fmt.Errorf("%s: %w", n.ID, err)
		}
		if v.Leader == "" {
			return nil, view, fmt.Errorf("%s knows no leader of group %d", n.ID, g)
		}
		if leader != "" && v.Leader != leader {
			return nil, view, fmt.Errorf("nodes disagree on the leader of group %d: %s and %s", g, leader, v.Leader)
		}
		leader, view = v.Leader, v
	}
	if leader == "" {
		return nil, view, errors.New("no live node")
	}
	l := c.Server(leader)
	if l == nil || exclude[l] || !l.Running() || l.Paused() {
		return nil, view, fmt.Errorf("leader %s of group %d is not a live node of this cluster", leader, g)
	}
	return l, view, nil
}

// WaitLeader waits until the live nodes, except the ones given, agree on a
// leader that is itself live and not one of the given nodes.
func (c *Cluster) WaitLeader(ctx context.Context, except ...*Server) (*Server, error) {
	return c.WaitGroupLeader(ctx, 0, except...)
}

// WaitGroupLeader is WaitLeader for Raft group g.
func (c *Cluster) WaitGroupLeader(ctx context.Context, g int, except ...*Server) (*Server, error) {
	ex := map[*Server]bool{}
	for _, n := range except {
		ex[n] = true
	}
	var last error
	for {
		l, _, err := c.leader(ctx, g, ex)
		if err == nil {
			return l, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no leader: %w (last: %v)", ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitGroupLeaders waits until every group has a leader (WaitGroupLeader)
// and returns them by group.
func (c *Cluster) WaitGroupLeaders(ctx context.Context, except ...*Server) ([]*Server, error) {
	leaders := make([]*Server, c.groups)
	for g := range leaders {
		l, err := c.WaitGroupLeader(ctx, g, except...)
		if err != nil {
			return nil, fmt.Errorf("group %d: %w", g, err)
		}
		leaders[g] = l
	}
	return leaders, nil
}

// Groups is the number of Raft groups every node runs.
func (c *Cluster) Groups() int { return c.groups }

// PreferredLeader is the node the servers' leadership balancer gives group
// g to once every voter answers: the voter at g modulo their count, sorted
// by id (every node the cluster created is taken for a voter).
func (c *Cluster) PreferredLeader(g int) *Server {
	ns := c.Servers()
	slices.SortFunc(ns, func(a, b *Server) int { return strings.Compare(a.ID, b.ID) })
	return ns[g%len(ns)]
}

// WaitSpread waits until leaderships are spread as the balancer spreads
// them (CheckSpread).
func (c *Cluster) WaitSpread(ctx context.Context) error {
	return Eventually(ctx, 100*time.Millisecond, func() error { return c.CheckSpread(ctx) })
}

// CheckSpread reports whether every live node's own view of every group
// names the group's preferred leader, which leads it.
func (c *Cluster) CheckSpread(ctx context.Context) error {
	for _, n := range c.Live() {
		for g := range c.groups {
			want := c.PreferredLeader(g)
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			v, err := n.ClusterOf(rctx, g, true)
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %w", n.ID, err)
			}
			if v.Leader != want.ID {
				return fmt.Errorf("%s names %q leader of group %d, want %s", n.ID, v.Leader, g, want.ID)
			}
		}
	}
	return nil
}

// WaitReady waits until every live node answers /readyz.
func (c *Cluster) WaitReady(ctx context.Context) error {
	for _, n := range c.Live() {
		if err := n.WaitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// newHTTPClient is the HTTP client of a node's Client: every call is
// bounded (a long-poll reserve gets its wait on top), and idle connections
// are kept for concurrent callers.
func newHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// viewClient asks nodes for their views of a group (Server.ClusterOf).
var viewClient = newHTTPClient()

// ClusterOf returns the node's view of Raft group g: GET
// /v1/cluster?group=g, which a follower answers with the group leader's
// view, or with local the node's own view (&local=true), answered at once.
// Group 0 is asked without ?group=, as the client asks it.
func (n *Server) ClusterOf(ctx context.Context, g int, local bool) (api.Cluster, error) {
	switch {
	case g == 0 && local:
		return n.Client.ClusterLocal(ctx)
	case g == 0:
		return n.Client.Cluster(ctx)
	}
	url := "http://" + n.HTTPAddr + "/v1/cluster?group=" + strconv.Itoa(g)
	if local {
		url += "&local=true"
	}
	var v api.Cluster
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return v, err
	}
	resp, err := viewClient.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return v, err
	}
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return v, fmt.Errorf("GET %s: %w", url, err)
	}
	return v, nil
}

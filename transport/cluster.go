package transport

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
)

// memberAskTimeout bounds the questions behind one cluster view: a member
// that does not answer within it is reported in state unknown (and, where
// no heartbeats say otherwise, unreachable).
const memberAskTimeout = time.Second

// cluster answers the leader's view of the members: the leader asks each
// member for its own state and indexes (GET /v1/cluster?local=true) and
// adds what its heartbeats say; a follower fetches that view from the
// leader, and answers its own view only when no leader can be asked.
func (s *Server) cluster(r *http.Request) (any, error) {
	local := false
	if q := r.URL.Query().Get("local"); q != "" {
		var err error
		if local, err = strconv.ParseBool(q); err != nil {
			return nil, invalid("local: must be true or false, got %s", service.QuoteShort(q))
		}
	}
	view, err := s.clusterView(r.Context(), groupOf(r), local, r.Header.Get(ForwardedHeader) != "", r.Header.Get("Authorization"))
	view.GRPCAddr = s.cfg.GRPCAddr
	if err == nil && !local && routingOf(r).span {
		// On a node of many groups: group 0's view, with every group.
		s.allGroups(r.Context(), r.Header.Get("Authorization"), &view)
	}
	return view, err
}

// clusterView answers the view of the cluster in group g: this node's own
// when local, the group leader's otherwise; forwarded says the question
// came from another node, which must not be asked back.
func (s *Server) clusterView(ctx context.Context, g int, local, forwarded bool, auth string) (api.Cluster, error) {
	b := s.svc.Group(g)
	view, err := b.Cluster(ctx)
	if err != nil {
		return view, err
	}
	own := selfOf(view)
	if local {
		return withGroups(view, own, g), nil
	}
	addr, isLeader, known := b.LeaderHTTP()
	switch {
	case isLeader:
		s.askMembers(ctx, g, auth, &view)
		return withGroups(view, own, g), nil
	case forwarded:
		return withGroups(view, own, g), nil
	case !known || addr == "":
		s.askMembers(ctx, g, auth, &view)
		return withGroups(view, own, g), nil
	}
	// The leader may itself wait out memberAskTimeout for a member.
	actx, cancel := context.WithTimeout(ctx, 2*memberAskTimeout)
	defer cancel()
	var lv api.Cluster
	if err := s.ask(actx, addr, "/v1/cluster"+s.groupQuery("?", g), auth, &lv); err != nil {
		s.log.Debug("asking the leader for the cluster view", "leader", addr, "err", err)
		s.askMembers(ctx, g, auth, &view)
		return withGroups(view, own, g), nil
	}
	lv.Self = view.Self
	return withGroups(lv, own, g), nil
}

// selfOf is what view says of the node that answered it.
func selfOf(view api.Cluster) api.NodeStatus {
	for _, n := range view.Nodes {
		if n.ID == view.Self {
			return n
		}
	}
	return api.NodeStatus{}
}

// withGroups sets view's groups to group alone: its leader and term
// are the view's, its indexes what the view says of the leader, and its
// lag the leader's commit index less own's applied index, own being this
// node as it sees itself. Indexes the view does not know stay 0 and the
// lag null.
func withGroups(view api.Cluster, own api.NodeStatus, group int) api.Cluster {
	g := api.Group{Group: group, Leader: view.Leader, Term: view.Term}
	for _, n := range view.Nodes {
		if n.ID == view.Leader && view.Leader != "" {
			g.AppliedIndex, g.CommitIndex = n.AppliedIndex, n.CommitIndex
		}
	}
	if g.CommitIndex > 0 && own.AppliedIndex > 0 {
		lag := g.CommitIndex - min(g.CommitIndex, own.AppliedIndex)
		g.Lag = &lag
	}
	view.Groups = []api.Group{g}
	return view
}

// memberOwn asks member id at addr for its own view and returns what it
// says of itself; ok is false when its answer does not speak for id.
func (s *Server) memberOwn(ctx context.Context, g int, id, addr, auth string) (own api.NodeStatus, ok bool, err error) {
	var lv api.Cluster
	if err := s.ask(ctx, addr, "/v1/cluster?local=true"+s.groupQuery("&", g), auth, &lv); err != nil {
		return api.NodeStatus{}, false, err
	}
	if lv.Self != id {
		return api.NodeStatus{}, false, nil
	}
	for _, n := range lv.Nodes {
		if n.ID == id {
			return n, true, nil
		}
	}
	return api.NodeStatus{}, false, nil
}

// askMembers fills in, for every other member, what it says of itself,
// and each member's lag behind this node's commit index (the leader's,
// when it leads). Where the view does not say whether a member is
// reachable (this node does not lead, so no heartbeats tell), a member
// that answers is reachable and one that cannot be asked is not.
func (s *Server) askMembers(ctx context.Context, g int, auth string, view *api.Cluster) {
	ctx, cancel := context.WithTimeout(ctx, memberAskTimeout)
	defer cancel()
	var commit uint64
	var wg sync.WaitGroup
	for i := range view.Nodes {
		m := &view.Nodes[i]
		if m.ID == view.Self {
			commit = m.CommitIndex
			continue
		}
		reached := func(ok bool) {
			if m.Reachable == nil {
				m.Reachable = &ok
			}
		}
		if m.HTTPAddr == "" {
			reached(false)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			own, ok, err := s.memberOwn(ctx, g, m.ID, m.HTTPAddr, auth)
			reached(err == nil && ok)
			if err != nil {
				s.log.Debug("asking a member for its state", "member", m.ID, "addr", m.HTTPAddr, "err", err)
				return
			}
			if ok {
				m.State, m.AppliedIndex, m.CommitIndex = own.State, own.AppliedIndex, own.CommitIndex
				if m.LastContactMs == nil {
					m.LastContactMs = own.LastContactMs
				}
			}
		}()
	}
	wg.Wait()
	for i := range view.Nodes {
		m := &view.Nodes[i]
		if m.AppliedIndex > 0 || m.ID == view.Self {
			lag := commit - min(commit, m.AppliedIndex)
			m.Lag = &lag
		}
	}
}

// memberConfirmTimeout bounds how long a removal waits for the member to
// hold its demotion; a member that is down never will.
const memberConfirmTimeout = 3 * time.Second

// memberHolds waits until member id says (GET /v1/cluster?local=true) that
// its commit index has reached index, or refuses as a removed member: it
// holds that entry. A member of an initial cluster records its HTTP
// address in the background after it starts, so one removed right after
// may not have yet: its address is waited for too. It gives up at once
// when the member does not answer, and after memberConfirmTimeout.
func (s *Server) memberHolds(ctx context.Context, g int, id string, index uint64, auth string) error {
	ctx, cancel := context.WithTimeout(ctx, memberConfirmTimeout)
	defer cancel()
	addr, err := s.memberAddr(ctx, g, id)
	if err != nil {
		return err
	}
	for {
		own, ok, err := s.memberOwn(ctx, g, id, addr, auth)
		if err != nil {
			if strings.Contains(err.Error(), "removed from the cluster") {
				return nil // it refuses because it holds its demotion
			}
			return fmt.Errorf("member %s at %s: %w", id, addr, err)
		}
		if ok && own.CommitIndex >= index {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("member %s did not reach entry %d in %v", id, index, memberConfirmTimeout)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// memberAddr returns the HTTP address the replicated metadata records for
// member id, waiting until it records one or ctx ends.
func (s *Server) memberAddr(ctx context.Context, g int, id string) (string, error) {
	for {
		view, err := s.svc.Group(g).Cluster(ctx)
		if err != nil {
			return "", err
		}
		for _, m := range view.Nodes {
			if m.ID == id && m.HTTPAddr != "" {
				return m.HTTPAddr, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("member %s recorded no HTTP address in %v", id, memberConfirmTimeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ask GETs path from the node at addr, marked forwarded so that it answers
// itself, sending auth as the Authorization header, and decodes the JSON
// answer into out.
func (s *Server) ask(ctx context.Context, addr, path, auth string, out any) error {
	_, err := s.parts.send(ctx, addr, http.MethodGet, path, auth, nil, out)
	return err
}

// ClusterView returns the cluster view GET /v1/cluster answers: on the
// leader, what each member says of itself; on a follower, the leader's
// view, or its own when no leader can be asked. auth is the Authorization
// header to send to the other members.
//
// On a node of many groups, it is GET /v1/cluster's view of group 0 with
// every group in Groups.
func (s *Server) ClusterView(ctx context.Context, auth string) (api.Cluster, error) {
	view, err := s.clusterView(ctx, 0, false, false, auth)
	if err == nil && s.svc.Count() > 1 {
		s.allGroups(ctx, auth, &view)
	}
	return view, err
}

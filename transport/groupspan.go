package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// This file answers, on a node of many groups, the requests that span
// them (the scopeSpan routes of routeList, without ?group=). A write is split
// by group by the service's router (Server.svc): a part of a group this
// node leads goes to that group's backend, a part of another group to
// its leader as the same route with ?group=g (parts.go), whose answer the
// caller then reads here too. A batch spanning groups is therefore atomic
// per group only: when one part fails, the parts that succeeded stay
// done, and the answer is the failed part's error, naming its group.
// Reads merge each group's local read.

// groupError is e, group g's answer to a part, as the answer of the
// request the part is of: its status, code and Retry-After, and its
// message naming the group.
func groupError(g int, e *Error) *Error {
	return &Error{Status: e.Status, Code: e.Code, Message: fmt.Sprintf("group %d: %s", g, e.Message), RetryAfter: e.RetryAfter, Err: e.Err}
}

// inGroup serves a part of group g of r's request: with local on the
// group's backend when this node leads g, else as method path with body
// (nil: none) at g's leader, whose answer it decodes. An error is the
// answer the request gets, naming no group: a schedule lives in one group
// the caller never names, and a request over every group names the group
// only where it needs to (partOf).
func inGroup[T any](ctx context.Context, s *Server, g int, local func(b Backend) (T, error), method, path string, body any) (T, error) {
	v, err := service.Call(ctx, s.svc, g, local, func(_ service.Forwarder, to model.Member) (T, uint64, error) {
		var v T
		index, err := s.parts.do(ctx, to, g, method, path, body, &v)
		return v, index, err
	})
	if err != nil {
		return v, ToError(err)
	}
	return v, nil
}

// partOf is err, group g's answer to its part of r, a request served
// group by group in order (membership), as r's answer: over every group,
// it names the group once an earlier group took its part, to say how far
// the request got; group 0's refusal (an unknown node, a node already a
// member) is the request's own.
func partOf(r *http.Request, g int, err error) error {
	if g == 0 || !routingOf(r).span {
		return err
	}
	return groupError(g, ToError(err))
}

// readyzSpan is ready when every group is, each as readyz defines it,
// and names the group that is not. A node removed from the cluster
// learns it group by group, and a group that has not told it yet hears
// no leader any more: removed from any group, the node says it was
// removed, as a node of one group does, naming no group.
func (s *Server) readyzSpan(r *http.Request) (any, error) {
	n := s.svc.Count()
	for g := range n {
		if err := s.svc.Group(g).Removed(); err != nil {
			return nil, notReady(err)
		}
	}
	st := make([]api.Status, n)
	err := service.EachGroup(service.All(n), func(g int) (err error) {
		if st[g], err = readyGroup(s.svc.Group(g)); err != nil {
			return groupError(g, ToError(err))
		}
		return nil
	})
	return st[0], err
}

// addNode adds the node to the groups of r (every group, in order, or
// the one ?group= names).
func (s *Server) addNode(r *http.Request) (any, error) {
	n, err := s.nodeBody(r)
	if err != nil {
		return nil, err
	}
	for _, g := range s.routerOf(r).Groups() {
		_, err := inGroup(r.Context(), s, g, func(b Backend) (api.Node, error) { return n, b.AddNode(r.Context(), memberOf(n)) },
			http.MethodPost, "/v1/cluster/nodes", n)
		if err != nil {
			return nil, partOf(r, g, err)
		}
	}
	return n, nil
}

// removeNode removes the node from the groups of r (every group, in
// order, or the one ?group= names).
//
// A leader asked to remove itself hands its leadership on and answers
// 503, and a group answers 503 while it elects another. The removal is
// then asked again in that group until it answers, for at most
// removeRetryTimeout; a 404 (not a member) after a 503 means an earlier
// ask removed it. A part another node sends is answered as it is: the
// sender asks again.
func (s *Server) removeNode(r *http.Request) (any, error) {
	id, auth := r.PathValue("id"), r.Header.Get("Authorization")
	part := r.Header.Get(ForwardedHeader) != ""
	ctx, cancel := context.WithTimeout(r.Context(), removeRetryTimeout)
	defer cancel()
	for _, g := range s.routerOf(r).Groups() {
		remove := func(b Backend) (api.NodeRemoved, error) {
			confirm := func(ctx context.Context, index uint64) error { return s.memberHolds(ctx, g, id, index, auth) }
			return api.NodeRemoved{ID: id, Removed: true}, b.RemoveNode(r.Context(), id, confirm)
		}
		for retried := false; ; retried = true {
			_, err := inGroup(r.Context(), s, g, remove, http.MethodDelete, "/v1/cluster/nodes/"+api.PathSegment(id), nil)
			var e *Error
			switch {
			case err == nil:
			case part:
				return nil, err
			case errors.As(err, &e) && e.Status == http.StatusNotFound && retried:
			case errors.As(err, &e) && e.Status == http.StatusServiceUnavailable && ctx.Err() == nil:
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
				continue
			default:
				return nil, partOf(r, g, err)
			}
			break
		}
	}
	return api.NodeRemoved{ID: id, Removed: true}, nil
}

// removeRetryTimeout bounds how long a removal over many groups waits for
// the groups whose leader it removed to elect another.
const removeRetryTimeout = 10 * time.Second

// allGroups sets view's groups to every group as this node sees it
// (groupStatus); auth is the Authorization to send.
func (s *Server) allGroups(ctx context.Context, auth string, view *api.Cluster) {
	n := s.svc.Count()
	view.Groups = make([]api.Group, n)
	_ = service.EachGroup(service.All(n), func(g int) error {
		view.Groups[g] = s.groupStatus(ctx, g, auth)
		return nil
	})
}

// groupStatus is group g as this node sees it, with its leader's indexes:
// its own when it leads g, else what the leader says of itself.
func (s *Server) groupStatus(ctx context.Context, g int, auth string) api.Group {
	b := s.svc.Group(g)
	own, err := b.Cluster(ctx)
	if err != nil {
		return api.Group{Group: g}
	}
	me, leader := selfOf(own), api.NodeStatus{}
	if addr, isLeader, known := b.LeaderHTTP(); isLeader {
		leader = me
	} else if known && addr != "" {
		actx, cancel := context.WithTimeout(ctx, memberAskTimeout)
		defer cancel()
		if l, ok, err := s.memberOwn(actx, g, own.Leader, addr, auth); err == nil && ok {
			leader = l
		} else {
			s.log.Debug("asking a group's leader for its indexes", "group", g, "leader", addr, "err", err)
		}
	}
	leader.ID = own.Leader
	own.Nodes = []api.NodeStatus{leader}
	return withGroups(own, me, g).Groups[0]
}

// holder returns the group of rt's groups whose local store holds
// schedule name (found), else rt's first group.
func holder(ctx context.Context, rt *service.Router, name string) (g int, found bool, err error) {
	gs := rt.Groups()
	has := make([]bool, rt.Count())
	err = service.EachGroup(gs, func(g int) error {
		_, err := rt.Group(g).Schedule(ctx, name)
		has[g] = err == nil
		if errors.Is(err, model.ErrNotFound) {
			return nil
		}
		return err
	})
	if i := slices.Index(has, true); i >= 0 {
		return i, true, err
	}
	return gs[0], false, err
}

// putScheduleSpan stores a schedule in the group of its topic. The body
// goes on as it came; the group's handler validates it.
func (s *Server) putScheduleSpan(r *http.Request) (any, error) {
	data, err := readBody(r)
	if err != nil {
		return nil, err
	}
	// Only the topic is read here: an invalid body goes to the group of
	// what topic it names ("" when none), whose handler refuses it.
	var head struct {
		Topic string `json:"topic"`
	}
	_ = json.Unmarshal(data, &head)
	name := r.PathValue("name")
	g := model.GroupOf(head.Topic, s.svc.Count())
	was, found, err := holder(r.Context(), s.svc, name)
	if err != nil {
		return nil, err
	}
	out, err := s.putScheduleIn(r.Context(), g, name, data)
	if err != nil {
		return nil, err
	}
	// A schedule moved to a topic of another group leaves its old group,
	// so that one group holds each name. Should this fail, the client's
	// retry of the put (which replaces) removes it again.
	if found && was != g {
		if _, err := s.deleteScheduleIn(r.Context(), was, name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

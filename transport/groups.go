package transport

import (
	"context"
	"net/http"
	"strconv"

	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// scope says how a route finds its group on a node of many groups.
type scope int

const (
	// scopeNone: no group (/healthz, /v1/openapi.json, the 404 and
	// 405 answers); ?group= is ignored.
	scopeNone scope = iota
	// scopeQuery: the group ?group= names, default 0 (the wheel's views,
	// backups).
	scopeQuery
	// scopeTopic: the group of the path's {topic}.
	scopeTopic
	// scopeID: the group the path's message {id} names.
	scopeID
	// scopeSpan: every group, through the route's span handler (none:
	// the route's own, on the router of every group), unless ?group=
	// names one.
	scopeSpan
)

// groupRoute is how a route is served on a node of many groups.
type groupRoute struct {
	scope scope
	span  handlerFunc // with scopeSpan: the answer from every group
}

// routing is how a request is served, in its context: g is the group
// pick chose for it; a routed route (routed) also carries the service's
// router that serves it, the one of g, or of every group when the route
// spans them. A request of group 0 of a route that is not routed carries
// none, so that a backend of one group serves its requests as it always
// did.
type routing struct {
	g    int
	rt   *service.Router
	span bool // rt spans the groups: the route found no group of its own
}

// routingKey is the context key of a request's routing.
type routingKey struct{}

// routingOf is r's routing.
func routingOf(r *http.Request) routing {
	rt, _ := r.Context().Value(routingKey{}).(routing)
	return rt
}

// groupOf returns the group that answers r.
func groupOf(r *http.Request) int { return routingOf(r).g }

// be returns the backend that answers r: the group pick chose for it.
func (s *Server) be(r *http.Request) Backend { return s.svc.Group(groupOf(r)) }

// routerOf returns the service's router that answers r: in the group pick
// chose for it, or over every group when r's route spans them.
func (s *Server) routerOf(r *http.Request) *service.Router {
	switch rt := routingOf(r); {
	case rt.rt != nil:
		return rt.rt
	case rt.span:
		return s.svc
	default:
		return s.svc.In(rt.g)
	}
}

// withGroup returns r answered in group g, or in every group (span).
func withGroup(r *http.Request, g int, span bool) *http.Request {
	if g == 0 && !span {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), routingKey{}, routing{g: g, span: span}))
}

// pick chooses the group that answers r: the one ?group= names, else the
// one the route's scope finds. span says the route answers from every
// group instead (its span handler). With one group, only a ?group= other
// than 0 changes the answer: it is refused. A path's id of a group the
// cluster does not have is refused, whatever ?group= says, as the
// service's router refuses it.
func (s *Server) pick(r *http.Request, rt groupRoute) (g int, span bool, err error) {
	n := s.svc.Count()
	switch rt.scope {
	case scopeNone:
		return 0, false, nil
	case scopeID:
		// A malformed id is the handler's to refuse (400 naming id).
		if id, err := model.ParseID(r.PathValue("id")); err == nil {
			if g, err = s.svc.GroupOfID("id", id); err != nil {
				return 0, false, err
			}
		}
	}
	if r.URL.RawQuery != "" {
		if q := r.URL.Query().Get("group"); q != "" {
			g, err := strconv.Atoi(q)
			if err != nil || g < 0 || g >= n {
				return 0, false, groupOutOfRange(n, service.QuoteShort(q))
			}
			return g, false, nil
		}
	}
	switch {
	case n == 1:
		return 0, false, nil
	case rt.scope == scopeTopic:
		g = model.GroupOf(r.PathValue("topic"), n)
	case rt.scope == scopeSpan:
		return 0, true, nil
	}
	return g, false, nil
}

// routed prepares r for a route the service's router serves: its context
// carries its caller and the router that serves it, the one of the group
// pick chose (g), or of every group when the route spans them; and the
// Settled whose index its answer names: the one this node applied, of a
// request another node forwarded, else the leader's, of a request of one
// group this node forwarded. When the group is known before the body is
// read, a group that can't be reached refuses r then, as the leader the
// request would reach would.
func (s *Server) routed(r *http.Request, g int, span bool) (*http.Request, *service.Settled, error) {
	ctx := withCaller(r)
	var settled *service.Settled
	switch {
	case r.Header.Get(ForwardedHeader) != "":
		ctx, settled = service.WithSettled(ctx)
	case !span:
		// The answer names the index the leader named, as the leader's.
		ctx, settled = service.WithLeaderIndex(ctx)
	}
	rt := s.svc
	if !span {
		rt = s.svc.In(g)
		if err := rt.Reachable(ctx, g); err != nil {
			return nil, nil, err
		}
	}
	return r.WithContext(context.WithValue(ctx, routingKey{}, routing{g, rt, span})), settled, nil
}

// groupOutOfRange refuses a group outside [0, n), given as got.
func groupOutOfRange(n int, got string) *Error {
	return invalid("group: must be between 0 and %d (this cluster has %d groups), got %s", n-1, n, got)
}

// groupQuery is the query that names group g in a question to another
// node ("" with one group, so that a node of one group asks as it always
// did), with sep its first character.
func (s *Server) groupQuery(sep string, g int) string { return groupQuery(s.svc.Count(), sep, g) }

// groupQuery is the query that names group g of n groups ("" with one).
func groupQuery(n int, sep string, g int) string {
	if n == 1 {
		return ""
	}
	return sep + "group=" + strconv.Itoa(g)
}

// GroupBackends lists the backends of a node's Raft groups, group g's at
// g, as NewServer and the other front ends take them; gs is the node's
// groups (replication's Groups).
func GroupBackends[B Backend](gs interface {
	Count() int
	Node(g int) B
}) []Backend {
	bs := make([]Backend, gs.Count())
	for g := range bs {
		bs[g] = gs.Node(g)
	}
	return bs
}

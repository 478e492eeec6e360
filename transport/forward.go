package transport

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// AppliedIndexHeader is set by the leader on its answer to a write a
// follower forwarded: the log index this node had applied once everything
// it answered (the write included) was applied. The follower's reads then
// wait until it has applied that index too, so that the client reads its
// own write on the node it talks to.
const AppliedIndexHeader = "X-Delaywheel-Applied-Index"

// forward answers r, a stream, by reverse-proxying it, untouched (method,
// path, query, Authorization), to the leader when this node is not the
// leader: a stream stays open, which no Forwarder carries (every other
// route is served in its group by the service's router, or inGroup). It
// reports whether it answered. The leader is that of the group that
// answers r; the path and query are kept, so the leader picks the same
// group.
func (s *Server) forward(w *recorder, r *http.Request) bool {
	b := s.be(r)
	addr, isLeader, known := b.LeaderHTTP()
	switch {
	case isLeader:
		return false
	case !known || addr == "":
		s.fail(w, unavailable(msgNoLeader))
		return true
	case r.Header.Get(ForwardedHeader) != "":
		s.fail(w, unavailable(msgMovedOn))
		return true
	}
	target := &url.URL{Scheme: s.cfg.LeaderScheme, Host: addr}
	w.forwarded = true
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			pr.Out.Header.Set(ForwardedHeader, "1")
		},
		Transport: s.cfg.LeaderTransport,
		ErrorLog:  slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			e := unavailable("forwarding to the leader at %s failed: %v; retry shortly", addr, err)
			e.Err = err
			s.fail(w, e)
		},
	}
	ctx, cancel := untilNewLeader(r.Context(), b, addr)
	defer cancel()
	proxy.ServeHTTP(w, r.WithContext(ctx))
	return true
}

// untilNewLeader returns a context that ends with ctx or once b sees a
// leader other than addr: a leader that stops answering (paused, cut off)
// is replaced by an election, and the client should then retry at the new
// leader instead of waiting out its own timeout. cancel must be called.
func untilNewLeader(ctx context.Context, b Backend, addr string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if now, _, known := b.LeaderHTTP(); known && now != addr {
					cancel()
					return
				}
			}
		}
	}()
	return ctx, cancel
}

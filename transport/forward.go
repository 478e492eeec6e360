package transport

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"github.com/delaywheel/delaywheel/transport/service"
)

// AppliedIndexHeader is set by the leader on its answer to a write a
// follower forwarded: the log index this node had applied once everything
// it answered (the write included) was applied. The follower's reads then
// wait until it has applied that index too, so that the client reads its
// own write on the node it talks to.
const AppliedIndexHeader = "X-Delaywheel-Applied-Index"

// forward answers r by reverse-proxying it, untouched (method, path, query,
// body, Authorization), to the leader when this node is not the leader: a
// stream, which stays open, and the admin writes (webhooks, members,
// schedules); the message routes go through the service's router instead
// (routed). It reports whether it answered. Validation then happens on the
// leader. The leader is that of the group that answers r; the path and
// query are kept, so the leader picks the same group.
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
		ModifyResponse: func(resp *http.Response) error { return readAfterLeaderIndex(b, resp) },
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

// readAfterLeaderIndex makes this node's reads wait for the index the
// leader put in a forwarded write's successful answer (AppliedIndexHeader),
// so that the client reads its write here; the answer goes on at once.
func readAfterLeaderIndex(b Backend, resp *http.Response) error {
	if resp.StatusCode >= 300 {
		return nil
	}
	if index, err := strconv.ParseUint(resp.Header.Get(AppliedIndexHeader), 10, 64); err == nil && index > 0 {
		b.ReadAfter(index)
	}
	return nil
}

// settleForwarded sets AppliedIndexHeader on the leader's answer to a
// write a follower forwarded, once this node has applied what it answered.
func (s *Server) settleForwarded(w http.ResponseWriter, r *http.Request) {
	index, err := service.SettledIndex(r.Context(), s.be(r))
	if err != nil {
		s.log.Debug("answering a forwarded write without an applied index", "err", err)
		return
	}
	w.Header().Set(AppliedIndexHeader, strconv.FormatUint(index, 10))
}

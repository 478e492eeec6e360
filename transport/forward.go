package transport

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// forward answers r by reverse-proxying it, untouched (method, path, query,
// body, Authorization), to the leader when this node is not the leader. It
// reports whether it answered. Validation then happens on the leader.
func (s *Server) forward(w *recorder, r *http.Request) bool {
	addr, isLeader, known := s.b.LeaderHTTP()
	switch {
	case isLeader:
		return false
	case !known || addr == "":
		s.fail(w, unavailable("no leader is known yet (election in progress?); retry shortly"))
		return true
	case r.Header.Get(ForwardedHeader) != "":
		s.fail(w, unavailable("this request was forwarded to a node that is not the leader (leadership is changing); retry shortly"))
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
	// A leader that stops answering (paused, cut off) is replaced by an
	// election; the client should then retry at the new leader instead of
	// waiting out its own timeout, so the forward is cancelled once this
	// node sees another leader.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if now, _, known := s.b.LeaderHTTP(); known && now != addr {
					cancel()
					return
				}
			}
		}
	}()
	proxy.ServeHTTP(w, r.WithContext(ctx))
	return true
}

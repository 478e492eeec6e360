package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
)

// leaderAskTimeout bounds a follower's question to the leader for its
// commit index: a probe must answer within a load balancer's timeout.
const leaderAskTimeout = time.Second

// readyz answers 200 when the node knows a leader and has applied the log
// up to the leader's commit index as of the check; the leader is ready
// once its dispatcher runs. A follower asks the leader for its commit
// index (a /readyz marked forwarded, which the leader answers itself).
func (s *Server) readyz(r *http.Request) (any, error) {
	return s.readyGroup(r, s.be(r), groupOf(r))
}

// readyGroup answers readyz for group g, of backend b.
func (s *Server) readyGroup(r *http.Request, b Backend, g int) (api.Status, error) {
	if err := b.Ready(); err != nil {
		return api.Status{}, unavailable("not ready: %v", err)
	}
	applied, commit := b.Indexes()
	addr, isLeader, known := b.LeaderHTTP()
	switch {
	case isLeader:
		return api.Status{Status: "ready", AppliedIndex: applied, LeaderCommitIndex: commit}, nil
	case r.Header.Get(ForwardedHeader) != "":
		return api.Status{}, unavailable("not the leader: asked for the leader's commit index while leadership changes")
	case !known || addr == "":
		return api.Status{}, unavailable("not ready: the leader's HTTP address is not known yet")
	}
	ctx, cancel := context.WithTimeout(r.Context(), leaderAskTimeout)
	defer cancel()
	lc, err := s.leaderCommit(ctx, addr, "/readyz"+s.groupQuery("?", g))
	if err != nil {
		return api.Status{}, unavailable("not ready: cannot learn the leader's commit index: %v", err)
	}
	if applied < lc {
		return api.Status{}, unavailable("not ready: applied %d of the leader's commit %d", applied, lc)
	}
	return api.Status{Status: "ready", AppliedIndex: applied, LeaderCommitIndex: lc}, nil
}

// leaderCommit asks the leader at addr for its commit index, at path.
func (s *Server) leaderCommit(ctx context.Context, addr, path string) (uint64, error) {
	var st api.Status
	if err := s.ask(ctx, addr, path, "", &st); err != nil {
		return 0, fmt.Errorf("the leader at %s: %w", addr, err)
	}
	if st.LeaderCommitIndex == 0 {
		return 0, fmt.Errorf("the leader at %s gave no commit index", addr)
	}
	return st.LeaderCommitIndex, nil
}

// ask GETs path from the node at addr, marked forwarded so that it answers
// itself, sending auth as the Authorization header, and decodes the JSON
// answer into out.
func (s *Server) ask(ctx context.Context, addr, path, auth string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.cfg.LeaderScheme+"://"+addr+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set(ForwardedHeader, "1")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := s.cfg.LeaderTransport.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("no answer: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e api.ErrorBody
		if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
			return fmt.Errorf("answers %d: %s", resp.StatusCode, e.Error.Message)
		}
		return fmt.Errorf("answers %s", resp.Status)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decoding the answer: %w", err)
	}
	return nil
}

package transport

import (
	"net/http"

	"github.com/delaywheel/delaywheel/transport/api"
)

// readyz answers 200 when the node should take traffic, as its backend's
// Ready says from what the node knows by itself (replication.Node.Ready:
// it knows a leader, has caught up once since it started, and trails the
// leader's commit index by at most --ready-max-lag entries), and 503
// saying why otherwise. It asks no other node: a leader that cannot be
// reached shows as no leader within an election timeout.
func (s *Server) readyz(r *http.Request) (any, error) {
	return readyGroup(s.be(r))
}

// readyGroup answers readyz for a group, of backend b.
func readyGroup(b Backend) (api.Status, error) {
	if err := b.Ready(); err != nil {
		return api.Status{}, notReady(err)
	}
	applied, _ := b.Indexes()
	return api.Status{Status: "ready", AppliedIndex: applied, LeaderCommitIndex: b.LeaderCommit()}, nil
}

// notReady is readyz's 503 saying why: err, what the node said.
func notReady(err error) *Error { return unavailable("not ready: %v", err) }

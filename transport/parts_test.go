package transport

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// ledBy is a backend that follows the leader at addr.
type ledBy struct {
	leadingBackend
	addr string
}

func (b ledBy) Leader() (model.Member, bool, bool) {
	return model.Member{HTTPAddr: b.addr}, false, true
}
func (b ledBy) LeaderHTTP() (string, bool, bool) { return b.addr, false, true }

// TestForwardedToFormerLeader checks that a part forwarded to a node that
// leads its group no more comes back as that node's answer, unchanged for
// the HTTP API, and known as a refusal of a node that does not lead
// (model.ErrNotLeader), which another front end answers as its own.
func TestForwardedToFormerLeader(t *testing.T) {
	former := httptest.NewServer(NewServer(Config{}, ledBy{addr: "elsewhere:7070"}).Handler())
	defer former.Close()
	addr := strings.TrimPrefix(former.URL, "http://")
	s := NewServer(Config{}, ledBy{addr: addr})
	msgs := []command.NewMessage{{Topic: "t", DeliverAtMs: startMsBench}}
	_, _, err := s.parts.Enqueue(t.Context(), model.Member{HTTPAddr: addr}, msgs)
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || e.Message != msgMovedOn || e.RetryAfter != 1 {
		t.Fatalf("forwarded to a former leader: %v; want 503 %q, Retry-After 1", err, msgMovedOn)
	}
	if !errors.Is(err, model.ErrNotLeader) {
		t.Fatalf("forwarded to a former leader: %v; want it known as not leading", err)
	}
	if got := ToError(err); got != e {
		t.Fatalf("the HTTP API's answer %v; want the former leader's %v", got, e)
	}
}

package grpcserver

import (
	"fmt"
	"net/http"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// TestFormerLeaderIsNotLeader checks that the answer of a leader that led
// a forwarded part's group no more (as the Forwarder reads it) is
// UNAVAILABLE of reason NOT_LEADER, with its message and retry delay, as
// that node answers a call it does not forward, also as a group's part.
func TestFormerLeaderIsNotLeader(t *testing.T) {
	refused := &transport.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "leadership is changing", RetryAfter: 1, Err: model.ErrNotLeader}
	for _, err := range []error{refused, fmt.Errorf("forwarding: %w", refused), &service.GroupError{Group: 1, Err: refused}} {
		st := status.Convert(asStatus(err))
		var reason string
		var retry bool
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.ErrorInfo:
				reason = d.Reason
			case *errdetails.RetryInfo:
				retry = d.GetRetryDelay().AsDuration() > 0
			}
		}
		if st.Code() != codes.Unavailable || reason != ReasonNotLeader || !retry {
			t.Fatalf("%v: %v, reason %q, retry %v; want UNAVAILABLE, NOT_LEADER, retry", err, st, reason, retry)
		}
	}
}

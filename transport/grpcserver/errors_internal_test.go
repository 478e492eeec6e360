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

// TestPartNamesItsGroup checks that a group's answer to its part of a
// split call names the group in its message and in its ErrorInfo
// (MetaGroup), keeping the part's own reason, metadata and retry delay,
// and that an answer of the whole call names none.
func TestPartNamesItsGroup(t *testing.T) {
	refused := &transport.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "leadership is changing", RetryAfter: 1, Err: model.ErrNotLeader}
	notLeader := &service.NotLeaderError{Known: true, Leader: model.Member{ID: "n2", HTTPAddr: "10.0.0.2:7070"}}
	for _, tc := range []struct {
		err          error
		group        string
		reason, meta string
	}{
		{&service.GroupError{Group: 2, Err: refused}, "2", ReasonNotLeader, ""},
		{&service.GroupError{Group: 1, Err: notLeader}, "1", ReasonNotLeader, "10.0.0.2:7070"},
		{&service.GroupError{Group: 0, Err: fmt.Errorf("%w: topic", model.ErrInvalid)}, "0", api.CodeInvalidArgument, ""},
		{refused, "", ReasonNotLeader, ""},
	} {
		st := status.Convert(asStatus(tc.err))
		var info *errdetails.ErrorInfo
		var retry bool
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.ErrorInfo:
				info = d
			case *errdetails.RetryInfo:
				retry = true
			}
		}
		if info == nil || info.GetMetadata()[MetaGroup] != tc.group || info.Reason != tc.reason || info.GetMetadata()[MetaLeaderHTTP] != tc.meta {
			t.Fatalf("%v: %v, error info %v; want group %q, reason %s, leader %q", tc.err, st, info, tc.group, tc.reason, tc.meta)
		}
		if tc.group != "" && st.Message()[:len("group "+tc.group+": ")] != "group "+tc.group+": " {
			t.Fatalf("%v: message %q does not name group %s", tc.err, st.Message(), tc.group)
		}
		if st.Code() == codes.Unavailable && !retry {
			t.Fatalf("%v: no retry delay", tc.err)
		}
	}
}

package grpcserver

import (
	"net/http"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
)

// Domain is the domain of every ErrorInfo the server sends.
const Domain = "delaywheel"

// ReasonNotLeader is the ErrorInfo reason of a follower's UNAVAILABLE
// answer to a call only the leader answers.
const ReasonNotLeader = "NOT_LEADER"

// MetaLeaderHTTP is the ErrorInfo metadata key of the leader's HTTP address.
const MetaLeaderHTTP = "leader_http_addr"

// statusOf is the gRPC status of err: the HTTP API's answer to it, mapped.
// meta, when set, is added to the ErrorInfo.
func statusOf(err error, reason string, meta map[string]string) error {
	e := transport.ToError(err)
	st := status.New(api.GRPCCode(e.Status), e.Message)
	if reason == "" {
		reason = e.Code
	}
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: meta}}
	if e.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(e.RetryAfter) * time.Second)})
	}
	if withDetails, derr := st.WithDetails(details...); derr == nil {
		st = withDetails
	}
	return st.Err()
}

// unavailable is a 503 unavailable answer, retried after a second.
func unavailable(msg string) *transport.Error {
	return &transport.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, RetryAfter: 1, Message: msg}
}

// notLeader is a follower's answer to a call only the leader answers.
func notLeader(addr string, known bool) error {
	e := unavailable("no leader is known yet (election in progress?); retry shortly")
	var meta map[string]string
	if known && addr != "" {
		e.Message = "this node is not the leader; call the leader, whose HTTP API is at " + addr
		meta = map[string]string{MetaLeaderHTTP: addr}
	}
	return statusOf(e, ReasonNotLeader, meta)
}

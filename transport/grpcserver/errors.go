package grpcserver

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel/model"
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

// asStatus is err as a status: a status (the leader's answer) as it is;
// a group's answer to its part of a call split over many groups with its
// message naming the group; a part this node could not forward, or whose
// leader led no more once it got it, NOT_LEADER; any other error as the HTTP API answers it, mapped.
func asStatus(err error) error {
	if err == nil {
		return nil
	}
	var ge *service.GroupError
	if errors.As(err, &ge) {
		st := status.Convert(asStatus(ge.Err)).Proto()
		st.Message = fmt.Sprintf("group %d: %s", ge.Group, st.GetMessage())
		return status.FromProto(st).Err()
	}
	var nl *service.NotLeaderError
	if errors.As(err, &nl) {
		// A follower's answer to a call only the leader answers.
		var meta map[string]string
		if nl.Known && nl.Leader.HTTPAddr != "" {
			meta = map[string]string{MetaLeaderHTTP: nl.Leader.HTTPAddr}
		}
		return statusOf(unavailable(nl.Error()), ReasonNotLeader, meta)
	}
	if e := (*transport.Error)(nil); errors.As(err, &e) && errors.Is(e.Err, model.ErrNotLeader) {
		// The leader a part was forwarded to leads no more: NOT_LEADER,
		// as it answers a call it does not forward itself.
		return statusOf(e, ReasonNotLeader, nil)
	}
	if _, isStatus := status.FromError(err); isStatus {
		return err
	}
	return statusOf(err, "", nil)
}

package grpcserver

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
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

// MetaGroup is the ErrorInfo metadata key of the group whose part of a
// call split over many groups the answer is: the other parts may be done.
const MetaGroup = "group"

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
		return partStatus(ge.Group, status.Convert(asStatus(ge.Err)))
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

// partStatus is a group's answer st to its part of a call split over many
// groups: its message names the group, and so does its ErrorInfo
// (MetaGroup), which a client reads to know that other parts may be done.
func partStatus(g int, st *status.Status) error {
	out := status.New(st.Code(), fmt.Sprintf("group %d: %s", g, st.Message()))
	group := strconv.Itoa(g)
	var details []protoadapt.MessageV1
	named := false
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			meta := maps.Clone(d.GetMetadata())
			if meta == nil {
				meta = map[string]string{}
			}
			meta[MetaGroup] = group
			details = append(details, &errdetails.ErrorInfo{Reason: d.GetReason(), Domain: d.GetDomain(), Metadata: meta})
			named = true
		case protoadapt.MessageV1:
			details = append(details, d)
		}
	}
	if !named {
		reason := strings.ToLower(st.Code().String())
		details = append(details, &errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: map[string]string{MetaGroup: group}})
	}
	if withDetails, err := out.WithDetails(details...); err == nil {
		out = withDetails
	}
	return out.Err()
}

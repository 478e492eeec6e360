package grpcserver

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/status"

	"github.com/delaywheel/delaywheel/transport/service"
)

// asStatus is err as a status: a status (the leader's answer) as it is;
// a group's answer to its part of a call split over many groups with its
// message naming the group; a part this node could not forward
// NOT_LEADER; any other error as the HTTP API answers it, mapped.
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
		return notLeader(nl.Leader.HTTPAddr, nl.Known)
	}
	if _, isStatus := status.FromError(err); isStatus {
		return err
	}
	return statusOf(err, "", nil)
}

// ready reports whether every group is ready and none counts this node
// removed.
func (s *Server) ready() bool {
	for g := range s.svc.Count() {
		if b := s.svc.Group(g); b.Ready() != nil || b.Removed() != nil {
			return false
		}
	}
	return true
}

package service

import (
	"errors"
	"fmt"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// Error is a refusal of the service: its class, a wheel error that
// errors.Is finds, and a message that names the field and the limit (it
// does not repeat the class).
type Error struct {
	Class error
	Msg   string
}

// Error returns the message.
func (e *Error) Error() string { return e.Msg }

// Unwrap returns the class.
func (e *Error) Unwrap() error { return e.Class }

// refuse is an *Error of class.
func refuse(class error, format string, args ...any) *Error {
	return &Error{Class: class, Msg: fmt.Sprintf(format, args...)}
}

// NotLeaderError is the answer to a part this node cannot serve: its
// group's leader is another node, and the part was not forwarded there
// (no leader known, no Forwarder, the leader records no address the
// Forwarder reaches, or the call was forwarded once already).
type NotLeaderError struct {
	Leader model.Member // the leader's record; empty when unknown
	Known  bool         // whether a leader is known
}

// Error says who leads.
func (e *NotLeaderError) Error() string {
	if e.Known && e.Leader.HTTPAddr != "" {
		return "this node is not the leader; call the leader, whose HTTP API is at " + e.Leader.HTTPAddr
	}
	return "no leader is known yet (an election is in progress, or this node is cut off); retry shortly"
}

// Unwrap returns model.ErrNotLeader.
func (e *NotLeaderError) Unwrap() error { return model.ErrNotLeader }

// GroupError is group Group's answer to its part of a request split over
// many groups.
type GroupError struct {
	Group int
	Err   error
}

// Error names the group.
func (e *GroupError) Error() string { return fmt.Sprintf("group %d: %v", e.Group, e.Err) }

// Unwrap returns the group's answer.
func (e *GroupError) Unwrap() error { return e.Err }

// ErrNoForward is what a Forwarder returns, having sent nothing, when it
// cannot pass a part on (the call was forwarded once already, the leader
// records no address it reaches); the router then answers NotLeaderError.
var ErrNoForward = errors.New("not forwarded")

// Package service is the serving core every front end (the gRPC API
// today; the HTTP API and other protocols plug in the same way) calls
// once it has decoded and validated a request: one [Backend] per Raft
// group, with no optional capabilities, and a [Router] that finds the
// group of each part of a request (the group of a message's topic, the
// group a message id or receipt names), serves a part of a group this
// node leads on that group's backend, forwards a part of another group
// to that group's leader through a [Forwarder] (the wire between nodes),
// and merges the answers in the request's order. A request over many
// groups is atomic per group only: when a part fails, the parts that
// succeeded stay done, and the answer is the failed part's error, naming
// its group ([GroupError]).
//
// It speaks plain Go types of package wheel and context.Context, and
// classifies its refusals with the wheel errors (errors.Is with
// wheel.ErrInvalid, wheel.ErrUnavailable, wheel.ErrNotLeader…): a front
// end maps them to its own statuses.
package service

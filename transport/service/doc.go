// Package service is the serving core every front end (the HTTP, gRPC
// and beanstalkd APIs) calls
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
// It also holds the validation every front end shares (validate.go: each
// refusal names the field, the index within a batch and the limit) and
// the limits (limits.go). It speaks plain Go types of package wheel and
// context.Context, and classifies its refusals with the wheel errors
// (errors.Is with model.ErrInvalid, model.ErrUnavailable,
// model.ErrNotLeader…): a front end maps them to its own statuses.
//
// Each front end gives the router the wire it forwards over: the gRPC API
// forwards parts over gRPC, to the address the leader's member record
// holds; the HTTP API over HTTP, which every node serves (gRPC may be off).
// Authentication stays with the front ends, since each protocol carries
// its credentials its own way (a bearer header, call metadata, none): a
// front end calls the service once it has authorized the caller.
package service

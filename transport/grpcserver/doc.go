// Package grpcserver serves the gRPC API of delaywheel (the Delaywheel
// service of transport/api/delaywheel.proto) on the same backends as the
// HTTP server, through the service core (package transport/service: its
// validation, its router over the groups) with the HTTP API's limits,
// errors and token: it owns only what is particular to gRPC — the mapping
// of the generated types, of answers to status codes, the interceptor that
// checks the token, the passing on of a follower's Subscribe stream to
// the leader over gRPC (forward.go), grpc.health.v1 and reflection.
//
// # Status codes
//
// An HTTP answer's status maps to a code: 400 INVALID_ARGUMENT, 401
// UNAUTHENTICATED, 404 NOT_FOUND, 409 FAILED_PRECONDITION, 413 and 429
// RESOURCE_EXHAUSTED (429, which may be retried, with a RetryInfo), 503
// UNAVAILABLE (with a RetryInfo), 500 INTERNAL. Every error carries an
// ErrorInfo whose reason is the HTTP API's code ("too_large", "overloaded").
//
// # Followers
//
// Subscribe streams a topic's deliveries on the backend's Stream, as the
// HTTP stream does, and settles the acks and nacks sent up the stream:
// each frees its room in the stream's window as it is read, and is then
// proposed, one call at a time, batched with those read meanwhile. A
// follower that finds the leader's gRPC API passes the stream on to it,
// requests up and deliveries down (one that cannot refuses NOT_LEADER),
// and a stream ends NOT_LEADER when leadership moves; the Go client then
// subscribes again.
//
// Calls that change state, and Reserve, are answered by the leader. A
// follower's service router forwards them as the HTTP API's does, with the
// one Forwarder of every front end (transport.NewForwarder): each part,
// validated, to its leader's HTTP API, which every node serves and whose
// address the leader's replicated member record holds, with the caller's
// authorization and marked forwarded, so that a node that is not the
// leader any more answers instead of forwarding again (a gRPC call marked
// ForwardedKey is not forwarded either). When it cannot forward (no
// leader known, a call already forwarded, Config.Forward off) it answers
// UNAVAILABLE with an ErrorInfo of reason NOT_LEADER whose metadata gives
// the leader's HTTP address (leader_http_addr) when one is known; the Go
// client then moves on to the next gRPC address it was given. Reads (Get, Topics,
// DeadLetters, Wheel, Slot, Cluster) are answered by any node from its own
// state, as over HTTP.
//
// # Groups
//
// A node of many Raft groups (New's groups, --groups N) is served
// as the HTTP API serves it, by the service's router. A call about a topic (Reserve,
// Subscribe, Cancel by key, DeadLetters, Redrive) is answered in the
// topic's group, a call about a message id (Get, Cancel, Reschedule) in
// the group the id names (an id of a group the cluster does not have is
// INVALID_ARGUMENT naming id and the range), Wheel and Slot in the group
// their request names (default 0). "The leader" above is that group's: a
// follower of the group forwards to the group's leader. An Enqueue whose topics
// are of many groups is validated whole, then split by group; likewise
// Ack, Nack, Touch and Bury by the groups of their receipts; each part is
// answered in its group (forwarded when this node does not lead it), and
// the results come back in the request's order. A split call is atomic
// per group only: when a part fails, the parts that succeeded stay done
// and the answer is the failed part's error, naming its group. Topics
// lists every group's topics, Cluster every group (with Config.Cluster
// set, as the node sets it), and the health service serves while every
// group is ready. A Subscribe stream is its topic's group's: only that
// group's leader serves it, and it settles receipts of that group only.
//
// # Limits
//
// The HTTP API's limits apply as they are, with one addition: a call's
// message is at most Limits.MaxRequestBytes (larger ones are refused by
// gRPC itself with RESOURCE_EXHAUSTED). Long-polls (Reserve with wait_ms)
// and Subscribe streams take their slots from the pool the node's HTTP API
// takes its own from (transport.Config.Slots), so Limits.MaxWaiters and
// Limits.MaxStreams bound the node, not each API.
package grpcserver

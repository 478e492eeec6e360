// Package transport owns the HTTP API of api/API.md: routing, authentication,
// strict decoding of requests (their validation is package
// transport/service's, which every API shares), the mapping of errors to
// status codes, leader forwarding (every write is decoded once and
// served in its group, through the service's router or service.Call,
// which forward a part of a group led elsewhere to its leader's HTTP API,
// parts.go: the one Forwarder of every front end, NewForwarder; a
// follower reverse-proxies only a stream, which stays open, forward.go),
// the long-poll limit, the cluster view (the
// leader's, which it assembles by asking each member; cluster.go), and the
// health, readiness and metrics endpoints (readiness is what the node
// knows by itself: a leader, and that it has caught up; readyz.go). A node
// removed from its cluster
// refuses every request but /healthz.
//
// It talks to the rest of the server only through the [Backend] interface,
// which the Raft node implements; it must not know about Raft, Pebble or
// segment files. The JSON wire types live in package transport/api and the Go
// client in transport/client. Tests run the API against real nodes started
// by package transport/transporttest, which only tests import; every test
// server of this package validates each request and answer against the
// OpenAPI document (transport/api/openapi.json, served open at GET
// /v1/openapi.json) with libopenapi-validator, a test-only dependency, and
// a test fails when a route the server registers is missing from the
// document (openapi_test.go, openapi_routes_test.go). The gRPC API
// (package transport/grpcserver) validates with package transport/service
// too, and maps the same errors, so that both APIs answer a request alike.
//
// Every JSON body is decoded by one strict decoder (decode.go, on
// github.com/go-json-experiment/json). The JSON enqueue, the call producers
// make most, decodes its common shape with a decoder of its own
// (fastjson.go) and leaves anything else, and every error, to it; it
// writes its answer by hand.
//
// # Answers
//
// Requests are decoded strictly (unknown fields, names in another case, a
// name given twice at any depth, a string that is not valid UTF-8,
// trailing data and malformed JSON are 400 invalid_argument) and validated
// whole before the backend is called, so a 4xx never changes anything.
// Messages name the field as the API does, with the index within the batch
// and the limit, for example
// "messages[3].delay_ms: must be between 0 and 315360000000 (10 years), got -1"
// or "messages[0].headers[\"X-A\"]: given more than once". A message
// header must be sendable as an HTTP header (api.CheckHeader), on every
// API. Answers are JSON without HTML escapes.
//
// Choices beyond the API's reference:
//   - A list over its limit (more than [Limits].MaxBatch messages, receipts
//     or ids), a body over MaxBodyBytes and a request over MaxRequestBytes are
//     413 too_large; an empty list is 400.
//   - A malformed message id in a path is 400 naming id, and a well-formed
//     id of no pending message is 404; a malformed receipt or id in a body
//     is 400 naming receipts[i] or ids[i].
//   - A slot outside 0..7199 is 404. An invalid topic in a path is 400.
//   - Reserve and redrive accept an empty body (all defaults); reschedule
//     needs exactly one of delay_ms and deliver_at_ms.
//   - A known path called with another method is 405 method_not_allowed with
//     an Allow header; an unknown path is 404. Both use the error body.
//   - A long-poll (wait_ms > 0) past [Limits].MaxWaiters is 429 overloaded.
//   - A backend timeout is 503 unavailable; a client that went away is
//     logged at Debug, not as an error.
//
// # Push delivery
//
// A stream (stream.go) is an NDJSON answer that stays open: the handler
// opens a [model.Consumer] through [Backend].Stream, the one capability every
// push transport shares, writes each batch of deliveries and flushes it,
// and writes an empty line after [Config].StreamKeepalive of silence. The
// client going away, the node shutting down or the stream ending
// (leadership lost) ends the answer; closing the model.Consumer releases its
// unsettled deliveries. More than [Limits].MaxStreams streams on one node
// is 429. On a follower the stream is reverse-proxied to the leader;
// the proxy flushes each chunk, and ends when the follower sees
// another leader. Webhook configs (webhook.go) are validated here, host
// included (--webhook-allow, [Config].WebhookAllow), and stored through
// the backend.
//
// # Groups
//
// A server of more than one group (NewServer's groups, --groups N) serves
// one group per request (groups.go): the group of the path's
// topic, the group the path's message id names, or the one ?group= names
// (the wheel's views and backups: default 0; out of range: 400 naming
// group). A message route is served by the service's router (routed, in
// groups.go): in the group the path or ?group= names, or, for a batch and
// receipts, split by topic and by id, each part on its group's backend
// when this node leads the group, else at the group's leader as the same
// route with ?group=g (parts.go); an error of a split request names the
// part's group. Node additions and removals go to every group
// (groupspan.go), and a schedule to the group of its topic. Webhook,
// member and schedule writes are served in their group as a part is
// (inGroup); a stream is passed on whole to its group's leader, keeping
// its path and query so that the leader picks the same group. Reads (topics,
// schedules, the cluster view's groups) merge each group's local answer,
// and /readyz is ready when every group is. A batch that spans groups is
// atomic per group only. A backend of one group is served exactly as
// before.
package transport

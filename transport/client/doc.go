// Package client is the Go client of the delaywheel HTTP API (transport/api/API.md). It
// speaks the wire types of package transport/api and turns every non-2xx
// answer into an *Error, with the API's code, message and Retry-After.
//
// It owns nothing but the HTTP calls: no retries, no connection to the
// server's internals. Any node of a cluster can be given as the base URL;
// the nodes forward writes and reserves to the leader themselves. Whether
// to retry after a 429, a 503 or a lost connection is the caller's choice,
// since only the caller knows whether a repeated enqueue is harmless (a
// keyed one is: the key makes it a duplicate).
//
// Enqueue sends protobuf (api.ContentTypeProto), which costs both ends far
// less than JSON; [WithJSON] switches to JSON for proxies that pass only
// JSON. The client keeps idle connections for concurrent callers rather
// than net/http's two per host, which would make a busy producer open a
// connection per request, and its connections' write buffer holds a
// typical enqueue batch with its headers, so a request leaves in one
// write. A reserve's long-poll is bounded by its context and its wait, not
// cut short by the HTTP client's Timeout.
//
// A [Subscription] (subscribe.go) is the exception to "no retries": a
// streaming consumer is only useful if it outlives leader changes, so it
// reopens its stream whenever it ends, with a growing pause while it
// cannot, and stops only on a 4xx other than 429. Its acks go out in
// batches from a few background goroutines; a failed ack batch is tried
// again a few times and then left to the lease's end (at-least-once).
// It reconnects to the node it was given, which forwards to the leader;
// give it a load-balanced address to survive that node's loss.
package client

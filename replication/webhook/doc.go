// Package webhook owns the leader's webhook sender: for every topic with
// a webhook (replicated state, command.Webhook), it consumes the topic
// through a dispatcher stream, the same hand-off, lease and receipt a
// reserve gets, and POSTs each delivery to the topic's URL, signed with
// its secret. A 2xx answer acks the delivery; any other answer, a timeout
// or a refused connection nacks it with an exponential backoff, and the
// nack of its last attempt makes it dead, as for any consumer.
//
// It lives under replication, beside dispatch, because it is leader
// work: it starts and stops with the dispatcher, reads the store's
// webhooks, and settles deliveries through the node. The stream's window
// is the webhook's max_concurrency, so at most that many requests are in
// flight and memory stays bounded however slow the endpoint; rate_per_s
// spaces the starts on the node's clock. A failover loses nothing: a
// delivery whose answer was not yet acked is redelivered by the next
// leader when its lease ends (at-least-once; Delaywheel-Id lets the
// receiver drop duplicates). Removing a webhook (or losing leadership)
// cancels the requests in flight and releases their deliveries.
package webhook

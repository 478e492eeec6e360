package model

import (
	"context"
	"time"
)

// ConsumerOptions shape a streaming consumer of one topic.
type ConsumerOptions struct {
	// MaxInflight bounds the stream's unsettled deliveries: handed out and
	// not yet acked, nacked or expired.
	MaxInflight int
	// TTR is the lease of each delivery (0: each message's own).
	TTR time.Duration
}

// Consumer is a long-lived consumer of one topic on the leader. Each of its
// deliveries is a reserve's hand-off (same lease, same receipt), settled
// through the ordinary ack, nack and touch from any connection. The HTTP
// stream and any other push transport read it the same way.
type Consumer interface {
	// Next waits for the next deliveries and returns every one handed out
	// and not yet read (at least one). It returns ctx's error when ctx
	// ends first, and ErrNotLeader (or the error that ended the stream)
	// once the stream has ended: the consumer then reconnects.
	Next(ctx context.Context) ([]Delivery, error)
	// Close ends the stream and releases its unsettled deliveries for
	// redelivery at once (their attempt counts).
	Close()
}

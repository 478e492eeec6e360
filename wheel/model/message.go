package model

// Message is a message with everything the wheel knows of it.
type Message struct {
	ID          ID
	Topic       string
	Key         string
	Body        []byte
	Headers     map[string]string
	Priority    int64
	DeliverAtMs int64 // when it is next due
	TTRMs       int64 // lease length once reserved
	MaxAttempts int32
	Attempts    int32 // deliveries so far
	EnqueuedMs  int64

	// Set while reserved.
	Receipt        uint64 // nonce of the current hand-off
	LeaseExpiresMs int64  // after this instant the receipt is stale
	LeaseMs        int64  // length of the current lease; Touch extends by it
}

// Delivery is one hand-off of a message to a consumer.
type Delivery struct {
	Message
	Attempt int32 // 1 for the first delivery
	Receipt Receipt
}

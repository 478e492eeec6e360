package transport

// Slots are a node's long-poll and stream slots: every API of the node
// (HTTP, gRPC) takes them from the one pool, so that Limits.MaxWaiters and
// Limits.MaxStreams bound the node, whatever the callers speak.
type Slots struct {
	waiters chan struct{} // one token per running long-poll
	streams chan struct{} // one token per open stream
}

// NewSlots returns the pools of lim; its zero fields take their defaults.
func NewSlots(lim Limits) *Slots {
	lim = lim.WithDefaults()
	return &Slots{waiters: make(chan struct{}, lim.MaxWaiters), streams: make(chan struct{}, lim.MaxStreams)}
}

// AcquireWaiter takes a long-poll slot, or answers overloaded (429,
// RESOURCE_EXHAUSTED) when all are taken. release gives it back.
func (p *Slots) AcquireWaiter() (release func(), err error) { return acquire(p.waiters, Overloaded) }

// AcquireStream takes a stream slot, or answers overloaded when all are
// taken. release gives it back.
func (p *Slots) AcquireStream() (release func(), err error) { return acquire(p.streams, StreamsFull) }

// acquire takes a slot of pool, or answers full(its size) when all are
// taken.
func acquire(pool chan struct{}, full func(limit int) *Error) (release func(), err error) {
	select {
	case pool <- struct{}{}:
		return func() { <-pool }, nil
	default:
		return nil, full(cap(pool))
	}
}

// Overloaded is the 429 answer of a node whose long-poll slots are all
// taken; limit is their number.
func Overloaded(limit int) *Error {
	return overloaded("too many consumers are long-polling this node (limit %d); retry later, use a shorter wait_ms, or spread consumers over the nodes", limit)
}

// StreamsFull is the 429 answer of a node whose stream slots are all
// taken; limit is their number.
func StreamsFull(limit int) *Error {
	return overloaded("too many streams are open on this node (limit %d); retry later or spread consumers over the nodes", limit)
}

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
	lim = lim.withDefaults()
	return &Slots{waiters: make(chan struct{}, lim.MaxWaiters), streams: make(chan struct{}, lim.MaxStreams)}
}

// AcquireWaiter takes a long-poll slot, or answers overloaded (429,
// RESOURCE_EXHAUSTED) when all are taken. release gives it back.
func (p *Slots) AcquireWaiter() (release func(), err error) {
	select {
	case p.waiters <- struct{}{}:
		return func() { <-p.waiters }, nil
	default:
		return nil, Overloaded(cap(p.waiters))
	}
}

// AcquireStream takes a stream slot, or answers overloaded when all are
// taken. release gives it back.
func (p *Slots) AcquireStream() (release func(), err error) {
	select {
	case p.streams <- struct{}{}:
		return func() { <-p.streams }, nil
	default:
		return nil, StreamsFull(cap(p.streams))
	}
}

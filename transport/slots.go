package transport

import (
	"context"
	"time"

	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel/model"
)

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

// Reserve leases up to n due messages of topic through rt (ttrMs 0: each
// message's own time-to-run), as every API's reserve does: a long-poll
// (waitMs > 0) takes a long-poll slot where it waits, on the leader and
// not on a follower that forwards it, and ends when drain does (the
// server shuts down); one the shutdown cut short (the backend may answer
// it empty or with the context's error) is answered 503, which sends its
// client to another node.
func (p *Slots) Reserve(ctx, drain context.Context, rt *service.Router, topic string, n int, waitMs, ttrMs int64) ([]model.Delivery, error) {
	if waitMs > 0 && rt.Leads(rt.GroupOfTopic(topic)) {
		release, err := p.AcquireWaiter()
		if err != nil {
			return nil, err
		}
		defer release()
	}
	caller := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(drain, cancel)()
	ds, err := rt.Reserve(ctx, topic, n, time.Duration(waitMs)*time.Millisecond, time.Duration(ttrMs)*time.Millisecond)
	if (err != nil || len(ds) == 0) && drain.Err() != nil && caller.Err() == nil {
		return nil, unavailable("this node is shutting down; retry on another node")
	}
	return ds, err
}

package beanstalkd

import (
	"context"
	"errors"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// ErrNotSent wraps a Backend's error when the call surely reached no
// leader (none is known, or its address refused the connection): the
// server then asks again, until its command timeout, so that a
// connection outlives a change of leader without a write made twice.
var ErrNotSent = errors.New("not sent to a leader")

// Acked is one receipt's outcome of Backend.AckEach.
type Acked struct {
	// Done tells whether the ack took effect; false with a nil Err: the
	// receipt no longer held its message.
	Done bool
	// Err is the receipt's own failure, wrapped in ErrNotSent when its
	// ack surely changed nothing. Done is then false.
	Err error
}

// Backend is what the server needs of the node. Every call may return the
// wheel errors (ErrNotFound, ErrConflict, ErrInvalid, ErrTooLarge,
// ErrOverloaded, ErrUnavailable, ErrNotLeader), wrapped in ErrNotSent
// when the call surely changed nothing, and must route by itself: a
// topic's calls and an id's calls go to the leader of their group.
type Backend interface {
	// Put enqueues messages, all or none, and returns their ids, in
	// order, once they are committed.
	Put(ctx context.Context, ms []command.NewMessage) ([]model.ID, error)
	// Reserve hands out up to max due messages of topic, next first,
	// waiting up to wait for the first.
	Reserve(ctx context.Context, topic string, max int, wait time.Duration) ([]model.Delivery, error)
	// ReserveID leases one ready, delayed or dead message by its id for
	// its own time-to-run, whatever its due time (a dead one is redriven
	// first); model.ErrNotFound when it is reserved or unknown.
	ReserveID(ctx context.Context, id model.ID) (model.Delivery, error)
	// AckEach finishes reserved messages, all of one group, and tells of
	// each its outcome: res[i] is rs[i]'s. On the group's leader they are
	// one log entry, whose failure is err; forwarded to another node, each
	// is its own ack, whose failure is its own Err.
	AckEach(ctx context.Context, rs []model.Receipt) (res []Acked, err error)
	// Nack returns a reserved message to delayed, due delayMs from now.
	Nack(ctx context.Context, r model.Receipt, delayMs int64) (done bool, err error)
	// Touch extends a reserved message's lease by its time-to-run.
	Touch(ctx context.Context, r model.Receipt) (done bool, err error)
	// Bury moves a reserved message to its topic's dead letters.
	Bury(ctx context.Context, r model.Receipt) (done bool, err error)
	// Get returns a message in any state.
	Get(ctx context.Context, id model.ID) (wheel.View, error)
	// Cancel removes a delayed, ready or dead message.
	Cancel(ctx context.Context, id model.ID) error
	// Reschedule makes a delayed message due at deliverAtMs.
	Reschedule(ctx context.Context, id model.ID, deliverAtMs int64) error
	// Redrive moves dead messages of topic back to ready and returns how
	// many moved.
	Redrive(ctx context.Context, topic string, ids []model.ID) (int, error)
	// Dead lists up to limit dead messages of topic, oldest first.
	Dead(ctx context.Context, topic string, limit int) ([]wheel.View, error)
	// Ready lists up to limit ready messages of topic, next first.
	Ready(ctx context.Context, topic string, limit int) ([]wheel.View, error)
	// Delayed returns the delayed message of topic that is due first;
	// ok is false when there is none.
	Delayed(ctx context.Context, topic string) (v wheel.View, ok bool, err error)
	// Topics returns the per-state counts of every topic.
	Topics(ctx context.Context) ([]wheel.TopicCounts, error)
}

package service

import (
	"context"
	"io"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Backend is one Raft group of the node, as the front ends use it. Every
// method may return the wheel errors (ErrNotFound, ErrConflict,
// ErrInvalid, ErrTooLarge, ErrOverloaded, ErrUnavailable, ErrNotLeader).
// The write methods and Reserve are called only while Leader says this
// node leads.
type Backend interface {
	// LeaderHTTP returns the leader's HTTP address ("host:port"), whether
	// this node is the leader, and whether a leader is known.
	LeaderHTTP() (addr string, isLeader, known bool)
	// Leader returns the leader's member record (its HTTP address as
	// LeaderHTTP's; its gRPC address, empty when it recorded none),
	// whether this node is the leader, and whether a leader is known.
	Leader() (m model.Member, isLeader, known bool)
	// Ready returns nil when the node should take client traffic (/readyz
	// answers 200): it knows a leader, has caught up once since it
	// started and does not trail the leader by more than its bound; or an
	// error saying why not.
	Ready() error
	// Removed returns an error saying so while the node is not a member of
	// its cluster; the front ends then refuse every request.
	Removed() error
	// Indexes returns the highest log index the node has applied and the
	// commit index it knows of (a follower's may lag the leader's).
	Indexes() (applied, commit uint64)
	// LeaderCommit returns the highest commit index this node knows the
	// leader to have: its own while it leads, else the one the leader
	// last sent, or its own where that is higher.
	LeaderCommit() uint64
	// Settled waits until this node has applied every entry it answered
	// ahead of its apply (enqueues answered at commit, leases handed out
	// before their entry) and returns its applied index.
	Settled(ctx context.Context) (uint64, error)
	// ReadAfter makes this node's reads wait until it has applied index
	// (never less than an index given before): a follower reads the
	// writes it forwarded.
	ReadAfter(index uint64)

	// Enqueue schedules messages whose DeliverAtMs is already absolute.
	Enqueue(ctx context.Context, msgs []command.NewMessage) ([]wheel.Enqueued, error)
	// Get returns a pending message.
	Get(ctx context.Context, id model.ID) (wheel.View, error)
	// GetByKey returns the pending message of topic that holds key.
	GetByKey(ctx context.Context, topic, key string) (wheel.View, error)
	// Cancel removes a delayed or ready message by ID, or by (Topic, Key)
	// when Topic != "", and returns its ID.
	Cancel(ctx context.Context, c command.Cancel) (model.ID, error)
	// Reschedule moves a delayed or ready message and returns its new due time.
	Reschedule(ctx context.Context, id model.ID, deliverAtMs int64) (int64, error)
	// Reserve hands out up to max due messages of topic, waiting up to wait
	// for the first one. A ttr of 0 means each message's own time-to-run.
	Reserve(ctx context.Context, topic string, max int, wait time.Duration, ttr time.Duration) ([]model.Delivery, error)
	// ReserveID leases one ready, delayed or dead message by its id for
	// ttr (0: its own time-to-run), whatever its due time (a dead one is
	// redriven first); model.ErrNotFound when it is reserved, out of
	// attempts, being handed out, or unknown.
	ReserveID(ctx context.Context, id model.ID, ttr time.Duration) (model.Delivery, error)
	// Stream opens a streaming consumer of topic on the leader: a
	// long-lived reserve that hands out each due message the moment it is
	// due, holding at most opt.MaxInflight unsettled deliveries. Closing
	// it releases its unsettled deliveries; it ends by itself when
	// leadership is lost. Every push front end serves one.
	Stream(ctx context.Context, topic string, opt model.ConsumerOptions) (model.Consumer, error)
	// Ack finishes reserved messages.
	Ack(ctx context.Context, rs []model.Receipt) (command.Counted, error)
	// AckEach finishes reserved messages as one log entry holding one ack
	// per receipt, and tells of each whether it took effect.
	AckEach(ctx context.Context, rs []model.Receipt) ([]bool, error)
	// Nack returns reserved messages to delayed, due delayMs from now.
	Nack(ctx context.Context, rs []model.Receipt, delayMs int64) (command.Counted, error)
	// Touch extends leases by their time-to-run.
	Touch(ctx context.Context, rs []model.Receipt) (command.Counted, error)
	// DeadLetter moves reserved messages to their topics' dead letters.
	DeadLetter(ctx context.Context, rs []model.Receipt) (command.Counted, error)
	// Topics returns the per-state counts of every topic.
	Topics(ctx context.Context) ([]wheel.TopicCounts, error)
	// Dead lists up to limit dead messages of topic.
	Dead(ctx context.Context, topic string, limit int) ([]wheel.View, error)
	// Redrive moves dead messages back to ready (all of them when ids is
	// empty) and returns how many moved.
	Redrive(ctx context.Context, topic string, ids []model.ID) (int, error)
	// Wheel describes the timing wheel.
	Wheel(ctx context.Context) (wheel.Info, error)
	// Slot describes one slot and, when records is set, its records.
	Slot(ctx context.Context, slot int, records bool) (wheel.SlotInfo, error)
	// Overflow groups the overflow into buckets of bucketMs (a positive
	// multiple of wheel.OverflowHourMs) and returns the first limit
	// non-empty ones.
	Overflow(ctx context.Context, bucketMs int64, limit int) (wheel.OverflowHistogram, error)
	// Cluster returns this node's own view of the cluster: its own state
	// and indexes, and, on the leader, which members its heartbeats reach.
	Cluster(ctx context.Context) (api.Cluster, error)
	// AddNode adds a voter.
	AddNode(ctx context.Context, n model.Member) error
	// RemoveNode removes a member. Before the removal it calls confirm
	// (when set) with the index of the entry the member must hold to learn
	// of it; confirm returns once the member holds it, or an error.
	RemoveNode(ctx context.Context, id string, confirm func(ctx context.Context, index uint64) error) error
	// Backup writes a consistent copy of the node's state to w and returns
	// the log index it covers.
	Backup(ctx context.Context, w io.Writer) (uint64, error)

	// SetWebhook sets or replaces a topic's webhook.
	SetWebhook(ctx context.Context, w command.Webhook) error
	// Webhook returns a topic's webhook (model.ErrNotFound: none).
	Webhook(ctx context.Context, topic string) (command.Webhook, error)
	// DeleteWebhook removes a topic's webhook (model.ErrNotFound: none).
	DeleteWebhook(ctx context.Context, topic string) error

	// SetSchedule creates or replaces a schedule and returns it as stored.
	SetSchedule(ctx context.Context, spec command.ScheduleSpec) (wheel.ScheduleInfo, error)
	// DeleteSchedule removes a schedule; occurrences already enqueued stay.
	DeleteSchedule(ctx context.Context, name string) error
	// Schedule returns a stored schedule.
	Schedule(ctx context.Context, name string) (wheel.ScheduleInfo, error)
	// Schedules returns up to limit schedules whose names sort after after.
	Schedules(ctx context.Context, after string, limit int) ([]wheel.ScheduleInfo, error)
}

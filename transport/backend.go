package transport

import (
	"context"
	"io"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel"
)

// Backend is what the HTTP server needs from the node. Every method may
// return the wheel errors (ErrNotFound, ErrConflict, ErrInvalid, ErrTooLarge,
// ErrOverloaded, ErrUnavailable, ErrNotLeader); the server maps them to
// status codes. The server validates requests before calling, and calls the
// write methods and Reserve only while LeaderHTTP says this node leads.
type Backend interface {
	// LeaderHTTP returns the leader's HTTP address ("host:port"), whether
	// this node is the leader, and whether a leader is known.
	LeaderHTTP() (addr string, isLeader, known bool)
	// Leader returns the leader's member record (its HTTP address as
	// LeaderHTTP's; its gRPC address, empty when it recorded none),
	// whether this node is the leader, and whether a leader is known.
	Leader() (m wheel.Node, isLeader, known bool)
	// Ready returns nil when the node can serve as far as it can tell on
	// its own (it knows a leader; leading, it runs its dispatcher), or an
	// error saying why not. /readyz also checks a follower's applied index
	// against the leader's commit index.
	Ready() error
	// Removed returns an error saying so while the node is not a member of
	// its cluster; the server then refuses every request but /healthz.
	Removed() error
	// Indexes returns the highest log index the node has applied and the
	// commit index it knows of (a follower's may lag the leader's).
	Indexes() (applied, commit uint64)

	// Enqueue schedules messages whose DeliverAtMs is already absolute.
	Enqueue(ctx context.Context, msgs []wheel.NewMessage) ([]wheel.Enqueued, error)
	// Get returns a pending message.
	Get(ctx context.Context, id wheel.ID) (wheel.View, error)
	// Cancel removes a delayed or ready message by ID, or by (Topic, Key)
	// when Topic != "", and returns its ID.
	Cancel(ctx context.Context, c wheel.Cancel) (wheel.ID, error)
	// Reschedule moves a delayed or ready message and returns its new due time.
	Reschedule(ctx context.Context, id wheel.ID, deliverAtMs int64) (int64, error)
	// Reserve hands out up to max due messages of topic, waiting up to wait
	// for the first one. A ttr of 0 means each message's own time-to-run.
	Reserve(ctx context.Context, topic string, max int, wait time.Duration, ttr time.Duration) ([]wheel.Delivery, error)
	// Stream opens a streaming consumer of topic on the leader: a
	// long-lived reserve that hands out each due message the moment it is
	// due, holding at most opt.MaxInflight unsettled deliveries. The
	// server closes it when its client goes away, which releases its
	// unsettled deliveries; it ends by itself when leadership is lost.
	// Every push transport (HTTP NDJSON, RPC streams) serves one.
	Stream(ctx context.Context, topic string, opt wheel.StreamOptions) (wheel.Stream, error)
	// Ack finishes reserved messages.
	Ack(ctx context.Context, rs []wheel.Receipt) (wheel.Counted, error)
	// Nack returns reserved messages to delayed, due delayMs from now.
	Nack(ctx context.Context, rs []wheel.Receipt, delayMs int64) (wheel.Counted, error)
	// Touch extends leases by their time-to-run.
	Touch(ctx context.Context, rs []wheel.Receipt) (wheel.Counted, error)
	// Topics returns the per-state counts of every topic.
	Topics(ctx context.Context) ([]wheel.TopicCounts, error)
	// Dead lists up to limit dead messages of topic.
	Dead(ctx context.Context, topic string, limit int) ([]wheel.View, error)
	// Redrive moves dead messages back to ready (all of them when ids is
	// empty) and returns how many moved.
	Redrive(ctx context.Context, topic string, ids []wheel.ID) (int, error)
	// Wheel describes the timing wheel.
	Wheel(ctx context.Context) (wheel.WheelInfo, error)
	// Slot describes one slot and, when records is set, its records.
	Slot(ctx context.Context, slot int, records bool) (wheel.SlotInfo, error)
	// Cluster returns this node's own view of the cluster: its own state
	// and indexes, and, on the leader, which members its heartbeats reach.
	// The server adds what the other members say of themselves.
	Cluster(ctx context.Context) (api.Cluster, error)
	// AddNode adds a voter.
	AddNode(ctx context.Context, n wheel.Node) error
	// RemoveNode removes a member. Before the removal it calls confirm
	// (when set) with the index of the entry the member must hold to learn
	// of it; confirm returns once the member holds it, or an error.
	RemoveNode(ctx context.Context, id string, confirm func(ctx context.Context, index uint64) error) error
}

// Backuper is implemented by backends that can stream a consistent backup
// of their state (GET /v1/backup).
type Backuper interface {
	// Backup writes a consistent copy of the node's state to w and returns
	// the log index it covers.
	Backup(ctx context.Context, w io.Writer) (uint64, error)
}

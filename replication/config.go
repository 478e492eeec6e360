package replication

import (
	"cmp"
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/replication/raftlog"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Config configures a node.
type Config struct {
	ID       string
	DataDir  string
	RaftAddr string // listen and advertised Raft address
	HTTPAddr string // advertised client API address, replicated as metadata
	// GRPCAddr is the advertised gRPC API address, replicated next to
	// HTTPAddr so that followers forward gRPC calls to the leader's. Empty:
	// the node serves no gRPC.
	GRPCAddr string

	// InitialCluster lists every member of a new cluster (id → Raft address).
	// Empty with no Join: a single-node cluster of this node.
	InitialCluster []model.Member
	// Join is the HTTP address of a member to join as a voter. The caller
	// (the server command) performs the join; the node only starts unbootstrapped.
	Join string

	Logger *slog.Logger
	Clock  wheel.Clock

	// Raft tuning. Here and below, a zero value takes DefaultConfig's.
	HeartbeatTimeout  time.Duration
	ElectionTimeout   time.Duration
	SnapshotThreshold uint64        // entries between snapshots
	SnapshotInterval  time.Duration // how often the threshold is checked
	TrailingLogs      uint64        // entries kept after a snapshot
	// ApplyTimeout bounds how long a proposal waits to be committed.
	ApplyTimeout time.Duration
	// LogSegmentBytes is the size of the Raft log's segment files
	// (raftlog.MinSegmentBytes to raftlog.MaxSegmentBytes). One spare
	// segment is kept besides the log's own.
	LogSegmentBytes int
	// CommitLinger, when positive, is the least time between the starts of
	// two of the Raft log's writes: proposals arriving meanwhile share one
	// write and one fsync, for up to that much more latency on each. Zero
	// (the default): every write starts at once.
	CommitLinger time.Duration

	// Wheel timing.
	ExpireGrace time.Duration // how long after a second ends it expires
	Preload     time.Duration // how far ahead slots are loaded into the heap
	// RedeliveryBackoff is added to a lease's expiry before an unacked message
	// comes back; it grows with attempts up to 60 s. Negative: none.
	RedeliveryBackoff time.Duration
	// WebhookAllow, when set, is asked before each webhook request whether
	// its host may be called (--webhook-allow); a refused host is a failed
	// attempt. It holds when the list changed since the webhook was stored.
	WebhookAllow func(host string) error

	// Limits.
	MaxTopics       int // distinct topics
	MaxPendingApply int // proposals in flight before enqueues answer 429
	MaxLeaseBatch   int // hand-offs per Lease entry
	// ReadyMaxLag is how many log entries a node that has caught up may
	// trail the leader's commit index by and stay ready (Ready).
	ReadyMaxLag uint64

	// RaftAdvertise is the Raft address peers dial (default RaftAddr), for a
	// node behind NAT or a proxy.
	RaftAdvertise string
	// RaftServerTLS and RaftClientTLS, both set, make Raft traffic mutual TLS.
	RaftServerTLS, RaftClientTLS *tls.Config
	// Store options (Pebble cache sizes…); FS and Logger are set by the node.
	Store wheel.Options

	// stream, set by OpenGroups, is the group's layer on the node's Raft
	// stream multiplexer (mux.go); nil: the node listens on RaftAddr
	// itself. Closing the node closes the layer, not the shared listener.
	stream raft.StreamLayer
	// Balance is the leadership balancer's timing over OpenGroups' groups
	// (balance.go); a zero field takes its default.
	Balance BalanceTiming

	// snapshotStall, set only by tests, replaces snapshotStall (stall.go).
	snapshotStall time.Duration
	// beforeApply, set only by tests, runs on Raft's FSM goroutine before
	// each batch of committed entries is applied, after the commit
	// notification: a test holds the state machine with it.
	beforeApply func([]*raft.Log)
}

// advertised is the Raft address peers use for this node.
func (c *Config) advertised() string {
	if c.RaftAdvertise != "" {
		return c.RaftAdvertise
	}
	return c.RaftAddr
}

// Self is the node's member record: its id and advertised addresses.
func (c *Config) Self() model.Member {
	return model.Member{ID: c.ID, RaftAddr: c.advertised(), HTTPAddr: c.HTTPAddr, GRPCAddr: c.GRPCAddr}
}

// DefaultConfig returns the default of every tuning field: Open takes it
// for a field left zero, and the server's flags show it.
func DefaultConfig() Config {
	return Config{
		HeartbeatTimeout:  500 * time.Millisecond,
		ElectionTimeout:   500 * time.Millisecond,
		SnapshotThreshold: 4096,
		SnapshotInterval:  10 * time.Second,
		TrailingLogs:      4096,
		ApplyTimeout:      10 * time.Second,
		LogSegmentBytes:   raftlog.DefaultSegmentBytes,
		ExpireGrace:       500 * time.Millisecond,
		Preload:           time.Second,
		RedeliveryBackoff: time.Second,
		MaxTopics:         10000,
		MaxPendingApply:   4096,
		MaxLeaseBatch:     1024,
		ReadyMaxLag:       DefaultReadyMaxLag,
	}
}

// setDefaults fills the fields left zero from DefaultConfig.
func (c *Config) setDefaults() {
	d := DefaultConfig()
	c.HeartbeatTimeout = cmp.Or(c.HeartbeatTimeout, d.HeartbeatTimeout)
	c.ElectionTimeout = cmp.Or(c.ElectionTimeout, d.ElectionTimeout)
	c.SnapshotThreshold = cmp.Or(c.SnapshotThreshold, d.SnapshotThreshold)
	c.SnapshotInterval = cmp.Or(c.SnapshotInterval, d.SnapshotInterval)
	c.TrailingLogs = cmp.Or(c.TrailingLogs, d.TrailingLogs)
	c.ApplyTimeout = cmp.Or(c.ApplyTimeout, d.ApplyTimeout)
	c.LogSegmentBytes = cmp.Or(c.LogSegmentBytes, d.LogSegmentBytes)
	c.ExpireGrace = cmp.Or(c.ExpireGrace, d.ExpireGrace)
	c.Preload = cmp.Or(c.Preload, d.Preload)
	c.RedeliveryBackoff = cmp.Or(c.RedeliveryBackoff, d.RedeliveryBackoff)
	c.RedeliveryBackoff = max(c.RedeliveryBackoff, 0)
	c.MaxTopics = cmp.Or(c.MaxTopics, d.MaxTopics)
	c.MaxPendingApply = cmp.Or(c.MaxPendingApply, d.MaxPendingApply)
	c.MaxLeaseBatch = cmp.Or(c.MaxLeaseBatch, d.MaxLeaseBatch)
	c.ReadyMaxLag = cmp.Or(c.ReadyMaxLag, d.ReadyMaxLag)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = wheel.SystemClock{}
	}
}

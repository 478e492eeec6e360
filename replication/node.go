package replication

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/replication/dispatch"
	"github.com/delaywheel/delaywheel/replication/raftlog"
	"github.com/delaywheel/delaywheel/replication/webhook"
	"github.com/delaywheel/delaywheel/segment"
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
	orDefault(&c.HeartbeatTimeout, d.HeartbeatTimeout)
	orDefault(&c.ElectionTimeout, d.ElectionTimeout)
	orDefault(&c.SnapshotThreshold, d.SnapshotThreshold)
	orDefault(&c.SnapshotInterval, d.SnapshotInterval)
	orDefault(&c.TrailingLogs, d.TrailingLogs)
	orDefault(&c.ApplyTimeout, d.ApplyTimeout)
	orDefault(&c.LogSegmentBytes, d.LogSegmentBytes)
	orDefault(&c.ExpireGrace, d.ExpireGrace)
	orDefault(&c.Preload, d.Preload)
	orDefault(&c.RedeliveryBackoff, d.RedeliveryBackoff)
	c.RedeliveryBackoff = max(c.RedeliveryBackoff, 0)
	orDefault(&c.MaxTopics, d.MaxTopics)
	orDefault(&c.MaxPendingApply, d.MaxPendingApply)
	orDefault(&c.MaxLeaseBatch, d.MaxLeaseBatch)
	orDefault(&c.ReadyMaxLag, d.ReadyMaxLag)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = wheel.SystemClock{}
	}
}

// orDefault sets *v to d when *v is zero.
func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Node is one replica: the Raft instance, the FSM over the wheel store, and,
// while leader, the dispatcher that hands out due messages.
type Node struct {
	cfg   Config
	log   *slog.Logger
	clock wheel.Clock
	raft  *raft.Raft
	fsm   *fsm
	trans *raft.NetworkTransport
	watch *commitWatch // trans as Raft sees it: the leader's commit index (ready.go)
	ready readiness    // (ready.go)
	guard *stallGuard  // bounds snapshot streams' stalls (stall.go)
	logs  *raftlog.Log // the log's entries, and the term and vote
	lock  io.Closer    // the data dir's lock, held while open
	ents  entries      // logs as Raft sees it

	pending   atomic.Int64 // proposals in flight
	met       *metrics
	ids       *proposalIDs   // names every proposal (commit.go)
	commits   *commitWaiters // proposals answered at commit (commit.go)
	solo      *soloVoter     // whether this node is the only voter
	peers     peerContacts   // which peers the leader's heartbeats reach (members.go)
	removed   atomic.Bool    // the latest configuration lacks this node (members.go)
	readFloor atomic.Uint64  // reads wait until this is applied (ReadAfter)
	reconf    chan struct{}  // a configuration entry was stored or dropped

	mu        sync.Mutex
	disp      *dispatch.Dispatcher            // non-nil while leader
	hooks     *webhook.Sender                 // non-nil while leader
	schedStop func()                          // ends the scheduler, while leader (schedules.go)
	lease     atomic.Pointer[leadershipLease] // this term's, while leader
	closed    bool
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// rpcTimeout bounds each Raft RPC on a hung connection (and so a shutdown
// with vanished peers); snapshot transfers scale it with their size.
const rpcTimeout = 2 * time.Second

// ErrDataDirLocked is returned by Open when another process (or another
// open Node) holds the data dir.
var ErrDataDirLocked = errors.New("data dir in use")

// Open starts a node. On a data directory that already holds a cluster's
// state it restarts with that state and ignores InitialCluster.
func Open(cfg Config) (*Node, error) {
	cfg.setDefaults()
	if cfg.ID == "" || cfg.DataDir == "" || cfg.RaftAddr == "" {
		return nil, fmt.Errorf("%w: node id, data dir and raft address are required", model.ErrInvalid)
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID), clock: cfg.Clock}
	n.peers.failing, n.peers.resumed = map[raft.ServerID]time.Time{}, map[raft.ServerID]time.Time{}
	n.met = newMetrics(n)
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	n.lock = lock
	fail := func(err error) (*Node, error) {
		n.closeLogs()
		return nil, err
	}
	raftDir := filepath.Join(cfg.DataDir, "raft")
	if err := segment.MkdirAllSync(vfs.Default, raftDir); err != nil {
		return fail(fmt.Errorf("raft dir: %w", err))
	}
	hl := raftLogger(n.log, cfg.Clock.Now)
	snaps, err := newSnapStore(raftDir, 2, n.log, hl)
	if err != nil {
		return fail(fmt.Errorf("snapshot store: %w", err))
	}
	logs, err := raftlog.Open(raftDir, raftlog.Options{SegmentBytes: cfg.LogSegmentBytes, Logger: n.log, RaftLogger: hl})
	if errors.Is(err, raftlog.ErrInvalidSize) {
		return fail(fmt.Errorf("%w: %w", model.ErrInvalid, err))
	}
	if err != nil {
		return fail(err)
	}
	n.logs = logs
	snaps.logFirst = logs.FirstIndex
	n.ids, n.commits = newProposalIDs(), newCommitWaiters()
	n.solo = &soloVoter{self: raft.ServerID(cfg.ID)}
	n.reconf = make(chan struct{}, 1)
	n.ents = entries{LogStore: logs, commits: n.commits, solo: n.solo, configured: n.configChanged}

	// Decide whether the FSM's on-disk state can be used as is. It can when
	// it opens cleanly and its applied index covers the latest snapshot
	// (otherwise Raft would resume after entries the state never saw). If
	// not, move it aside and let Raft restore the snapshot.
	sopts := cfg.Store
	sopts.Logger = n.log.With("component", "store")
	f := &fsm{dir: filepath.Join(cfg.DataDir, "fsm"), opts: sopts, log: n.log, commits: n.commits, beforeApply: cfg.beforeApply, applied: make(chan struct{})}
	latest, err := snaps.List()
	if err != nil {
		return fail(fmt.Errorf("list snapshots: %w", err))
	}
	var snapIndex uint64
	if len(latest) > 0 {
		snapIndex = latest[0].Index
	}
	st, err := wheel.Open(f.dir, sopts)
	switch {
	case err == nil && st.AppliedIndex() >= snapIndex:
	case err == nil || errors.Is(err, wheel.ErrInconsistent):
		if err == nil {
			n.log.Warn("store is behind the latest snapshot; restoring the snapshot", "applied", st.AppliedIndex(), "snapshot", snapIndex)
			st.Close()
		} else {
			n.log.Warn("store does not cover its applied index; restoring from snapshot", "err", err)
		}
		if len(latest) == 0 && err != nil {
			// Without a snapshot the log must still hold every entry from
			// the first, for an empty store to replay it.
			first, ferr := logs.FirstIndex()
			if ferr != nil {
				return fail(fmt.Errorf("%w; reading the log's first index: %w", err, ferr))
			}
			if first > 1 {
				return fail(fmt.Errorf("%w, there is no snapshot to restore and the log starts at entry %d: remove %s to rebuild this node from its peers", err, first, f.dir))
			}
			n.log.Warn("no snapshot: the store is rebuilt by replaying the log from its first entry")
		}
		aside := f.dir + ".damaged-" + time.Now().UTC().Format("20060102T150405")
		if rerr := os.Rename(f.dir, aside); rerr != nil {
			return fail(fmt.Errorf("move damaged store aside: %w", rerr))
		}
		if st, err = wheel.Open(f.dir, sopts); err != nil {
			return fail(err)
		}
		snapIndex = 0 // restore it on start
	default:
		return fail(err)
	}
	f.store = st
	f.done.Store(snapIndex) // the store covers the snapshot it was kept for
	f.onRestore = n.onRestore
	snaps.opened = f.restoring.Store
	n.fsm = f

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.HeartbeatTimeout / 2
	rc.CommitTimeout = 5 * time.Millisecond
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 512
	rc.NoSnapshotRestoreOnStart = snapIndex > 0
	rc.Logger = hl

	stream := cfg.stream
	if stream == nil {
		sl, err := newStreamLayer(cfg.RaftAddr, cfg.RaftAdvertise, cfg.RaftServerTLS, cfg.RaftClientTLS)
		if err != nil {
			st.Close()
			return fail(err)
		}
		stream = sl
	}
	guard := newStallGuard(stream, cmp.Or(cfg.snapshotStall, snapshotStall))
	snaps.guard, n.guard = guard, guard
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: guard, MaxPool: 5, Timeout: rpcTimeout, Logger: hl,
		// No pipelined replication: one AppendEntries in flight per
		// follower. hashicorp/raft's pipeline can deadlock once a follower
		// answers Success=false (a lagging or restarted follower does):
		// its decoder exits, the send loop may still issue one more send,
		// which then waits forever for a slot. The follower gets
		// heartbeats but no entries again, and Raft's shutdown hangs on
		// that goroutine. Entries still go out in batches of up to
		// MaxAppendEntries.
		MaxRPCsInFlight: 1,
	})
	// The cache holds whole entries (up to a batch of 10,000 messages each),
	// bounded by count: keep it small, it only spares recent reads. The
	// leader reads it to replicate to a follower within 64 entries of it
	// (a follower that keeps up usually is), and every node reads
	// it to apply what committed; further back, entries are read from the
	// log.
	cache, err := raft.NewLogCache(64, n.ents)
	if err != nil {
		st.Close()
		return fail(err)
	}
	existing, err := raft.HasExistingState(cache, logs.Stable(), snaps)
	if err != nil {
		st.Close()
		return fail(fmt.Errorf("raft state: %w", err))
	}
	n.watch = newCommitWatch(n.trans)
	r, err := raft.NewRaft(rc, f, cache, logs.Stable(), snaps, n.watch)
	if err != nil {
		n.watch.close()
		n.trans.Close()
		f.Store().Close()
		if strings.Contains(err.Error(), "failed to load any existing snapshots") {
			// hashicorp/raft logs why each snapshot failed and returns only this.
			err = fmt.Errorf("%w: no snapshot of this node could be restored (each one's reason is logged above); replace it by an empty node", err)
		}
		return fail(fmt.Errorf("start raft: %w", err))
	}
	n.raft = r
	if !existing && cfg.Join == "" {
		servers := []raft.Server{{ID: raft.ServerID(cfg.ID), Address: raft.ServerAddress(cfg.advertised())}}
		if len(cfg.InitialCluster) > 0 {
			servers = servers[:0]
			for _, m := range cfg.InitialCluster {
				servers = append(servers, raft.Server{ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.RaftAddr)})
			}
		}
		if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			n.Close(context.Background())
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
		n.log.Info("bootstrapped new cluster", "members", len(servers))
	} else if existing {
		n.log.Info("restarting with existing state", "applied_index", f.Store().AppliedIndex(), "snapshot_index", snapIndex)
	}

	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	rctx, rcancel := context.WithTimeout(ctx, cfg.ApplyTimeout)
	n.solo.refresh(rctx, r)
	rcancel()
	n.startMembership(ctx, existing, cfg.Join)
	n.wg.Add(3)
	go n.watchLeadership(ctx)
	go n.watchPeers(ctx)
	go n.watchMembership(ctx)
	return n, nil
}

// store returns the current store.
func (n *Node) store() *wheel.Store { return n.fsm.Store() }

// Close stops the node. A leader first hands leadership to a follower so
// the cluster keeps serving without waiting for an election timeout.
func (n *Node) Close(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	n.Stopping()
	if n.raft != nil && n.raft.State() == raft.Leader && n.multiVoter() {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			n.log.Warn("leadership transfer before shutdown failed", "err", err)
		} else {
			n.log.Info("leadership transferred before shutdown")
		}
	}
	if n.cancel != nil {
		n.cancel()
	}
	n.wg.Wait()
	var errs []error
	if n.raft != nil {
		errs = append(errs, n.raft.Shutdown().Error())
	}
	if n.watch != nil {
		n.watch.close()
	}
	if n.trans != nil {
		errs = append(errs, n.trans.Close())
	}
	if n.fsm != nil {
		errs = append(errs, n.fsm.Store().Close())
	}
	errs = append(errs, n.closeLogs())
	return errors.Join(errs...)
}

// closeLogs closes the Raft log and releases the data dir's lock, once.
func (n *Node) closeLogs() error {
	var errs []error
	if n.logs != nil {
		errs = append(errs, n.logs.Close())
		n.logs = nil
	}
	if n.lock != nil {
		errs = append(errs, n.lock.Close())
		n.lock = nil
	}
	return errors.Join(errs...)
}

// voters counts the voters of the latest configuration and reports whether
// this node is one of them.
func (n *Node) voters() (count int, self bool) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0, false
	}
	return countVoters(f.Configuration(), raft.ServerID(n.cfg.ID))
}

// multiVoter reports whether the configuration has voters besides one, so
// that leadership can be handed over.
func (n *Node) multiVoter() bool {
	v, _ := n.voters()
	return v > 1
}

// Raft exposes the Raft instance to tests and metrics.
func (n *Node) Raft() *raft.Raft { return n.raft }

// Store exposes the wheel store to tests, metrics and offline tools.
func (n *Node) Store() *wheel.Store { return n.store() }

// IsLeader reports whether this node is the leader.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// HasSelf reports whether the replicated metadata holds this node's
// current addresses.
func (n *Node) HasSelf() bool {
	for _, m := range n.store().Nodes() {
		if m.ID == n.cfg.ID {
			return m == n.cfg.Self()
		}
	}
	return false
}

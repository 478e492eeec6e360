package replication

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	riders    riders                          // entries riding with the next one (rider.go)
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
	removeTemporaries(cfg.DataDir, n.log)
	raftDir := filepath.Join(cfg.DataDir, "raft")
	if err := segment.MkdirAllSync(vfs.Default, raftDir); err != nil {
		return fail(fmt.Errorf("raft dir: %w", err))
	}
	hl := raftLogger(n.log, cfg.Clock.Now)
	snaps, err := newSnapStore(raftDir, 2, n.log, hl)
	if err != nil {
		return fail(fmt.Errorf("snapshot store: %w", err))
	}
	logs, err := raftlog.Open(raftDir, raftlog.Options{SegmentBytes: cfg.LogSegmentBytes, Logger: n.log, RaftLogger: hl, CommitLinger: cfg.CommitLinger, Clock: cfg.Clock})
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
	_, statErr := os.Stat(f.dir)
	fresh := errors.Is(statErr, fs.ErrNotExist) // a new node, or a data dir a restore seeded
	st, err := wheel.Open(f.dir, sopts)
	switch {
	case err == nil && storeCovers(logs, st.AppliedIndex(), snapIndex):
	case err == nil && fresh && len(latest) > 0:
		// A store made just now holds nothing to set aside: it takes the
		// snapshot as Raft starts.
		n.log.Info("restoring the latest snapshot into a new store", "snapshot", snapIndex)
		snapIndex = 0
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
		sl, err := newTCPLayer(cfg.RaftAddr, cfg.RaftAdvertise, cfg.RaftServerTLS, cfg.RaftClientTLS)
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

// storeCovers reports whether a store that has applied the log up to
// applied covers the snapshot of index snap. It does when the entries
// after applied, up to snap, change no state (no-ops, barriers,
// configurations): the store records the index of commands only, Raft
// snapshots at the last entry of any type. An entry the log no longer
// holds counts as a command.
func storeCovers(logs raft.LogStore, applied, snap uint64) bool {
	for i := applied + 1; i <= snap; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil || l.Type == raft.LogCommand {
			return false
		}
	}
	return true
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
		n.beforeTransfer(n.lease.Load()) // as StepDown
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
	n.flushRiders() // the dispatcher's last riders, before Raft stops (one node)
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
	m, ok := n.store().Node(n.cfg.ID)
	return ok && m == n.cfg.Self()
}

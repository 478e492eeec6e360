package replication

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
)

// fsm applies committed log entries to the wheel store. Its state lives on
// disk in <data>/fsm; snapshots are checkpoints of that directory.
type fsm struct {
	dir  string // <data>/fsm
	opts wheel.Options
	log  *slog.Logger

	mu    sync.RWMutex // guards store against Restore swapping it
	store *wheel.Store
	// onRestore is called with the new store after a snapshot was installed.
	onRestore func(*wheel.Store)

	commits *commitWaiters // told of each batch before it is applied
	// beforeApply, when set, runs after the commit notification and before
	// each batch is applied (Config.beforeApply, set by tests only).
	beforeApply func([]*raft.Log)

	appliedMu sync.Mutex
	applied   chan struct{} // closed (and replaced) after each apply

	// done is the highest log index of any type whose apply has finished
	// (Raft's own AppliedIndex counts entries handed to the FSM, before
	// they are applied). restoring is the index of the snapshot Raft
	// opened last, which a Restore covers once it succeeds.
	done, restoring atomic.Uint64
}

// appliedIndex returns the highest log index the state covers, counting
// entries that change no state (elections' no-ops, configurations).
func (f *fsm) appliedIndex() uint64 {
	return max(f.done.Load(), f.Store().AppliedIndex())
}

// finished records that the entries up to index are applied.
func (f *fsm) finished(index uint64) {
	for {
		d := f.done.Load()
		if index <= d || f.done.CompareAndSwap(d, index) {
			return
		}
	}
}

// appliedChanged returns a channel closed at the next change of the
// store's applied index.
func (f *fsm) appliedChanged() <-chan struct{} {
	f.appliedMu.Lock()
	defer f.appliedMu.Unlock()
	return f.applied
}

func (f *fsm) signalApplied() {
	f.appliedMu.Lock()
	close(f.applied)
	f.applied = make(chan struct{})
	f.appliedMu.Unlock()
}

// waitApplied waits until the store has applied index.
func (f *fsm) waitApplied(ctx context.Context, index uint64) error {
	for {
		ch := f.appliedChanged()
		if f.Store().AppliedIndex() >= index {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

var _ raft.BatchingFSM = (*fsm)(nil)

// Store returns the current store. Restore may replace it.
func (f *fsm) Store() *wheel.Store {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.store
}

// Apply applies one entry.
func (f *fsm) Apply(l *raft.Log) any {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies committed entries as one store batch. Each command
// entry's response is its []command.Result. A storage failure stops the node:
// continuing would let this replica diverge; on restart it replays the log
// suffix onto the state the index covers.
func (f *fsm) ApplyBatch(logs []*raft.Log) []any {
	if f.commits != nil {
		f.commits.notify(logs) // Raft hands the FSM committed entries only
	}
	if f.beforeApply != nil {
		f.beforeApply(logs)
	}
	out := make([]any, len(logs))
	entries := make([]wheel.Entry, 0, len(logs))
	pos := make([]int, 0, len(logs))
	f.mu.RLock()
	applied := f.store.AppliedIndex()
	f.mu.RUnlock()
	for i, l := range logs {
		if l.Type != raft.LogCommand || l.Index <= applied {
			continue // replayed after a restart: the store already covers it
		}
		cmds, err := command.DecodeCommands(l.Data)
		if err != nil {
			// Every replica decodes the same bytes the same way, so skipping a
			// corrupt entry keeps them identical; the proposer sees the error.
			f.log.Error("skipping undecodable log entry", "index", l.Index, "err", err)
			out[i] = []command.Result{{Err: err}}
			continue
		}
		entries = append(entries, wheel.Entry{Index: l.Index, Cmds: cmds})
		pos = append(pos, i)
	}
	if len(entries) == 0 {
		if len(logs) > 0 {
			f.finished(logs[len(logs)-1].Index)
		}
		return out
	}
	f.mu.RLock()
	res, err := f.store.Apply(entries)
	f.mu.RUnlock()
	if err != nil {
		f.log.Error("store apply failed; stopping so the node recovers from its log on restart", "err", err)
		panic(fmt.Sprintf("delaywheel: store apply failed: %v", err))
	}
	for j, i := range pos {
		out[i] = res[j]
	}
	f.finished(logs[len(logs)-1].Index)
	f.signalApplied()
	return out
}

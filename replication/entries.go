package replication

import (
	"github.com/hashicorp/raft"
)

// entries is the Raft log (raftlog.Log) as Raft sees it on this node: it
// also notes the configuration entries it stores and, on a node that is
// its cluster's only voter, answers proposals once they are durable
// (commit.go).
type entries struct {
	raft.LogStore
	commits *commitWaiters
	solo    *soloVoter
	// configured, when set, is called after configuration entries are
	// stored or the log's tail is deleted: membership may have changed.
	configured func()
}

// StoreLogs appends logs durably, then notes configuration entries and,
// on a node that is its cluster's only voter, tells the proposals among
// logs that they are committed.
func (e entries) StoreLogs(logs []*raft.Log) error {
	if err := e.LogStore.StoreLogs(logs); err != nil {
		return err
	}
	if e.solo == nil {
		return nil
	}
	from := 0
	for i, l := range logs {
		if l.Type != raft.LogConfiguration {
			continue
		}
		if e.solo.solo() {
			e.commits.notify(logs[from:i])
		}
		e.solo.stored(l)
		from = i + 1
	}
	if from > 0 && e.configured != nil {
		e.configured()
	}
	if e.solo.solo() {
		e.commits.notify(logs[from:])
	}
	return nil
}

// IsMonotonic passes on that the log (raft-wal) takes only consecutive
// entries, so that Raft empties it after installing a snapshot instead of
// keeping a prefix that the next entry would not follow.
func (e entries) IsMonotonic() bool {
	m, ok := e.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

var _ raft.MonotonicLogStore = entries{}

// StoreLog appends one entry durably (see StoreLogs).
func (e entries) StoreLog(l *raft.Log) error { return e.StoreLogs([]*raft.Log{l}) }

// DeleteRange deletes the entries from min to max. A deletion of the log's
// tail may take the latest configuration with it, so whether this node is
// the only voter becomes unknown.
func (e entries) DeleteRange(min, max uint64) error {
	last, err := e.LastIndex()
	if err != nil {
		return err
	}
	if err := e.LogStore.DeleteRange(min, max); err != nil {
		return err
	}
	if e.solo != nil && max >= last {
		e.solo.truncated()
		if e.configured != nil {
			e.configured()
		}
	}
	return nil
}

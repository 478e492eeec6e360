package replication

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// Answering at commit. An enqueue of messages without keys has a result
// that depends only on the index its entry gets: message i is ID{index, i}
// due at its clamped time (wheel.Scheduled). Once the entry is committed it
// is durable on a majority and every replica will apply it, so the leader
// answers then instead of after its own state machine has applied it,
// which takes the apply (and the wait for the batch ahead of it) off the
// client's latency. Reads on the leader wait for the apply (Node.caughtUp).
//
// The entry is recognised by the proposal id it carries in its Raft
// extensions (raft.Log.Extensions, which Raft replicates and raft-wal
// stores with the entry): every proposal has one, unique per node across
// restarts and terms. A proposal whose entry is not recognised at commit
// is answered after its apply, like every other proposal; no enqueue is
// then answered at commit, which TestEnqueueAnsweredAtCommit detects.
//
// Commit is observed in two places:
//   - the FSM's ApplyBatch, before it applies anything: Raft hands it
//     only committed entries, whatever the cluster's size;
//   - the log store, once StoreLogs has made a batch durable, when the
//     latest configuration has this node as its only voter: a quorum of
//     one is then already reached. This spares a single node the wait for
//     Raft's leader loop to process the commit (with new batches competing
//     for that loop, often one more fsync).

// proposalIDLen is the length of a proposal id: the node's prefix and a
// counter, 8 bytes each, big-endian.
const proposalIDLen = 16

// proposalID names one proposal of this node.
type proposalID [proposalIDLen]byte

// proposalIDs hands out proposal ids. The prefix is drawn at random when the
// node opens, so ids stay unique across restarts; the counter makes them
// unique within one run, whatever the term.
type proposalIDs struct {
	prefix uint64
	seq    atomic.Uint64
}

func newProposalIDs() *proposalIDs { return &proposalIDs{prefix: rand.Uint64()} }

func (g *proposalIDs) next() proposalID {
	var id proposalID
	binary.BigEndian.PutUint64(id[:8], g.prefix)
	binary.BigEndian.PutUint64(id[8:], g.seq.Add(1))
	return id
}

// idOf reads the proposal id an entry carries, if it carries one.
func idOf(l *raft.Log) (proposalID, bool) {
	if l.Type != raft.LogCommand || len(l.Extensions) != proposalIDLen {
		return proposalID{}, false
	}
	return proposalID(l.Extensions), true
}

// commitWaiters maps the ids of proposals answered at commit to the channel
// that takes their index once committed.
type commitWaiters struct {
	mu sync.Mutex
	m  map[proposalID]chan uint64
	// highest is the highest index told to a waiter: a client may ask
	// for its message before Raft's own last index has caught up.
	highest atomic.Uint64
}

func newCommitWaiters() *commitWaiters {
	return &commitWaiters{m: make(map[proposalID]chan uint64)}
}

// add registers a proposal's id and returns the channel that receives its
// index at commit.
func (w *commitWaiters) add(id proposalID) <-chan uint64 {
	ch := make(chan uint64, 1)
	w.mu.Lock()
	w.m[id] = ch
	w.mu.Unlock()
	return ch
}

// forget drops id's registration if it was not notified.
func (w *commitWaiters) forget(id proposalID) {
	w.mu.Lock()
	delete(w.m, id)
	w.mu.Unlock()
}

// notify tells the waiters among logs, all committed, their index.
func (w *commitWaiters) notify(logs []*raft.Log) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.m) == 0 {
		return
	}
	for _, l := range logs {
		id, ok := idOf(l)
		if !ok {
			continue
		}
		if ch, ok := w.m[id]; ok {
			delete(w.m, id)
			if l.Index > w.highest.Load() {
				w.highest.Store(l.Index)
			}
			ch <- l.Index
		}
	}
}

// Whether this node is the only voter, as the log store tracks it.
const (
	soloUnknown int32 = iota
	soloNo
	soloYes
)

// soloVoter tracks whether the latest configuration in the log has this
// node as its only voter. The log store updates it from the configuration
// entries it stores, in log order; a truncation of the log's tail (which
// may remove the latest configuration) makes it unknown until the node
// reads the configuration from Raft again.
type soloVoter struct {
	self  raft.ServerID
	state atomic.Int32 // read without the lock

	mu  sync.Mutex // serialises changes
	gen uint64     // bumped by every change the log store makes
}

// solo reports whether this node is known to be the only voter.
func (s *soloVoter) solo() bool { return s != nil && s.state.Load() == soloYes }

// countVoters counts the voters of c and reports whether self is one.
func countVoters(c raft.Configuration, self raft.ServerID) (count int, isVoter bool) {
	for _, srv := range c.Servers {
		if srv.Suffrage == raft.Voter {
			count++
			isVoter = isVoter || srv.ID == self
		}
	}
	return count, isVoter
}

func soloOf(c raft.Configuration, self raft.ServerID) int32 {
	if voters, me := countVoters(c, self); voters == 1 && me {
		return soloYes
	}
	return soloNo
}

// decodeSolo reads a configuration entry; raft.DecodeConfiguration panics
// on bytes it cannot decode, which then say nothing.
func decodeSolo(data []byte, self raft.ServerID) (st int32) {
	defer func() {
		if recover() != nil {
			st = soloUnknown
		}
	}()
	return soloOf(raft.DecodeConfiguration(data), self)
}

// stored updates the state from a configuration entry the log store made
// durable.
func (s *soloVoter) stored(l *raft.Log) {
	st := decodeSolo(l.Data, s.self)
	s.mu.Lock()
	s.state.Store(st)
	s.gen++
	s.mu.Unlock()
}

// truncated forgets the state after a truncation of the log's tail.
func (s *soloVoter) truncated() {
	s.mu.Lock()
	s.state.Store(soloUnknown)
	s.gen++
	s.mu.Unlock()
}

// refresh reads the latest configuration from Raft. What the log store
// records meanwhile is newer and wins. It must not run on Raft's own
// goroutines (the log store's calls among them): Raft answers it there.
func (s *soloVoter) refresh(ctx context.Context, r *raft.Raft) {
	s.mu.Lock()
	gen := s.gen
	s.mu.Unlock()
	f := r.GetConfiguration()
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case <-ctx.Done():
		return
	case err := <-done:
		if err != nil {
			return
		}
	}
	st := soloOf(f.Configuration(), s.self)
	s.mu.Lock()
	if s.gen == gen {
		s.state.Store(st)
	}
	s.mu.Unlock()
}

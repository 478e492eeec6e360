// Package replication owns the Raft node: the FSM that applies committed
// entries to the wheel store, snapshots (checkpoints of the store streamed
// as a tar), membership, the start-up decision between resuming from the
// on-disk state and restoring a snapshot, and the leader's dispatcher (the
// tick loop that stamps Expire/Promote into the log, the precision heap, and
// hand-offs to long-polling consumers).
//
// # Design
//
// The FSM's state is on disk and every apply records its Raft index in the
// same Pebble batch, so a restart does not re-restore the local snapshot
// (NoSnapshotRestoreOnStart): Raft replays the log after the snapshot and the
// store skips entries at or below its applied index. That is only safe when
// the store covers the latest snapshot — otherwise Raft would resume after
// entries the store never saw. Open checks exactly that, and when the store
// is behind, or its files do not cover its own applied index, it moves the
// store aside and lets Raft restore the snapshot instead.
//
// The dispatcher answers a first hand-off as soon as its Lease entry is in
// the leader's log order, without waiting for the commit, while the leader
// holds a leadership lease (a quorum confirmed it within half a heartbeat
// timeout; followers do not vote for another candidate within a whole one).
// Without the lease, and for redeliveries of expired leases, it answers only
// what commits. See dispatcher for the argument.
//
// An enqueue of messages without keys is answered when its entry commits,
// not when it is applied: its result depends only on the entry's index
// (wheel.Scheduled). The leader learns of the commit in the FSM's
// ApplyBatch before applying, or, when it is the only voter, in the log
// store once the batch is durable. Reads on the leader (Get, Topics, Dead,
// Wheel, Slot, and a Reserve that does not wait) first wait until every
// entry answered so is applied, so a client reads its own enqueues. See
// commit.go.
//
// The Raft log (its entries, spare segments and the term and vote) lives
// in <data>/raft and is package raftlog's; entries.go wraps it to note
// configuration entries and answer proposals at commit.
//
// It must not know about HTTP: the transport package calls the node through
// a small interface.
package replication

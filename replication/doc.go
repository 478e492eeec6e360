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
// The Raft log's entries are in hashicorp/raft-wal's segment files
// (<data>/raft/wal): a StoreLogs is one append and one fsync, and a head
// truncation deletes whole segments. New segments are spares written in
// full ahead of time rather than preallocated, so an append's fsync does
// not commit an extent change too (spare.go). Opening a data dir of an earlier
// version moves the entries there (moveOldLog) from bolt or from the Pebble
// database that held them in between (logStore, now only read for the
// move). The term and vote stay in raft.db (raft-boltdb), which bolt maps
// with 8 GiB of address space up front, so the map does not move while the
// file stays under half of that; HoldLogMap lets the server drop the map's
// resident pages safely. bolt keeps its freelist in memory only
// (NoFreelistSync, a hash map).
//
// It must not know about HTTP: the transport package calls the node through
// a small interface.
package replication

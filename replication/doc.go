// Package replication owns the Raft node that replicates the wheel store:
//
//   - the node (node.go, config.go, leader.go, proposal.go, backend.go): its
//     lifecycle, the start-up decision between resuming from the on-disk
//     state and restoring a snapshot, proposals and their answers (and the
//     entries that ride with the next one, rider.go),
//     membership, the leadership lease (lease.go), and the methods the
//     HTTP API calls (transport.Backend);
//   - what a node knows of the members (members.go): which peers the
//     leader's heartbeats reach, its own view of the cluster, and whether
//     it has been removed, in which case it refuses to serve;
//   - the log's wrapper (entries.go), which notes configuration entries
//     and answers proposals at commit;
//   - the state machine and its snapshots (fsm.go, snapshot.go,
//     snapstore.go): committed entries applied to the wheel store,
//     snapshots as checkpoints of the store's directory;
//   - the guard on inbound Raft connections (stall.go), which fails a
//     snapshot stream that stops sending, so a leader stopped mid-stream
//     cannot hold a follower's Raft goroutine;
//   - a node's many Raft groups (groups.go), their stream multiplexer
//     (mux.go) and the balancer of their leaderships (balance.go).
//
// Its sub-packages own the rest: dispatch the leader's dispatcher (the tick
// that stamps time into the log, the precision heap, the hand-offs to
// consumers and streams), behind the small interface dispatch.Replica that the
// node implements; webhook the leader's webhook sender (webhooks.go starts
// it with each dispatcher and tells it of config changes); raftlog the Raft log (the entries in hashicorp/raft-wal
// segment files, spare segments, and the term and vote in raft-boltdb as
// Raft's StableStore), in <data>/raft. Only tests import repltest, the test
// kit (an in-process cluster of real nodes, of one group or many), and
// nettest, the helpers of the tests that run nodes on loopback.
//
// The package knows nothing of the HTTP API: transport calls the node
// through transport.Backend, which *Node implements. (Only the webhook
// sender speaks HTTP, as a client of the topics' endpoints.)
//
// # Raft
//
// Every change to the queue is a command in a Raft log entry, and every
// replica applies the same entries in the same order to its own store, so
// the replicas hold the same state at the same applied index. The state
// machine's state is on disk and every apply records its Raft index in the
// same Pebble batch, so a restart does not restore the local snapshot
// (NoSnapshotRestoreOnStart): Raft replays the log after the snapshot and
// the store skips entries at or below its applied index. That is only safe
// when the store covers the latest snapshot, otherwise Raft would resume
// after entries the store never saw. Open checks exactly that, and when the
// store is behind, or its files do not cover its own applied index, it
// moves the store aside and lets Raft restore the snapshot instead.
//
// A follower reads a snapshot from its leader on Raft's own goroutine, and
// hashicorp/raft sets no deadline on those reads: a leader stopped while
// sending one (SIGSTOP, a paused VM) would leave the follower unable to vote
// for as long as the connection lived, and a cluster with one node down
// without a leader. While a snapshot sink is open, every read of an inbound
// Raft connection must return within 5 s or the connection fails; the
// leader sends the snapshot again.
//
// # Answering at commit
//
// An enqueue of messages without keys is answered when its entry commits,
// not when it is applied: its result depends only on the entry's index
// (wheel.Scheduled). Each proposal carries an id (a random prefix drawn
// when the node opens, and a counter) in its entry's Raft extensions; the
// leader matches committed entries to waiting proposals by that id. It
// learns of the commit in the state machine's ApplyBatch before applying,
// or, when it is the only voter, in the log store once the batch is
// durable. Reads on the leader (Get, Topics, Dead, Wheel, Slot, and a
// Reserve that does not wait) first wait until every entry answered so is
// applied, so a client reads its own enqueues. See commit.go.
//
// # Leadership lease
//
// The node holds a lease on its leadership while a quorum confirmed it
// within half a heartbeat timeout; followers do not vote for another
// candidate within a whole one, so no other leader can exist meanwhile.
// Confirmations come from heartbeat rounds and from every committed
// proposal; the only voter always holds the lease. The lease lives in the
// node, not the dispatcher, because it is a fact about Raft leadership
// (configuration, heartbeats, commits); the dispatcher only asks whether
// it is held (dispatch.Replica.LeaseHeld) to decide whether a first hand-off
// may be answered before its Lease entry commits. Handing leadership over
// (StepDown, the balancer's transfers) revokes it first.
//
// # Dispatcher
//
// The node starts a dispatcher each time it wins an election, once the
// state machine has applied everything earlier leaders committed (a Raft
// barrier), and stops it when leadership ends. Only the leader hands out
// messages; followers answer Reserve with model.ErrNotLeader.
//
// # Groups
//
// A node started with more than one group (OpenGroups) runs a Node per
// group, each with its own store, log and snapshots in <data>/group-<g>,
// the same id and members in every group. Groups owns what they share: the
// data dir's lock and its groups file, which fixes the group count at
// creation; the multiplexer, which carries every group's Raft traffic over
// the one Raft address, each connection opened by a header naming its
// group; and the balancer, which hands each group's leadership to its
// preferred voter once that voter answers, so leaderships spread over the
// nodes and come back to a node that returns. A group's store mints ids
// naming the group (model.ID.Group), and a topic belongs to the group
// model.GroupOf names. One group is the plain Node Open starts, in the
// data dir itself, with no header on its connections.
package replication

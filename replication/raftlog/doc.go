// Package raftlog owns a node's Raft log on disk, in one directory:
//
//   - the entries, in raft-wal's segment files (wal/): an append is one
//     write and one fsync into a segment written ahead of time, and a
//     truncation of the log's head deletes whole segments;
//   - the spare segment (wal/spare-segment): the next segment's file,
//     written in full in the background, so that appends go into blocks
//     already allocated and written (spare.go);
//   - the stable store (raft.db, raft-boltdb): Raft's current term and
//     vote, written once per election.
//
// Log is what Raft takes as its LogStore; Log.Stable is its StableStore.
// Reads are bounded by the log's first index (see Log.GetLog).
//
// # Why raft-wal
//
// Every acknowledged write waits for the log's commit. raft-wal appends a
// batch with one write and one fsync and drops the log's head by deleting
// whole segments; a B+tree store writes the pages a batch dirtied wherever
// its freelist puts them, then its meta page, with a sync after each. A
// torn last batch is dropped by its checksum when the log opens; the chaos
// tests zero the newest segment's tail to keep that true.
//
// # Why a spare segment
//
// raft-wal preallocates a new segment with fallocate, which leaves its
// blocks unwritten: each append then changes the file's extent map, and
// the fsync after it commits the file system's journal too. A segment
// whose blocks are already written takes appends as plain overwrites. The
// spare is written a synced chunk at a time with pauses between chunks,
// so the log's own fsyncs do not queue behind it; without a ready spare,
// raft-wal's preallocation is the fallback. The cost is one more segment
// of disk and a second write of every segment's bytes, ahead of time.
//
// # Commit window
//
// Off by default. With Options.CommitLinger, a write starts no sooner
// than that long after the previous one started (linger.go): Raft hands
// the log every proposal queued in the meantime, so more of them share
// one write and one fsync, each paying up to the window in latency. A
// write after a quiet spell longer than the window starts at once.
package raftlog

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
package raftlog

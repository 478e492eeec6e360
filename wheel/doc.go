// Package wheel owns the single-layer file-backed timing wheel: slot math,
// the cursor, overflow beyond the horizon, the Pebble indexes, the precision
// loader that yields messages at their exact due millisecond, and the
// deterministic store that applies commands. It never reads the wall clock
// while applying: time arrives inside commands.
//
// Where a message is and in what state lives in its meta, or, for a message
// enqueued without a key straight into a slot file and untouched since, in
// its log entry's placements (placement.go). While a loader is attached, the
// metas of the messages about to be handed out are also kept in memory
// (metacache.go).
//
// It must not know about Raft, HTTP or the network; replication feeds it
// commands in log order and serves reads from it.
package wheel

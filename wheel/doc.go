// Package wheel owns the single-layer file-backed timing wheel: slot math,
// the cursor, overflow beyond the horizon, the Pebble indexes, the precision
// loader that yields messages at their exact due millisecond, and the
// deterministic store that applies commands. It never reads the wall clock
// while applying: time arrives inside commands.
//
// It must not know about Raft, HTTP or the network; replication feeds it
// commands in log order and serves reads from it.
package wheel

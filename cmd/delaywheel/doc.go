// Command delaywheel is the delaywheel binary: `server` runs a node, the
// admin commands talk to a node over HTTP (or gRPC: --addr grpc://…) or read a stopped node's data
// directory, `backup` and `restore` move a node's state through a file, and
// `bench` runs the load generator of package bench.
//
// # What it owns
//
// Flags and their defaults, the --config file and DELAYWHEEL_* variables
// (command line over environment over file over default), wiring a
// replication.Node to a transport.Server and to the gRPC server of package
// transport/grpcserver (--grpc-addr) and to the beanstalkd protocol of
// package transport/beanstalkd (--beanstalkd-addr, through the adapter of
// beanstalkd.go, which routes each call to its group's leader), or with
// --groups N > 1 a node's Raft
// groups (replication.OpenGroups), each group's node at its index
// (transport.GroupBackends; groups.go: each group's metrics labelled group="<g>",
// --join adding the node to every group), signals and a clean shutdown, the
// process's memory settings, and the admin commands' tables and their
// command line: flags before or after the arguments, and every error,
// whether of usage or of the API, as one line. It holds no
// queue rule: the server's behaviour lives in the packages it wires, and
// the admin commands use the public client (package transport/client), so
// they see exactly what any user of the API sees. `wheel` and `slot` with
// --data-dir open a stopped node's store read-only instead, to look at a
// node that cannot start. With --group G they read group G's wheel (?group=G
// from a node, GroupDir under --data-dir; `dump` too); a G outside the
// node's groups is an error naming --group and the range.
//
// `restore` installs a backup as the node's Raft snapshot with that node as
// the only voter, so a backup seeds a new cluster through the same path a
// follower uses to catch up, and the other nodes then --join it. `backup`
// asks the node's group count (GET /v1/cluster): of a node of one group it
// writes the node's backup stream as it is; of many, one archive of every
// group's stream (replication.WriteGroupsBackup), which `restore` unpacks
// into every group's directory (replication.Restore). The groups are taken
// one after another, each consistent in itself; a message lives in exactly
// one group, so no message is torn between them.
//
// # Memory
//
// A node's memory must not grow with its backlog: pending messages live in
// slot files and the index, and the process holds the Go runtime and its
// heap, the index's block cache (--cache-bytes) and memtables
// (--memtable-bytes; Pebble keeps a flushed memtable for reuse, so an idle
// node holds two), and the executable's pages. The cache is sized so that
// the slots the leader loads and the messages it hands out are read from
// memory; a smaller one makes delivery later. A larger memtable fills a
// backlog beyond the horizon faster and holds more while idle.
//
// After a burst of work the Go collector keeps a heap sized for the burst
// and, with little allocation, runs no cycle that would shrink it. With
// --release-idle-heap the node collects and returns the free memory to the
// kernel once it goes quiet, and again now and then while it stays quiet,
// since its ticks and snapshots keep allocating; under load it never looks
// quiet and the collector (--gc-percent, --memory-limit) governs as usual.
//
// The node runs two Go processors more than the CPUs it may use
// (--procs; GOMAXPROCS when set wins over the default), so that the
// goroutine a due millisecond wakes never waits for the runtime to preempt
// an apply or a compaction; see spareProcs.
//
// Build the server with CGO_ENABLED=0, as the container image is. Without
// cgo, Pebble allocates its cache and memtables from Go's heap, which the
// runtime returns to the kernel. With cgo they come from the C allocator,
// whose per-thread arenas keep what is freed; the node then calls
// malloc_trim with each idle release, and still holds more pages of the
// executable and the C library.
//
// The bench harness shares the machine with the servers it measures, so it
// runs with a larger collector target than the default (GOGC, when set,
// wins): it spends less CPU on its own garbage, alike for every target.
package main

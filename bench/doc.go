// Package bench is the load generator behind `delaywheel bench`: it answers
// how fast messages can be enqueued, how late a due message reaches its
// consumer, what a large backlog costs in memory and disk, and what a leader
// failover does to deliveries, for delaywheel and, in the same run, for the
// usual alternatives.
//
// # Workloads
//
//   - enqueue: N messages from P producers in batches of B, bodies of S
//     bytes; messages/s and the latency of an enqueue call.
//   - fire: R messages/s coming due for D, their due times spread evenly and
//     enqueued ahead of time (absolute deliver_at_ms) so that enqueueing does
//     not disturb the firing; C consumers long-poll and acknowledge. Lateness
//     (receive time − due time) goes into an HDR histogram; lost, early and
//     duplicated deliveries are counted against the record of what was sent.
//   - backlog: N messages pending far ahead (spread over 1–24 h); resident
//     memory and disk bytes per pending message, and the time from restarting
//     the server to its being ready again.
//   - failover: fire on a spawned three-node cluster while the leader is
//     killed with SIGKILL and restarted; lost, early and duplicated
//     deliveries and the longest gap without a delivery around the kill.
//
// # Targets
//
// A delaywheel cluster is either given by address (--addr) or spawned from the
// real binary (--spawn 1|3) in temporary directories on free loopback ports.
// The alternatives are always spawned, and only when their server binary is
// installed: Redis (a sorted set scored by due time, popped by a Lua script
// every poll interval, AOF with appendfsync always) and beanstalkd (delayed
// puts with whole-second delays, binlog fsynced on every write). Targets run
// one after the other, never at the same time, so that they do not compete
// for the machine.
//
// Every timestamp comes from one clock, the harness's time.Now: due times are
// absolute milliseconds of that clock, and a delivery is stamped when its
// answer arrives.
//
// # What it owns
//
// Only load generation, the processes it spawned and their temporary
// directories, and the report (a table, JSON, or a self-contained HTML page
// with SVG charts). It talks to delaywheel only through the public client
// package transport/client and the server binary's flags; it must not import
// the server's packages.
package bench

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
//     With --consume webhook a receiver in the harness takes the messages:
//     answering 500 at random (--webhook-fail-rate), the run waits for the
//     retries and accounts for each message as answered 2xx, dead after
//     max_attempts (listed from the dead letters) or lost; holding every
//     request (--webhook-hang), it samples the leader's requests in flight
//     and the nodes' resident memory each second instead.
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
// real binary (--spawn 1|3) in temporary directories on free loopback ports,
// with --groups N Raft groups per node; --topics K spreads its messages over
// K topics (each consumer takes one), so that the groups share the load.
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
// # What the figures mean
//
// Each alternative is given the durability delaywheel has: Redis answers
// an enqueue after an AOF append and its fsync, beanstalkd after its
// binlog's fsync, delaywheel once the batch is fsynced in the Raft log of
// a majority. Redis's lateness is bounded below by its poll interval,
// beanstalkd's by its whole-second delays.
//
// Lateness is measured at the consumer: it includes writing the answer, the
// client's goroutine wake-ups and decoding, on the same cores as the
// server. The server's own delaywheel_delivery_lateness_seconds measures
// at the hand-off and reads lower. The harness's own CPU per message is
// higher against delaywheel than against Redis: net/http's client wakes a
// writer and a reader goroutine per connection for every call, go-redis
// one. The harness raises its collector target for the same reason (see
// cmd/delaywheel), alike for every target.
//
// Resident memory is read from /proc as VmRSS with its anonymous and
// file-backed parts, and only once it has settled (steady over several
// readings): right after a burst a server is still collecting, releasing
// pages and compacting. Disk counts a file with several hard links once,
// since delaywheel's snapshots link the live index's tables. The bodies the
// harness writes (a sequence number padded with 'x') compress to almost
// nothing, so a server that compresses its storage reads better here than
// on real bodies.
//
// CPU time is read from /proc/<pid>/stat, user and system, for every
// spawned server of every target, and for the pids given with --addr
// (--server-pid) (cpu.go): fire reports what the servers used from the
// start of enqueueing to the end of the wait, per message (enqueue, hand-off
// and ack), and the part spent while enqueueing; enqueue and backlog what
// the enqueues used; schedules from the first occurrence on. A
// server's CPU time per message hardly depends on what else the machine
// runs, while lateness does, so a change of delaywheel that should make it
// cheaper is measured there first.
//
// A failover run shows duplicates: hand-offs the killed leader answered
// before their lease committed, delivered again by the next leader, as
// at-least-once delivery allows.
//
// Figures move from one machine to the next and between runs on a shared
// one. Compare targets as ratios within one run, over several runs, and
// measure a change of delaywheel in alternating runs of the old and the
// new binary. The README's benchmark section holds the figures and the
// commands that produce them.
//
// # What it owns
//
// Only load generation, the processes it spawned and their temporary
// directories, and the report (a table, JSON, or a self-contained HTML page
// with SVG charts). It talks to delaywheel only through the public client
// (packages transport/client and transport/api) and the server binary's
// flags; it must not import the server's storage, Raft or HTTP packages.
// The one helper it shares is the disk counter that counts a hard-linked
// file once (diskuse).
package bench

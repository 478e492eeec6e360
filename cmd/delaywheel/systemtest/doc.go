// Package systemtest runs the real delaywheel binary: it builds
// ./cmd/delaywheel once, starts nodes as processes on their own loopback
// addresses (127.0.0.11, 127.0.0.12, …), and drives them over HTTP with the
// Go client, the way a user does.
//
// The exported kit is usable from any test:
//
//   - Build compiles the binary.
//   - NewCluster starts one or more nodes, each a Server: one delaywheel
//     process (running Options.Groups Raft groups) in its own data
//     directory under t.TempDir(), with its output captured to a log file
//     whose tail is printed when the test fails. A Server can be killed
//     (SIGKILL), stopped (SIGTERM, exit code 0 asserted by the caller),
//     paused and resumed (SIGSTOP/SIGCONT) and restarted on the same data
//     directory.
//   - Every node's advertised Raft address is a fault-injecting TCP Proxy on
//     the node's own IP that forwards to the node's Raft listener. Outgoing
//     Raft connections leave from each node's IP, so a proxy that refuses a
//     source IP cuts exactly one peer off; Cluster.Isolate and Cluster.Heal
//     use that to partition a node away and back.
//   - A node's own HTTP, Raft and gRPC ports are picked below the
//     ephemeral range and fixed in its flags; if another process takes one
//     between the pick and the node's bind, the node exits at start and
//     the harness starts it again on new ports (up to three times), the
//     proxy, whose port never changes, forwarding to the new Raft port.
//   - History records what a test client saw (acknowledged enqueues,
//     deliveries, acks, nacks, leader changes) and Check proves nothing
//     acknowledged was lost, nothing came early, and every duplicate has a
//     reason (an expired lease, a nack, or a leader change of the
//     message's group).
//   - Workload produces and consumes at a steady rate against a cluster and
//     records everything into a History.
//
// The tests cover the message lifecycle over HTTP on one node and on three
// (every call sent to a follower, so that it is forwarded), input
// validation, never delivering early, a clean restart, and faults: kills
// of leaders, followers and whole clusters, pauses (SIGSTOP), partitions,
// torn writes, damaged files refused with an error naming them, replacement
// of a node by one that catches up from a snapshot, kills of each group's
// leader and a partition of one group's leader in a cluster of three Raft
// groups, and the compose file's cluster when Docker is available. Each chaos test checks its History,
// that long-delay messages parked before the faults are still pending
// unchanged, and that every node's counts agree with the leader's.
//
// By default each chaos test injects a few faults (three leader kills, or
// one of its other fault); flags make a soak:
//
//	go test ./cmd/delaywheel/systemtest -run Chaos -chaos.duration=10m -chaos.faults=40 -timeout=2h -v
//
// With -short only the fast tests run.
package systemtest

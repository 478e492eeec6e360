// Package repltest is the replication test kit: in-process clusters of
// real nodes (Raft over loopback TCP, stores on disk in t.TempDir()), as
// etcd's rafttest is for its raft. It owns Cluster, nodes of one Raft
// group each (replication.Open), and GroupsCluster, nodes of many groups
// over one Raft address (replication.OpenGroups): start, stop and restart
// a member, find a leader and a follower. A member's addresses are
// recorded through its leader, as the server command does through the
// leader's API. The helpers its tests share (free loopback ports, waiting
// on a condition) are in replication/nettest.
//
// Tests call each node's methods directly; the kit imports nothing above
// replication, so the transport's kit (transport/transporttest) puts the
// nodes behind HTTP. Only tests import this package: the server must not,
// so that the testing package stays out of its binary. The replication
// package's own tests that start a cluster are in package
// replication_test for that reason; they reach the few internals they
// check through replication's export_test.go.
package repltest

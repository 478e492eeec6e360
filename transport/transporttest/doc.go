// Package transporttest is the test kit for the HTTP API and its users: it
// starts real delaywheel nodes (Raft on loopback, stores in t.TempDir()),
// puts a transport.Server in front of each on a loopback listener, and
// hands back their URLs, clients and nodes. Every node and server runs on
// one injected wheeltest.FakeClock, so a test moves time by advancing the clock
// and waits on conditions, never on the wall clock.
//
// There is no model of the queue here: what a test sees is what the store
// does. Error paths come from real situations (a follower, a node that has
// not joined, a closed listener) or from a test's own wrapper of the
// transport.Backend that overrides one method.
//
// StartGroups starts nodes of many Raft groups (--groups N), each node's
// groups behind one server (transport.GroupBackends), as the delaywheel server runs them.
//
// Only tests import this package; transport's own code must not (its
// tests that use the kit are in package transport_test).
package transporttest

// Package nettest holds the helpers shared by the tests that run nodes on
// the loopback network: free loopback ports (FreeAddr, FreePorts), waiting
// on a condition (WaitFor), a node's logger into the test's log (Logger)
// and a buffer one goroutine writes while a test reads it (SyncBuffer).
//
// It imports nothing of delaywheel, so that the replication package's own
// tests use it as well as the kits above it (replication/repltest,
// transport/transporttest) and the server's tests. Only tests import it.
package nettest

package replication

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// A follower receives a snapshot on Raft's own goroutine: hashicorp/raft's
// installSnapshot copies the stream into a sink before it handles any other
// RPC, and its network transport sets no deadline on reads of inbound
// connections. A leader that stops mid-stream (SIGSTOP, a paused VM, a host
// gone without a reset) would leave the follower unable to vote or to start
// an election for as long as the connection lives, which TCP may never end:
// with one other node down, the cluster would have no leader.
//
// stallGuard bounds that wait. While a snapshot sink is open on this node
// (one being received, or, less often, this node's own being written),
// each read of an inbound Raft connection must return within stall; one that
// does not fails the connection for good, and with it the install, which
// the leader sends again later. A leader's connection that idles longer
// than stall meanwhile is closed too, and redialled at its next use.
// Outside a snapshot, reads have no deadline, so an idle connection of a
// healthy leader stays open.
type stallGuard struct {
	raft.StreamLayer
	stall time.Duration
	sinks atomic.Int64 // snapshot sinks open on this node
}

// snapshotStall is how long a read of a snapshot stream may wait for a byte.
// A leader sends a snapshot from a file it built before sending, so a
// healthy one never pauses near this long.
const snapshotStall = 5 * time.Second

// newStallGuard wraps the stream layer's accepted connections.
func newStallGuard(s raft.StreamLayer, stall time.Duration) *stallGuard {
	return &stallGuard{StreamLayer: s, stall: stall}
}

// Accept waits for a peer's connection, guarded.
func (g *stallGuard) Accept() (net.Conn, error) {
	c, err := g.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return &guardedConn{Conn: c, g: g}, nil
}

// opened counts a snapshot sink opened; the returned func, called once or
// more, counts it closed.
func (g *stallGuard) opened() func() {
	g.sinks.Add(1)
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			g.sinks.Add(-1)
		}
	}
}

// guardedConn is an inbound Raft connection under a stallGuard. Raft reads
// a connection from one goroutine at a time, handing it over through
// channels, so its fields need no lock.
type guardedConn struct {
	net.Conn
	g     *stallGuard
	armed bool  // the last read had a deadline
	err   error // set once a read stalled: every later read fails with it
}

// Read reads with a deadline while a snapshot sink is open.
func (c *guardedConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	switch {
	case c.g.sinks.Load() > 0:
		if err := c.Conn.SetReadDeadline(time.Now().Add(c.g.stall)); err != nil {
			return 0, err
		}
		c.armed = true
	case c.armed:
		if err := c.Conn.SetReadDeadline(time.Time{}); err != nil {
			return 0, err
		}
		c.armed = false
	}
	n, err := c.Conn.Read(p)
	if err != nil && c.armed && errors.Is(err, os.ErrDeadlineExceeded) {
		// Raft reads the rest of a failed snapshot stream before it
		// answers; with the sink closed that read would have no deadline
		// and wait as long as the stalled peer does.
		c.err = fmt.Errorf("raft connection from %s: no byte for %v while a snapshot sink was open: %w", c.RemoteAddr(), c.g.stall, err)
		c.Conn.Close()
	}
	return n, err
}

package main

import (
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/delaywheel/delaywheel/replication/nettest"
)

// heldAddrs are loopback addresses held for a server that has not bound
// them yet: each is listened on, and a connection to it is reset at once,
// as one to a stopped node is refused, until release.
type heldAddrs struct {
	addrs []string
	lns   []net.Listener
	wg    sync.WaitGroup
	once  sync.Once
}

// holdFreeAddrs chooses n free loopback addresses (nettest.FreeAddr) and
// holds them until release or the end of the test. An address another
// process takes between its choice and its hold is chosen again.
func holdFreeAddrs(t *testing.T, n int) *heldAddrs {
	t.Helper()
	h := &heldAddrs{}
	t.Cleanup(h.release)
	for len(h.addrs) < n {
		addr := nettest.FreeAddr(t)
		if err := h.listen(addr); err != nil {
			continue
		}
		h.addrs = append(h.addrs, addr)
	}
	return h
}

// holdAddrs holds addrs, those of a stopped server, until release or the
// end of the test.
func holdAddrs(t *testing.T, addrs ...string) *heldAddrs {
	t.Helper()
	h := &heldAddrs{addrs: addrs}
	t.Cleanup(h.release)
	for _, addr := range addrs {
		if err := h.listen(addr); err != nil {
			t.Fatalf("hold the address of a stopped server: %v", err)
		}
	}
	return h
}

func (h *heldAddrs) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("hold %s: %w", addr, err)
	}
	h.lns = append(h.lns, ln)
	h.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // released
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // reset, as a node that is not there
			}
			c.Close()
		}
	})
	return nil
}

// release lets the addresses go, for the server about to bind them.
func (h *heldAddrs) release() {
	h.once.Do(func() {
		for _, ln := range h.lns {
			ln.Close()
		}
		h.wg.Wait()
	})
}

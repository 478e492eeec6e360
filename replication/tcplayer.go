package replication

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// tcpLayer carries Raft RPCs over TCP, optionally with mutual TLS.
// Outgoing connections leave from the listen address's IP (when it is a
// specific one), so a multi-homed host — or a test with one loopback address
// per node — sees each node's traffic come from its own address.
type tcpLayer struct {
	ln        net.Listener
	advertise net.Addr
	local     *net.TCPAddr // source of outgoing connections; nil: any
	client    *tls.Config  // nil: plain TCP
}

var _ raft.StreamLayer = (*tcpLayer)(nil)

// newTCPLayer listens on bind and advertises advertise (bind when empty).
// With serverTLS and clientTLS set, both directions use TLS.
func newTCPLayer(bind, advertise string, serverTLS, clientTLS *tls.Config) (*tcpLayer, error) {
	if advertise == "" {
		advertise = bind
	}
	adv, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, fmt.Errorf("raft advertise address %q: %w", advertise, err)
	}
	if adv.IP == nil || adv.IP.IsUnspecified() {
		return nil, fmt.Errorf("raft advertise address %q: give a host other peers can reach, not an unspecified one", advertise)
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("raft listen %q: %w", bind, err)
	}
	s := &tcpLayer{ln: ln, advertise: adv, client: clientTLS}
	if ta, ok := ln.Addr().(*net.TCPAddr); ok && ta.IP != nil && !ta.IP.IsUnspecified() {
		s.local = &net.TCPAddr{IP: ta.IP}
	}
	if serverTLS != nil {
		s.ln = tls.NewListener(ln, serverTLS)
	}
	return s, nil
}

// Dial connects to a peer.
func (s *tcpLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if s.local != nil {
		d.LocalAddr = s.local
	}
	if s.client != nil {
		return tls.DialWithDialer(d, "tcp", string(address), s.client)
	}
	return d.Dial("tcp", string(address))
}

// Accept waits for a peer's connection.
func (s *tcpLayer) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil && errors.Is(err, net.ErrClosed) {
		return nil, err
	}
	return c, err
}

// Close stops listening.
func (s *tcpLayer) Close() error { return s.ln.Close() }

// Addr is the advertised address.
func (s *tcpLayer) Addr() net.Addr { return s.advertise }

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/grpcserver"
)

// grpcOff reports whether a --grpc-addr turns the gRPC API off.
func grpcOff(addr string) bool { return addr == "" || addr == "off" }

// listenGRPC listens on --grpc-addr and returns the listener (nil when the
// API is off) and the address the node gives others: the flag's host with
// the port it got.
func listenGRPC(addr string) (ln net.Listener, advertised string, err error) {
	if grpcOff(addr) {
		return nil, "", nil
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("--grpc-addr: %w", err)
	}
	host, _, _ := net.SplitHostPort(addr)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return ln, net.JoinHostPort(host, port), nil
}

// serveGRPC serves the gRPC API on ln (nil: off) next to the HTTP server
// srv, with its token, limits and TLS, until ctx ends; a follower forwards
// the leader's calls to the gRPC address the leader's member record holds,
// with the TLS the HTTP API forwards with. wait returns once it stopped.
func serveGRPC(ctx context.Context, ln net.Listener, tcfg transport.Config, serverTLS *tls.Config, srv *transport.Server, groups ...transport.Backend) (wait func() error) {
	if ln == nil {
		return func() error { return nil }
	}
	tcfg.Slots = srv.Slots()
	cfg := grpcserver.Config{HTTP: tcfg, TLS: serverTLS, Cluster: srv.ClusterView, Forward: true}
	if tr, ok := tcfg.LeaderTransport.(*http.Transport); ok && serverTLS != nil {
		cfg.LeaderTLS = tr.TLSClientConfig // nil: the system's roots
	}
	gs := grpcserver.New(cfg, groups...)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(ctx, ln) }()
	return func() error { return <-done }
}

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/grpcserver"
)

// grpcOff reports whether a --grpc-addr turns the gRPC API off.
func grpcOff(addr string) bool { return addr == "" || addr == "off" }

// startGRPC serves the gRPC API on addr next to the HTTP server srv, with
// its token, limits and TLS, until ctx ends, and returns the address it
// listens on ("off" when off). wait returns once it stopped; with the API
// off, it returns at once.
func startGRPC(ctx context.Context, addr string, tcfg transport.Config, serverTLS *tls.Config, srv *transport.Server, b transport.Backend) (bound string, wait func() error, err error) {
	if grpcOff(addr) {
		return "off", func() error { return nil }, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--grpc-addr: %w", err)
	}
	gs := grpcserver.New(grpcserver.Config{HTTP: tcfg, TLS: serverTLS, Cluster: srv.ClusterView}, b)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(ctx, ln) }()
	return ln.Addr().String(), func() error { return <-done }, nil
}

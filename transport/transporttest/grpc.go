package transporttest

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/grpcserver"
)

// ServeGRPC serves the gRPC API of a node's groups (group g's backend at
// groups[g]) with cfg on a free loopback port until stop or the end of the
// test, and returns its address. stop returns what Serve returned; at the
// end of the test an error fails it.
func ServeGRPC(t testing.TB, cfg grpcserver.Config, groups ...transport.Backend) (addr string, stop func() error) {
	t.Helper()
	return ServeGRPCOn(t, ListenGRPC(t), cfg, groups...)
}

// ListenGRPC listens on a free loopback port until the end of the test:
// a node's gRPC address, known before the node starts and records it.
func ListenGRPC(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// ServeGRPCOn is ServeGRPC on ln.
func ServeGRPCOn(t testing.TB, ln net.Listener, cfg grpcserver.Config, groups ...transport.Backend) (addr string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- grpcserver.New(cfg, groups...).Serve(ctx, ln) }()
	var once sync.Once
	var serr error
	stop = func() error {
		once.Do(func() { cancel(); serr = <-done })
		return serr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("gRPC serve: %v", err)
		}
	})
	return ln.Addr().String(), stop
}

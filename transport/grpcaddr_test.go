package transport_test

import (
	"testing"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

// TestLocalViewGRPC: a node reports its gRPC address in its cluster view.
// (Followers find the leader's in its replicated member record.)
func TestLocalViewGRPC(t *testing.T) {
	n := startNode(t, transporttest.Options{Server: func(c *transport.Config) {
		c.AuthToken = "tok"
		c.GRPCAddr = "127.0.0.1:7072"
	}})
	view, err := n.Client.ClusterLocal(t.Context())
	if err != nil || view.GRPCAddr != "127.0.0.1:7072" {
		t.Fatalf("local view %+v, %v", view, err)
	}
}

package transport_test

import (
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

// TestLeaderGRPC: a node reports its gRPC address in its cluster view, and
// another node's server finds it there with LeaderGRPC.
func TestLeaderGRPC(t *testing.T) {
	n := startNode(t, transporttest.Options{Server: func(c *transport.Config) {
		c.AuthToken = "tok"
		c.GRPCAddr = "127.0.0.1:7072"
	}})
	asker := transport.NewServer(transport.Config{}, n.Node)
	addr, err := asker.LeaderGRPC(t.Context(), n.Addr, "Bearer tok")
	if err != nil || addr != "127.0.0.1:7072" {
		t.Fatalf("LeaderGRPC: %q, %v", addr, err)
	}
	view, err := n.Client.ClusterLocal(t.Context())
	if err != nil || view.GRPCAddr != "127.0.0.1:7072" {
		t.Fatalf("local view %+v, %v", view, err)
	}
	if _, err := asker.LeaderGRPC(t.Context(), n.Addr, "Bearer wrong"); err == nil || !strings.Contains(err.Error(), "wrong bearer token") {
		t.Fatalf("with a wrong token: %v", err)
	}

	plain := startNode(t, transporttest.Options{})
	if _, err := asker.LeaderGRPC(t.Context(), plain.Addr, ""); err == nil || !strings.Contains(err.Error(), "serves no gRPC") {
		t.Fatalf("a node without gRPC: %v", err)
	}
}

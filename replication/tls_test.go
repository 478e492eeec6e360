package replication_test

import (
	"crypto/tls"
	"testing"
	"time"

	. "github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/repltest"
)

func TestMutualTLSCluster(t *testing.T) {
	dir := t.TempDir()
	cert, key, ca := nettest.WriteCA(t, dir, "cluster")
	srvTLS, cliTLS, err := PeerTLS(cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	c := repltest.NewCluster(t, 3, func(cfg *Config) { cfg.RaftServerTLS, cfg.RaftClientTLS = srvTLS, cliTLS })
	leader := c.Leader()
	f := c.Follower()
	res := enqueue(t, leader.Node, msg("tls", "x", 100*time.Millisecond))
	nettest.WaitFor(t, nettest.Patience, "the follower to apply the enqueue over TLS", func() bool {
		_, err := f.Node.Store().Get(res[0].ID)
		return err == nil
	})
	got := reserve(t, leader.Node, "tls", 1, 10*time.Second)
	if len(got) != 1 || got[0].Message.ID != res[0].ID {
		t.Fatalf("reserve over a TLS cluster: %+v", got)
	}

	// A peer whose certificate chains to another CA is refused.
	ocert, okey, oca := nettest.WriteCA(t, dir, "other")
	_, otherCli, err := PeerTLS(ocert, okey, oca)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", leader.Cfg.RaftAddr, otherCli)
	if err == nil {
		// TLS 1.3 reports the server's rejection of the client certificate on first read.
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil {
		t.Fatal("a peer with a foreign certificate was accepted")
	}
	if _, _, err := PeerTLS("", "", ""); err == nil {
		t.Fatal("PeerTLS without files must fail")
	}
}

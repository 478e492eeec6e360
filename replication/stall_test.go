package replication

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// TestSnapshotStreamStallFreesRaft has a peer claiming leadership start a
// snapshot install on a node and then stop sending, as a leader stopped
// mid-stream does. The node must give the install up and go on answering
// Raft: without the guard its Raft goroutine waits on the stream for as
// long as the connection lives, and it can neither vote nor start an
// election.
func TestSnapshotStreamStallFreesRaft(t *testing.T) {
	addrs := nettest.FreeAddrs(t, 3)
	members := []model.Member{
		{ID: "n1", RaftAddr: addrs[0]},
		{ID: "n2", RaftAddr: addrs[1]}, // nobody listens on n2 and n3
		{ID: "n3", RaftAddr: addrs[2]},
	}
	n, err := Open(Config{
		ID: "n1", DataDir: filepath.Join(t.TempDir(), "n1"), RaftAddr: members[0].RaftAddr,
		InitialCluster: members, Logger: nettest.Logger(t),
		snapshotStall: time.Second, // the sink stays open long enough for the wait below to see it
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Close(ctx)
	})

	// The install: a header announcing 1 MiB of snapshot, then nothing.
	conn, err := net.Dial("tcp", members[0].RaftAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var servers []raft.Server
	for _, m := range members {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.RaftAddr)})
	}
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n2"), Addr: []byte(members[1].RaftAddr)}
	w := bufio.NewWriter(conn)
	const rpcInstallSnapshot = 2 // hashicorp/raft's net_transport.go
	if err := w.WriteByte(rpcInstallSnapshot); err != nil {
		t.Fatal(err)
	}
	if err := codec.NewEncoder(w, &codec.MsgpackHandle{}).Encode(&raft.InstallSnapshotRequest{
		RPCHeader: header, SnapshotVersion: raft.SnapshotVersionMax, Term: 100, Leader: []byte(members[1].RaftAddr),
		LastLogIndex: 1000, LastLogTerm: 100,
		Configuration: raft.EncodeConfiguration(raft.Configuration{Servers: servers}), ConfigurationIndex: 1,
		Size: 1 << 20,
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}

	// The install is under way once its sink is open. Only then does the
	// probe below prove anything: a vote answered before Raft took the
	// install would raise the term past the install's, which Raft then
	// refuses without opening a sink or reading the stream.
	nettest.WaitFor(t, nettest.Patience, "the stalled install to open its snapshot sink", func() bool {
		return n.guard.sinks.Load() == 1
	})

	// Raft answers a vote request only from its own goroutine: an answer
	// shows it is no longer held by the stream.
	probe, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 500*time.Millisecond, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { probe.Close() })
	nettest.WaitFor(t, nettest.Patience, "the node to answer a vote request after the stalled install", func() bool {
		var resp raft.RequestVoteResponse
		err := probe.RequestVote("n1", raft.ServerAddress(members[0].RaftAddr),
			&raft.RequestVoteRequest{RPCHeader: header, Term: 200}, &resp)
		return err == nil
	})

	// The stalled connection is closed by the node, not left open.
	if err := conn.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(conn); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the node kept the stalled snapshot connection open")
	}
	if open := n.guard.sinks.Load(); open != 0 {
		t.Fatalf("%d snapshot sinks still counted open after the install failed", open)
	}
}

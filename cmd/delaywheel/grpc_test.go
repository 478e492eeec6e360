package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/api/pb"
	"github.com/delaywheel/delaywheel/transport/client"
)

// TestCommandsOverGRPC runs commands against --addr grpc://, with the
// token, on the gRPC API as the server command serves it.
func TestCommandsOverGRPC(t *testing.T) {
	n := newNode(t, "tok")
	bound := serveNodeGRPC(t, n, "tok")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &node{Node: n.Node, addr: "grpc://" + bound}

	if _, err := run(t, "topics", "--addr", g.addr); err == nil || !strings.HasPrefix(err.Error(), "unauthenticated: ") {
		t.Fatalf("without token: %v", err)
	}
	out := g.mustRun(t, "push", "--token-file", tokenFile, "--delay", "30s", "--key", "k", "--header", "h=v", "orders", "close 42")
	id := fields(out)[1][0]
	hasRow(t, out, id, "2024-11-22T03:20:30.000Z", "false")
	var res api.EnqueueResponse
	decodeJSON(t, g.mustRun(t, "push", "--token-file", tokenFile, "--json", "--key", "k", "orders", "again"), &res)
	if len(res.Results) != 1 || res.Results[0].ID != id || !res.Results[0].Duplicate {
		t.Fatalf("duplicate push: %+v", res)
	}
	contains(t, g.mustRun(t, "message", "--token-file", tokenFile, id), "state:", "delayed", "header:", "h=v", `"close 42"`)
	hasRow(t, g.mustRun(t, "topics", "--token-file", tokenFile), "orders", "1", "0", "0", "0")
	var c api.Cluster
	decodeJSON(t, g.mustRun(t, "cluster", "--token-file", tokenFile, "--json"), &c)
	if c.Leader != "n1" || len(c.Nodes) != 1 {
		t.Fatalf("cluster JSON: %+v", c)
	}
	// A list calls the first node that answers.
	list := "grpc://" + nettest.FreeAddr(t) + "," + bound
	hasRow(t, mustRunArgs(t, "topics", "--addr", list, "--token-file", tokenFile), "orders", "1", "0", "0", "0")
	contains(t, g.mustRun(t, "cancel", "--token-file", tokenFile, id), id, "cancelled")
	if _, err := run(t, "message", "--addr", g.addr, "--token-file", tokenFile, id); err == nil || err.Error() != "not found: message "+id {
		t.Fatalf("message after cancel: %v", err)
	}
}

func TestGRPCOff(t *testing.T) {
	for _, addr := range []string{"", "off"} {
		ln, bound, err := listenGRPC(addr)
		if err != nil || ln != nil || bound != "" || serveGRPC(t.Context(), ln, transport.Config{}, nil, nil, nil)() != nil {
			t.Fatalf("--grpc-addr %q: %v %q %v", addr, ln, bound, err)
		}
	}
}

// serveNodeGRPC serves n's gRPC API, with token, as the server command
// does, until the test ends, and returns its address.
func serveNodeGRPC(t *testing.T, n *node, token string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tcfg := transport.Config{Clock: n.Clock.Now, AuthToken: token}
	ln, bound, err := listenGRPC("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wait := serveGRPC(ctx, ln, tcfg, nil, transport.NewServer(tcfg, n.Node.Node), n.Node.Node)
	t.Cleanup(func() {
		cancel()
		if err := wait(); err != nil {
			t.Errorf("gRPC shutdown: %v", err)
		}
	})
	return bound
}

// Commands the gRPC API does not serve refuse an --addr of grpc:// before
// sending anything, naming the command and what to give instead.
func TestHTTPOnlyCommandsRefuseGRPC(t *testing.T) {
	for _, args := range [][]string{
		{"schedule", "ls"}, {"schedule", "get", "s"}, {"schedule", "rm", "s"},
		{"schedule", "set", "s", "--topic", "t", "--every", "1m", "x"},
		{"webhook", "get", "t"}, {"webhook", "rm", "t"}, {"webhook", "set", "t", "--url", "https://h.example/in"},
	} {
		_, err := run(t, append(args, "--addr", "grpc://127.0.0.1:1")...)
		want := "--addr grpc://127.0.0.1:1: delaywheel " + strings.Join(args[:2], " ") + " is served over HTTP only"
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("%v over gRPC: %v; want %q", args, err, want)
		}
	}
}

// The node's HTTP and gRPC APIs take long-poll and stream slots from one
// pool, as serveGRPC wires them: --max-waiters and --max-streams bound the
// node, not each API.
func TestAPIsShareSlots(t *testing.T) {
	n := newNode(t, "")
	b := n.Node.Node
	tcfg := transport.Config{Clock: n.Clock.Now, Limits: transport.Limits{MaxWaiters: 1, MaxStreams: 1}}
	srv := transport.NewServer(tcfg, b)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	ctx, cancel := context.WithCancel(t.Context())
	ln, bound, err := listenGRPC("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wait := serveGRPC(ctx, ln, tcfg, nil, srv, b)
	t.Cleanup(func() {
		cancel()
		if err := wait(); err != nil {
			t.Errorf("gRPC shutdown: %v", err)
		}
	})
	conn, err := grpc.NewClient(bound, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	pc := pb.NewDelaywheelClient(conn)

	// An HTTP long-poll holds the one waiter slot (the fake clock never
	// ends its wait): a gRPC long-poll is refused at once. The HTTP one is
	// asked again when a gRPC probe held the slot at that moment.
	hctx, hcancel := context.WithCancel(t.Context())
	polled := make(chan error, 1)
	go func() {
		for {
			_, err := client.New(hs.URL).Reserve(hctx, "a", api.ReserveRequest{WaitMs: 60000})
			if err == nil || !strings.Contains(err.Error(), "429 overloaded") {
				polled <- err
				return
			}
		}
	}()
	n.Node.Eventually(t, "a gRPC long-poll refused while an HTTP one runs", func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer ccancel()
		_, err := pc.Reserve(cctx, &pb.ReserveRequest{Topic: "b", WaitMs: 60000})
		return status.Code(err) == codes.ResourceExhausted
	})
	hcancel()
	<-polled

	// An HTTP stream holds the one stream slot: a gRPC Subscribe is refused.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, hs.URL+"/v1/topics/s/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP stream: %s", resp.Status)
	}
	sub, err := pc.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Send(&pb.SubscribeRequest{Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Recv(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "too many streams") {
		t.Fatalf("gRPC Subscribe while an HTTP stream is open: %v", err)
	}
}

// backup takes a checkpoint over HTTP only: an --addr of grpc:// is
// refused before anything is written.
func TestBackupRefusesGRPC(t *testing.T) {
	out := filepath.Join(t.TempDir(), "b.tar")
	_, err := run(t, "backup", "--out", out, "--addr", "grpc://127.0.0.1:1")
	if err == nil || !strings.HasPrefix(err.Error(), "--addr grpc://127.0.0.1:1: backup is served over HTTP only") {
		t.Fatalf("backup over gRPC: %v", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("backup over gRPC left %s: %v", out, err)
	}
}

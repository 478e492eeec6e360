package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/transport/api"
)

func TestTailAcks(t *testing.T) {
	for _, proto := range []string{"http", "grpc"} {
		t.Run(proto, func(t *testing.T) { testTailAcks(t, proto) })
	}
}

// testTailAcks tails a topic with --ack over proto.
func testTailAcks(t *testing.T, proto string) {
	n := newNode(t, "")
	addr := n.addr
	if proto == "grpc" {
		addr = "grpc://" + serveNodeGRPC(t, n, "")
	}
	res, err := n.Client.Enqueue(t.Context(), []api.Message{
		{Topic: "tt", Payload: api.TextBody("one")}, {Topic: "tt", Payload: api.TextBody("two")},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	app := newApp()
	out := &nettest.SyncBuffer{}
	app.Writer, app.ErrWriter = out, io.Discard
	done := make(chan error, 1)
	go func() { done <- runCLI(ctx, app, []string{"delaywheel", "tail", "tt", "--ack", "--addr", addr}) }()
	n.Eventually(t, "both deliveries printed and acked", func() bool {
		ts, err := n.Client.Topics(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(out.String(), "\n") == 2 && len(ts) == 1 && ts[0] == api.TopicCounts{Topic: "tt"}
	})
	for _, r := range res {
		if !strings.Contains(out.String(), r.ID+"  attempt 1") {
			t.Fatalf("tail output lacks %s:\n%s", r.ID, out.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("tail ended with %v", err)
	}
}

func TestWebhookCommands(t *testing.T) {
	n := newNode(t, "")
	out, err := run(t, "webhook", "set", "wh", "--url", "https://hooks.example.com/in", "--max-concurrency", "7", "--addr", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "https://hooks.example.com/in") || !strings.Contains(out, "7") {
		t.Fatalf("set printed:\n%s", out)
	}
	out, err = run(t, "webhook", "get", "wh", "--addr", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "hooks.example.com") {
		t.Fatalf("get printed:\n%s", out)
	}
	if _, err := run(t, "webhook", "set", "wh", "--url", "ftp://x", "--addr", n.addr); err == nil || !strings.Contains(err.Error(), "url") {
		t.Fatalf("set with an ftp url: %v", err)
	}
	if _, err := run(t, "webhook", "rm", "wh", "--addr", n.addr); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "webhook", "get", "wh", "--addr", n.addr); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("get after rm: %v", err)
	}
}

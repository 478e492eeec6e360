package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// A --groups outside 1..model.MaxGroups, from the command line or the
// environment, stops the server before it opens anything, naming the flag.
func TestServerGroupsFlag(t *testing.T) {
	for _, c := range []struct{ arg, env string }{
		{arg: "0"},
		{env: fmt.Sprint(model.MaxGroups + 1)},
	} {
		t.Run(c.arg+c.env, func(t *testing.T) {
			args := []string{"server", "--data-dir", filepath.Join(t.TempDir(), "data"), "--http-addr", "127.0.0.1:0",
				"--raft-addr", "127.0.0.1:0", "--grpc-addr", "off"}
			if c.arg != "" {
				args = append(args, "--groups", c.arg)
			} else {
				t.Setenv("DELAYWHEEL_GROUPS", c.env)
			}
			_, err := run(t, args...)
			if err == nil || !strings.Contains(err.Error(), "--groups") {
				t.Fatalf("error %v, want one naming --groups", err)
			}
			if _, statErr := os.Stat(args[2]); !errors.Is(statErr, os.ErrNotExist) {
				t.Fatal("the data dir was created before --groups was checked")
			}
		})
	}
}

// Three servers started with --groups 3 and the same --initial-cluster
// form one cluster of three groups: a batch over many topics enqueued
// through one lands in every group, each group's metrics carry its
// label, and each shuts down cleanly.
func TestServerGroupsCluster(t *testing.T) {
	const groups = 3
	httpAddrs, cls := startCluster(t, 3, groups)
	ctx := t.Context()
	var msgs []api.Message
	for i := range 30 {
		msgs = append(msgs, api.Message{Topic: fmt.Sprintf("t%d", i), Payload: api.TextBody("x")})
	}
	res, err := cls[1].Enqueue(ctx, msgs)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	seen := map[int]bool{}
	for i, r := range res {
		id, err := model.ParseID(r.ID)
		if err != nil || id.Group() != model.GroupOf(msgs[i].Topic, groups) {
			t.Fatalf("result %d: id %s (%v); want one of group %d", i, r.ID, err, model.GroupOf(msgs[i].Topic, groups))
		}
		seen[id.Group()] = true
	}
	if len(seen) != groups {
		t.Fatalf("the batch landed in groups %v; want all %d", seen, groups)
	}
	resp, err := http.Get("http://" + httpAddrs[0] + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for g := range groups {
		if !strings.Contains(string(body), fmt.Sprintf(`group="%d"`, g)) {
			t.Fatalf("no series of group %d in /metrics", g)
		}
	}
	if want := fmt.Sprintf(`goversion=%q`, runtime.Version()); !strings.Contains(string(body), "delaywheel_build_info{") || !strings.Contains(string(body), want) {
		t.Fatalf("no delaywheel_build_info with %s in /metrics", want)
	}

	// `cluster` prints a row per group; --addr takes a list over HTTP
	// and calls the first node that answers.
	down := nettest.FreeAddr(t)
	out, err := run(t, "cluster", "--addr", down+", http://"+httpAddrs[2])
	if err != nil {
		t.Fatalf("cluster: %v\n%s", err, out)
	}
	hasRow(t, out, "GROUP", "LEADER", "TERM", "COMMIT", "LAG")
	v, err := cls[2].Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, out, "answered by:", "n3")
	rows := map[string]bool{}
	for _, r := range fields(out) {
		if len(r) == 5 {
			rows[strings.Join(r[:3], " ")] = true
		}
	}
	for _, g := range v.Groups {
		if want := fmt.Sprintf("%d %s %d", g.Group, g.Leader, g.Term); !rows[want] {
			t.Fatalf("no group row starting %q in:\n%s", want, out)
		}
	}
}

// With no node of an --addr list answering, a command fails at once,
// naming every address and the last error, where tail retried forever.
func TestAddrListNoneAnswers(t *testing.T) {
	down := nettest.FreeAddr(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"tail", "--addr", down + ",http://127.0.0.1:bad", "t"}, []string{down, "http://127.0.0.1:bad", "invalid port"}},
		{[]string{"topics", "--addr", down + ",http://127.0.0.1:bad"}, []string{down, "http://127.0.0.1:bad", "invalid port"}},
		{[]string{"tail", "--addr", "grpc://" + down, "t"}, []string{down, "unavailable"}},
	} {
		app := newApp()
		var out, errOut strings.Builder
		app.Writer, app.ErrWriter = &out, &errOut
		err := runCLI(ctx, app, append([]string{"delaywheel"}, c.args...))
		if err == nil || ctx.Err() != nil {
			t.Fatalf("%v: %v (context: %v); want a refusal before the deadline", c.args, err, ctx.Err())
		}
		for _, want := range append(c.want, "--addr: no node answers at ") {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%v: %v; want it to say %q", c.args, err, want)
			}
		}
	}
}

// startCluster starts n servers n1, n2, … with --groups groups and the
// same --initial-cluster, waits until each is ready in every group, and
// returns their HTTP addresses and clients.
func startCluster(t *testing.T, n, groups int) (httpAddrs []string, cls []*client.Client) {
	t.Helper()
	// Each node's addresses are held until it binds them (holdFreeAddrs).
	var raft, members []string
	var held []*heldAddrs
	for i := range n {
		h := holdFreeAddrs(t, 2)
		held = append(held, h)
		raft = append(raft, h.addrs[0])
		httpAddrs = append(httpAddrs, h.addrs[1])
		members = append(members, fmt.Sprintf("n%d=%s", i+1, raft[i]))
	}
	for i := range n {
		held[i].release()
		startServer(t, httpAddrs[i], "--node-id", fmt.Sprintf("n%d", i+1), "--data-dir", t.TempDir(), "--raft-addr", raft[i],
			"--initial-cluster", strings.Join(members, ","), "--groups", fmt.Sprint(groups))
	}
	ctx := t.Context()
	for _, addr := range httpAddrs {
		cl := client.New("http://" + addr)
		cls = append(cls, cl)
		// Ready, and each group led by its preferred voter (n1, n2, ... in
		// turn, the balancer's choice), so that no leadership transfer is
		// still to come when the test starts.
		nettest.WaitFor(t, 30*time.Second, addr+" to be ready in every group, leaderships spread", func() bool {
			v, err := cl.Cluster(ctx)
			if cl.Readyz(ctx) != nil || err != nil || len(v.Groups) != groups {
				return false
			}
			for _, g := range v.Groups {
				if g.Leader != fmt.Sprintf("n%d", g.Group%n+1) {
					return false
				}
			}
			return true
		})
	}
	return httpAddrs, cls
}

// startServer runs `delaywheel server` in the background with its HTTP API
// on httpAddr, no gRPC API and args, and waits for it to serve. The
// returned stop (also run when the test ends) shuts it down and checks
// that it ended cleanly.
func startServer(t *testing.T, httpAddr string, args ...string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	app := newApp()
	logs := new(nettest.SyncBuffer)
	app.Writer, app.ErrWriter = io.Discard, logs
	t.Cleanup(func() { // after stop (cleanups run last first)
		if t.Failed() {
			t.Logf("server on %s logged:\n%s", httpAddr, logs.String())
		}
	})
	args = append([]string{"delaywheel", "server", "--http-addr", httpAddr, "--grpc-addr", "off", "--log-level", "warn"}, args...)
	go func() { done <- runCLI(ctx, app, args) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("server on %s: %v", httpAddr, err)
			}
		})
	}
	t.Cleanup(stop)
	// urfave/cli applies its shared help flag while parsing: the next
	// server parses its flags only once this one serves.
	nettest.WaitFor(t, 30*time.Second, httpAddr+" to serve", func() bool {
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return stop
}

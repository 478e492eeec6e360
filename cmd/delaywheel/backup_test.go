package main

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// `backup` of a --groups 3 server writes one archive of every group's
// backup; `restore` of it seeds a new data dir that a --groups 3 server
// starts on with every message. wheel and slot read one group, --group,
// from the node or from its stopped data dir.
func TestGroupsBackupRestore(t *testing.T) {
	const groups = 3
	addrs := nettest.FreeAddrs(t, 2)
	dataDir, raftAddr, httpAddr := t.TempDir(), addrs[0], addrs[1]
	stop := startServer(t, httpAddr, "--node-id", "n1", "--data-dir", dataDir, "--raft-addr", raftAddr, "--groups", fmt.Sprint(groups))
	addr := "http://" + httpAddr
	ctx := t.Context()
	cl := client.New(addr)
	waitReady := func(cl *client.Client) {
		nettest.WaitFor(t, 30*time.Second, "the node to be ready in every group", func() bool {
			v, err := cl.Cluster(ctx)
			return cl.Readyz(ctx) == nil && err == nil && len(v.Groups) == groups
		})
	}
	waitReady(cl)
	var msgs []api.Message
	for i := range 30 {
		msgs = append(msgs, api.Message{Topic: fmt.Sprintf("t%d", i), Payload: api.TextBody("x"), DelayMs: api.Ptr(int64(time.Hour / time.Millisecond))})
	}
	res, err := cl.Enqueue(ctx, msgs)
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	want := map[string]api.MessageView{}
	for _, r := range res {
		if want[r.ID], err = cl.Get(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
	}

	file := filepath.Join(t.TempDir(), "backup.tar")
	out, err := run(t, "backup", "--addr", addr, "--out", file)
	if err != nil {
		t.Fatalf("backup: %v", err)
	}
	contains(t, out, "backup of 3 groups written to "+file)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	wantNames := []string{"delaywheel-backup.json", "group-0.tar", "group-1.tar", "group-2.tar"}
	if names := tarNames(t, data); !slices.Equal(names, wantNames) {
		t.Fatalf("the backup file holds %v, want %v", names, wantNames)
	}
	stdout, stderr, err := runStderr(t, newApp(), "", "backup", "--addr", addr, "--out", "-")
	if err != nil {
		t.Fatalf("backup to stdout: %v", err)
	}
	contains(t, stderr, "backup of 3 groups written to stdout")
	if names := tarNames(t, []byte(stdout)); !slices.Equal(names, wantNames) {
		t.Fatalf("the backup on stdout holds %v, want %v", names, wantNames)
	}

	// Each group's wheel holds its own messages; together, all of them.
	wheelMessages := func(args ...string) (total int) {
		t.Helper()
		for g := range groups {
			var w api.Wheel
			decodeJSON(t, mustRunArgs(t, append([]string{"wheel", "--json", "--group", fmt.Sprint(g)}, args...)...), &w)
			n := 0
			for _, s := range w.NonEmpty {
				n += s.Messages
			}
			if n == 0 {
				t.Fatalf("%v: group %d's wheel holds no message", args, g)
			}
			total += n
		}
		return total
	}
	if n := wheelMessages("--addr", addr); n != len(msgs) {
		t.Fatalf("the groups' wheels hold %d messages, want %d", n, len(msgs))
	}
	contains(t, mustRunArgs(t, "slot", "0", "--addr", addr, "--group", "2"), "slot:")
	for _, args := range [][]string{{"wheel", "--addr", addr, "--group", "3"}, {"slot", "0", "--addr", addr, "--group", "3"}} {
		_, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), "--group 3") || !strings.Contains(err.Error(), "between 0 and 2") {
			t.Errorf("%v: %v; want an error naming --group and the range", args, err)
		}
		t.Logf("%v: %v", args[:2], err)
	}
	stop()
	if n := wheelMessages("--data-dir", dataDir); n != len(msgs) {
		t.Fatalf("the stopped node's groups hold %d messages, want %d", n, len(msgs))
	}
	_, err = run(t, "wheel", "--data-dir", dataDir, "--group", "3")
	if err == nil || !strings.Contains(err.Error(), "--group") || !strings.Contains(err.Error(), "groups 0 to 2") {
		t.Errorf("offline wheel of group 3: %v; want an error naming --group and the range", err)
	}
	t.Logf("offline wheel of group 3: %v", err)

	addrs = nettest.FreeAddrs(t, 2)
	restored, raft2, http2 := filepath.Join(t.TempDir(), "restored"), addrs[0], addrs[1]
	args := []string{"restore", file, "--data-dir", restored, "--node-id", "n1", "--raft-addr", raft2}
	out, err = run(t, args...)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	contains(t, out, "3 groups", "--groups 3")
	t.Logf("restore: %s", out)
	if _, err := run(t, args...); err == nil || !strings.Contains(err.Error(), "already holds a node") {
		t.Fatalf("a second restore into %s: %v", restored, err)
	}
	startServer(t, http2, "--node-id", "n1", "--data-dir", restored, "--raft-addr", raft2, "--groups", fmt.Sprint(groups))
	cl2 := client.New("http://" + http2)
	waitReady(cl2)
	for id, v := range want {
		got, err := cl2.Get(ctx, id)
		if err != nil || !reflect.DeepEqual(got, v) {
			t.Fatalf("restored %s: %+v (%v), want %+v", id, got, err, v)
		}
	}
	// Each group's new store took its snapshot: none was set aside.
	if aside, _ := filepath.Glob(filepath.Join(restored, "*", "fsm.damaged-*")); len(aside) > 0 {
		t.Fatalf("the restored node set stores aside as damaged: %v", aside)
	}
}

// mustRunArgs runs the app with args and fails on error.
func mustRunArgs(t *testing.T, args ...string) string {
	t.Helper()
	out, err := run(t, args...)
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return out
}

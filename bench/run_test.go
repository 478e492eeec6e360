package bench

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string // "" = valid
	}{
		{Config{Workload: WorkloadFire}, ""},
		{Config{Workload: WorkloadFailover}, ""}, // spawns 3 by default
		{Config{Workload: "nap"}, `workload "nap"`},
		{Config{Workload: WorkloadFire, Targets: []string{"kafka"}}, `unknown target "kafka"`},
		{Config{Workload: WorkloadFire, Addrs: []string{"x:1"}, Spawn: 1}, "exclude each other"},
		{Config{Workload: WorkloadFire, Spawn: 2}, "--spawn 2"},
		{Config{Workload: WorkloadFailover, Spawn: 1}, "failover needs --spawn 3"},
		{Config{Workload: WorkloadEnqueue, Batch: 20_000}, "--batch 20000"},
		{Config{Workload: WorkloadFire, Consume: ConsumeStream}, ""},
		{Config{Workload: WorkloadFire, Consume: ConsumeReserveInline}, ""},
		{Config{Workload: WorkloadFire, Consume: ConsumeWebhook, WebhookFailRate: 1}, "--webhook-fail-rate"},
		{Config{Workload: WorkloadFire, Consume: "poll"}, `--consume "poll"`},
		{Config{Workload: WorkloadFire, Consume: ConsumeWebhook, WebhookHang: true}, ""},
		{Config{Workload: WorkloadFire, Consume: ConsumeWebhook, WebhookHang: true, WebhookFailRate: 0.2}, "--webhook-hang and --webhook-fail-rate exclude each other"},
		{Config{Workload: WorkloadFire, WebhookHang: true}, "need --consume webhook"},
		{Config{Workload: WorkloadFire, WebhookFailRate: 0.2}, "need --consume webhook"},
		{Config{Workload: WorkloadFire, Consume: ConsumeWebhook, MaxAttempts: -1}, "--max-attempts -1"},
		{Config{Workload: WorkloadFire, Consume: ConsumeWebhook, MaxAttempts: 1001}, "--max-attempts 1001"},
		{Config{Workload: WorkloadFire, Consume: ConsumeWebhook, Drain: -time.Second}, "durations must not be negative"},
		{Config{Workload: WorkloadEnqueue, Proto: ProtoJSON}, ""},
		{Config{Workload: WorkloadEnqueue, Proto: "thrift"}, `--proto "thrift"`},
		{Config{Workload: WorkloadFailover, Duration: time.Second, KillAfter: 2 * time.Second}, "--kill-after"},
		{Config{Workload: WorkloadFire, Spawn: 3, Groups: 3, Topics: 4, Consumers: 4}, ""},
		{Config{Workload: WorkloadFire, Groups: 300}, "--groups 300"},
		{Config{Workload: WorkloadFire, Addrs: []string{"x:1"}, Groups: 3}, "--groups: only for a spawned cluster"},
		{Config{Workload: WorkloadFire, Spawn: 3, Groups: 3, Topics: 3, Consumers: 3, Proto: ProtoGRPC}, ""},
		{Config{Workload: WorkloadFire, Topics: 8, Consumers: 4}, "--topics 8 needs at least as many --consumers"},
		{Config{Workload: WorkloadSchedules, Topics: 2}, "--topics: the schedules workload"},
		{Config{Workload: WorkloadFire, Addrs: []string{"x:1"}, ServerPIDs: []int{42}}, ""},
		{Config{Workload: WorkloadFire, ServerPIDs: []int{42}}, "--server-pid: only with --addr"},
		{Config{Workload: WorkloadFire, Addrs: []string{"x:1"}, ServerPIDs: []int{0}}, "--server-pid 0"},
	} {
		err := tc.cfg.withDefaults().validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
	w := Config{Workload: WorkloadFire, Consume: ConsumeWebhook, WebhookFailRate: 0.2}.withDefaults()
	if w.MaxAttempts != DefaultMaxAttempts || w.Drain != webhookDrain(DefaultMaxAttempts) {
		t.Fatalf("webhook defaults: max attempts %d, drain %s", w.MaxAttempts, w.Drain)
	}
	if r := (Config{Workload: WorkloadFire}).withDefaults(); r.MaxAttempts != 0 || r.Drain != 0 {
		t.Fatalf("reserve defaults: max attempts %d (want the server's), drain %s", r.MaxAttempts, r.Drain)
	}
	d := Config{Workload: WorkloadBacklog}.withDefaults()
	if d.Messages != DefaultBacklogMessages || d.Spawn != 1 || len(d.Targets) != 3 {
		t.Fatalf("backlog defaults %+v", d)
	}
}

// TestSkipUninstalled: an alternative whose server is not on PATH is skipped
// with a line that says how to install it.
func TestSkipUninstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	cfg := Config{Workload: WorkloadFire}.withDefaults()
	for name, bin := range map[string]string{TargetRedis: "redis-server", TargetBeanstalkd: "beanstalkd"} {
		res := runTarget(t.Context(), cfg, filepath.Join(t.TempDir(), name), name)
		want := bin + " not installed (apt-get install " + bin + ")"
		if res.Skipped != want {
			t.Fatalf("%s: skipped %q, want %q", name, res.Skipped, want)
		}
	}
	cfg = Config{Workload: WorkloadFailover}.withDefaults()
	if res := runTarget(t.Context(), cfg, t.TempDir(), TargetRedis); !strings.Contains(res.Skipped, "failover applies to a replicated delaywheel cluster only") {
		t.Fatalf("failover on redis: %+v", res)
	}
	cfg = Config{Workload: WorkloadSchedules}.withDefaults()
	if res := runTarget(t.Context(), cfg, t.TempDir(), TargetRedis); !strings.Contains(res.Skipped, "no recurring schedules") {
		t.Fatalf("schedules on redis: %+v", res)
	}
}

func TestRunNeedsBinaryToSpawn(t *testing.T) {
	_, err := Run(t.Context(), Config{Workload: WorkloadEnqueue, Targets: []string{TargetDelaywheel}})
	if err == nil || !strings.Contains(err.Error(), "--binary") {
		t.Fatalf("Run without a binary: %v", err)
	}
}

// TestProcLifecycle starts a process, stops it with SIGTERM and sees it
// exit; a process that exits early fails waitReady, quoting its output.
func TestProcLifecycle(t *testing.T) {
	sh, err := lookSh()
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	p := newProc(Config{}.withDefaults().logger, "sleeper", dir, sh, "-c", "echo started; exec sleep 60")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if !p.Running() || p.PID() == 0 {
		t.Fatal("not running after Start")
	}
	if m, err := p.Mem(); err != nil || m.RSS <= 0 {
		t.Logf("resident memory %+v %v (no /proc here?)", m, err)
	}
	if _, err := p.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Running() {
		t.Fatal("running after Stop")
	}
	q := newProc(p.logger, "quitter", dir, sh, "-c", "echo boom; exit 3")
	if err := q.Start(); err != nil {
		t.Fatal(err)
	}
	err = waitReady(t.Context(), q, 10*time.Second, func(context.Context) error { return errors.New("not yet") })
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("waitReady of an exited process: %v", err)
	}
}

func lookSh() (string, error) {
	for _, p := range []string{"/bin/sh", "/usr/bin/sh"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no /bin/sh")
}

func TestDirSize(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int{"x": 100, "a/b/y": 23} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := dirSize(dir); err != nil || n != 123 {
		t.Fatalf("dirSize = %d, %v", n, err)
	}
}

func TestProgressLine(t *testing.T) {
	var buf strings.Builder
	p := newProgress(&buf, true)
	p.show("enqueue: 10/100")
	p.show("enqueue: 9")
	w := p.ClearingWriter(&buf)
	io.WriteString(w, "log line\n")
	got := buf.String()
	want := "\renqueue: 10/100\renqueue: 9     \r" + strings.Repeat(" ", 10) + "\rlog line\n"
	if got != want {
		t.Fatalf("progress output %q, want %q", got, want)
	}
}

// A spawned cluster of many groups is ready for a run once every group
// has a leader and the leaderships are spread over the nodes.
func TestSpread(t *testing.T) {
	g := func(leaders ...string) []api.Group {
		var out []api.Group
		for i, l := range leaders {
			out = append(out, api.Group{Group: i, Leader: l})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		groups []api.Group
		nodes  int
		ok     bool
	}{
		{"one group", g("n1"), 3, true},
		{"spread", g("n1", "n2", "n3"), 3, true},
		{"two groups on two of three nodes", g("n2", "n1"), 3, true},
		{"six groups on three nodes", g("n1", "n2", "n3", "n1", "n2", "n3"), 3, true},
		{"a group without a leader", g("n1", "", "n3"), 3, false},
		{"two leaderships on one node", g("n1", "n1", "n3"), 3, false},
	} {
		if err := spread(tc.groups, tc.nodes); (err == nil) != tc.ok {
			t.Errorf("%s: spread = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

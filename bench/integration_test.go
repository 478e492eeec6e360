package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The delaywheel binary the integration test spawns, built once by TestMain
// (or taken from $DELAYWHEEL_BENCH_BINARY); buildErr says why there is none.
var (
	testBinary string
	buildErr   error
)

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		buildErr = errors.New("-short")
		return m.Run()
	}
	if p := os.Getenv("DELAYWHEEL_BENCH_BINARY"); p != "" {
		testBinary = p
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "delaywheel-bench-test-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	testBinary, buildErr = buildBinary(ctx, ".", dir)
	cancel()
	return m.Run()
}

// buildBinary builds the delaywheel server binary from the module that
// contains dir (any directory inside the repository) into outDir and returns
// its path.
func buildBinary(ctx context.Context, dir, outDir string) (string, error) {
	out := filepath.Join(outDir, "delaywheel")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/delaywheel/delaywheel/cmd/delaywheel")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/delaywheel: %w: %s", err, strings.TrimSpace(string(b)))
	}
	return out, nil
}

// TestSpawnedDelaywheel runs enqueue and fire against a single node spawned
// from the real binary: nothing lost, nothing early, and nothing left behind.
func TestSpawnedDelaywheel(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns the server binary")
	}
	if buildErr != nil {
		t.Skipf("cannot build the delaywheel binary: %v", buildErr)
	}
	tmp := t.TempDir()
	base := Config{Targets: []string{TargetDelaywheel}, Spawn: 1, Binary: testBinary, TempDir: tmp, Stderr: t.Output()}

	cfg := base
	cfg.Workload, cfg.Messages, cfg.Batch = WorkloadEnqueue, 2000, 100
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	res := rep.Results[0]
	if res.Error != "" || res.Enqueue == nil || res.Enqueue.Messages != 2000 || res.Enqueue.PerSec <= 0 {
		t.Fatalf("enqueue: %+v", res)
	}

	cfg = base
	cfg.Workload, cfg.Rate, cfg.Duration, cfg.Lead, cfg.Grace = WorkloadFire, 200, 2*time.Second, time.Second, 3*time.Second
	rep, err = Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	res = rep.Results[0]
	if res.Error != "" || res.Fire == nil {
		t.Fatalf("fire: %+v", res)
	}
	f := res.Fire
	t.Logf("fire: sent %d received %d lost %d early %d dup %d lateness %+v", f.Sent, f.Received, f.Lost, f.Early, f.Duplicates, f.Lateness)
	if f.Sent != 400 || f.Received != 400 || f.Lost != 0 || f.Early != 0 {
		t.Fatalf("fire: sent %d received %d lost %d early %d, want 400 400 0 0", f.Sent, f.Received, f.Lost, f.Early)
	}
	if f.Lateness.Count != 400 || len(f.CDF) == 0 || len(res.Throughput) == 0 {
		t.Fatalf("fire: lateness %+v, %d CDF points, %d throughput points", f.Lateness, len(f.CDF), len(res.Throughput))
	}

	for _, consume := range []string{ConsumeStream, ConsumeWebhook} {
		cfg.Consume = consume
		rep, err = Run(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res = rep.Results[0]; res.Error != "" || res.Fire == nil {
			t.Fatalf("fire, consume %s: %+v", consume, res)
		}
		if f := res.Fire; f.Sent != 400 || f.Received != 400 || f.Lost != 0 || f.Early != 0 {
			t.Fatalf("fire, consume %s: sent %d received %d lost %d early %d, want 400 400 0 0", consume, f.Sent, f.Received, f.Lost, f.Early)
		}
	}

	cfg = base
	cfg.Workload, cfg.Messages, cfg.Duration, cfg.Lead, cfg.Grace = WorkloadSchedules, 20, 2*time.Second, 2*time.Second, 3*time.Second
	rep, err = Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	res = rep.Results[0]
	if res.Error != "" || res.Schedules == nil {
		t.Fatalf("schedules: %+v", res)
	}
	if s := res.Schedules; s.Messages != 40 || s.Received != 40 || s.Lost != 0 || s.Early != 0 || s.Duplicates != 0 || s.RestartToReady <= 0 {
		t.Fatalf("schedules: %d occurrences, received %d lost %d early %d dup %d, restart %v s; want 40 40 0 0 0",
			s.Messages, s.Received, s.Lost, s.Early, s.Duplicates, s.RestartToReady)
	}

	left, err := os.ReadDir(tmp)
	if err != nil || len(left) != 0 {
		t.Fatalf("temporary directories left behind: %v %v", left, err)
	}
}

// TestSpawnedDelaywheelGroups runs fire against 3 nodes of 3 Raft groups
// each, spawned from the real binary, the load spread over topics of every
// group: nothing lost, nothing early.
func TestSpawnedDelaywheelGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns the server binary")
	}
	if buildErr != nil {
		t.Skipf("cannot build the delaywheel binary: %v", buildErr)
	}
	cfg := Config{Targets: []string{TargetDelaywheel}, Binary: testBinary, TempDir: t.TempDir(), Stderr: t.Output()}
	cfg.Spawn, cfg.Groups, cfg.Topics, cfg.Consumers = 3, 3, 6, 6
	cfg.Workload, cfg.Rate, cfg.Duration, cfg.Lead, cfg.Grace = WorkloadFire, 200, 2*time.Second, 2*time.Second, 5*time.Second
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	res := rep.Results[0]
	if res.Error != "" || res.Fire == nil {
		t.Fatalf("fire over 3 groups: %+v", res)
	}
	if f := res.Fire; f.Sent != 400 || f.Received != 400 || f.Lost != 0 || f.Early != 0 {
		t.Fatalf("fire over 3 groups: sent %d received %d lost %d early %d, want 400 400 0 0", f.Sent, f.Received, f.Lost, f.Early)
	}
}

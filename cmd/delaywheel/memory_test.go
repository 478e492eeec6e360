package main

import (
	"errors"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestMemorySettingsValidate(t *testing.T) {
	ok := runtimeSettings{Limit: 64 << 20, GCPercent: 50, ReleaseIdleHeap: true}
	if err := ok.validate(); err != nil {
		t.Fatalf("valid settings: %v", err)
	}
	if err := (runtimeSettings{}).validate(); err != nil {
		t.Fatalf("zero settings (runtime defaults, no releasing): %v", err)
	}
	for flag, m := range map[string]runtimeSettings{
		"--memory-limit": {Limit: -1},
		"--gc-percent":   {GCPercent: -5},
		"--procs":        {Procs: -2},
	} {
		err := m.validate()
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%+v: error %v, want one naming %s", m, err, flag)
		}
	}
}

func TestMemorySettingsApplyAndRestore(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	limit0, percent0 := debug.SetMemoryLimit(-1), currentGCPercent()

	procs0 := runtime.GOMAXPROCS(0)
	restore := runtimeSettings{Procs: procs0 + 3, Limit: 96 << 20, GCPercent: 37}.apply(log)
	wantRuntime(t, "", procs0+3, 96<<20, 37)
	restore()
	wantRuntime(t, " after restore", procs0, limit0, percent0)

	// Zero leaves the runtime's own settings alone.
	restore = runtimeSettings{}.apply(log)
	wantRuntime(t, " with 0", procs0, limit0, percent0)
	restore()
	if limit0 != math.MaxInt64 {
		t.Logf("GOMEMLIMIT is set in this environment: %d", limit0)
	}
}

// wantRuntime checks the runtime's processors, memory limit and collector
// target (when, as the messages say, e.g. " after restore").
func wantRuntime(t *testing.T, when string, procs int, limit int64, percent int) {
	t.Helper()
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("procs%s = %d, want %d", when, got, procs)
	}
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("memory limit%s = %d, want %d", when, got, limit)
	}
	if got := currentGCPercent(); got != percent {
		t.Errorf("gc percent%s = %d, want %d", when, got, percent)
	}
}

// TestServerMemoryFlags checks that the memory flags (and the Raft log's
// segment size, the byte limits and the commit window) reach the settings:
// a bad value of each, from the command line or the environment, stops the
// server before it opens anything.
func TestServerMemoryFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		flag string
	}{
		{args: []string{"--memory-limit", "-1"}, flag: "--memory-limit"},
		{args: []string{"--gc-percent", "-20"}, flag: "--gc-percent"},
		{args: []string{"--raft-segment-bytes", "65536"}, flag: "--raft-segment-bytes"},
		{env: "DELAYWHEEL_RAFT_SEGMENT_BYTES=2147483648", flag: "--raft-segment-bytes"},
		{env: "DELAYWHEEL_GC_PERCENT=-3", flag: "--gc-percent"},
		{args: []string{"--max-body-bytes", "-1"}, flag: "--max-body-bytes -1: want at least 1 byte"},
		{args: []string{"--max-request-bytes", "-5"}, flag: "--max-request-bytes -5: want at least 1 byte"},
		{args: []string{"--max-body-bytes", "50331649"}, flag: "--max-body-bytes 50331649: want at least 1 byte and at most 50331648"},
		{env: "DELAYWHEEL_MAX_REQUEST_BYTES=67108864", flag: "--max-request-bytes 67108864: want at least 1 byte and at most 50331648"},
		{env: "DELAYWHEEL_COMMIT_LINGER=-1ms", flag: "--commit-linger"},
		{args: []string{"--max-delay", "0s"}, flag: "--max-delay 0s: want at least 1ms"},
		{env: "DELAYWHEEL_MAX_DELAY=500us", flag: "--max-delay 500µs: want at least 1ms"},
		{args: []string{"--max-delay", "-1h"}, flag: "--max-delay -1h0m0s: want at least 1ms"},
	} {
		t.Run(strings.Join(append(c.args, c.env), " "), func(t *testing.T) {
			if k, v, ok := strings.Cut(c.env, "="); ok {
				t.Setenv(k, v) // for this case only
			}
			dir := filepath.Join(t.TempDir(), "data")
			args := append([]string{"server", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"}, c.args...)
			_, err := run(t, args...)
			if err == nil || !strings.Contains(err.Error(), c.flag) {
				t.Errorf("error %v, want one naming %s", err, c.flag)
			}
			if _, statErr := os.Stat(dir); !errors.Is(statErr, os.ErrNotExist) {
				t.Error("the data dir was created before the settings were checked")
			}
		})
	}
	m := runtimeSettings{Limit: defaultMemoryLimit, GCPercent: defaultGCPercent, ReleaseIdleHeap: true}
	if err := m.validate(); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
}

func TestIdleReleaser(t *testing.T) {
	const mib = 1 << 20
	var allocated uint64
	releases := 0
	r := newIdleReleaser(slog.New(slog.DiscardHandler),
		func() uint64 { return allocated },
		func() { releases++; allocated += 16 << 10 })
	step := func(alloc uint64) bool {
		allocated += alloc
		return r.check()
	}
	// Quiet from the start: nothing to release.
	if step(0) || step(100<<10) {
		t.Fatal("released with no burst before")
	}
	// A burst of 30 MiB/interval: busy, no release while it lasts.
	for range 4 {
		if step(30 * mib) {
			t.Fatal("released during a burst")
		}
	}
	// Idle after it: one release, then none until the next burst.
	if !step(512<<10) || releases != 1 {
		t.Fatalf("no release once idle after 120 MiB (releases %d)", releases)
	}
	for range 5 {
		if step(200 << 10) {
			t.Fatal("released again with no burst since")
		}
	}
	// Steady moderate work that never looks idle: no release.
	for range 10 {
		if step(8 * mib) {
			t.Fatal("released under steady load")
		}
	}
	// It counts, though: the first quiet interval after it releases.
	if !step(0) || releases != 2 {
		t.Fatalf("no release once idle after 80 MiB of steady work (releases %d)", releases)
	}
	// The background work of an idle node with a backlog (its ticks) still
	// counts as idle after a burst.
	for range 3 {
		step(30 * mib)
	}
	if !step(3*mib) || releases != 3 {
		t.Fatalf("no release when only a backlog's ticks run after a burst (releases %d)", releases)
	}
	// A small burst below the threshold is not worth a release at once...
	step(20 * mib)
	if step(0) {
		t.Fatal("released at once after a 20 MiB burst")
	}
	// ...but once idleSpacing intervals have passed since the last
	// release, the garbage a quiet node piles up is.
	for i := 3; i < idleSpacing; i++ {
		if step(0) {
			t.Fatalf("released %d intervals after the last release", i)
		}
	}
	if !step(0) || releases != 4 {
		t.Fatalf("no release %d intervals after the last, with 20 MiB allocated since (releases %d)", idleSpacing, releases)
	}
	// Quiet intervals long after the last release, with less than
	// idleDrift allocated since, release nothing.
	for i := 0; i < 2*idleSpacing; i++ {
		if step(idleDrift / 32) {
			t.Fatalf("released after %d quiet intervals with less than idleDrift allocated", i+1)
		}
	}
	if !step(idleDrift-2*idleSpacing*(idleDrift/32)) || releases != 5 { // the rest of idleDrift
		t.Fatalf("no release once idleDrift was allocated, quietly (releases %d)", releases)
	}
	// A quiet node's drift alone releases once it reached idleDrift and
	// idleSpacing intervals passed, not before.
	want := max(int(idleDrift/mib), idleSpacing)
	for i := 1; i < want; i++ {
		if step(mib) {
			t.Fatalf("released after %d MiB of quiet drift in %d intervals", i, i)
		}
	}
	if !step(mib) || releases != 6 {
		t.Fatalf("no release after %d MiB of quiet drift in %d intervals (releases %d)", want, want, releases)
	}
}

// TestIdleReleaserCountsStartup: what the process allocated before the
// releaser started (opening the node, replaying its log) is a burst, and
// the first quiet interval after it releases.
func TestIdleReleaserCountsStartup(t *testing.T) {
	allocated := uint64(100 << 20)
	releases := 0
	r := newIdleReleaser(slog.New(slog.DiscardHandler), func() uint64 { return allocated }, func() { releases++ })
	if r.check() {
		t.Fatal("released while the startup's allocations were still being counted")
	}
	allocated += 256 << 10
	if !r.check() || releases != 1 {
		t.Fatalf("no release in the first quiet interval after startup (releases %d)", releases)
	}
}

// TestIdleReleaserBackgroundWork: once the clients stop (few Raft entries
// applied an interval), the node's own background work (the index's
// compactions after a fill) does not keep the burst's garbage resident,
// up to idleBackground an interval; under client load it does not count.
func TestIdleReleaserBackgroundWork(t *testing.T) {
	const mib = 1 << 20
	var allocated, index uint64
	releases := 0
	r := newIdleReleaser(slog.New(slog.DiscardHandler), func() uint64 { return allocated }, func() { releases++ })
	r.applied = func() uint64 { return index }
	step := func(alloc, entries uint64) bool {
		allocated += alloc
		index += entries
		return r.check()
	}
	step(0, 0)
	// A fill: 40 MiB and 200 entries an interval. No release.
	for range 5 {
		if step(40*mib, 200) {
			t.Fatal("released while clients were writing")
		}
	}
	// The clients stop; compactions go on allocating 20 MiB an interval
	// while only ticks apply: quiet, so the burst is released.
	if !step(20*mib, 2) || releases != 1 {
		t.Fatalf("no release when the clients stopped and only compactions allocated (releases %d)", releases)
	}
	// The same allocation with client entries is load, not quiet.
	for range 5 {
		if step(20*mib, idleEntries+1) {
			t.Fatal("released under client load")
		}
	}
	// Background work above idleBackground is not quiet either.
	if step(idleBackground+mib, 0) {
		t.Fatal("released while the process allocated more than idleBackground in an interval")
	}
	// Without the applied index, allocation alone decides, as before.
	r.applied = nil
	if step(20*mib, 0) {
		t.Fatal("released on 20 MiB an interval with no applied index to tell clients from background work")
	}
	if !step(0, 0) || releases != 2 {
		t.Fatalf("no release once quiet (releases %d)", releases)
	}
}

// precedenceCase is a command line and environment, and the value a
// server setting should read from them.
type precedenceCase struct {
	name string
	args []string
	env  []string
	want int
}

// checkPrecedence runs the server's flags over each case, with the
// runtime's variable unset unless the case sets it, and compares what
// read returns.
func checkPrecedence(t *testing.T, runtimeVar string, read func(*cli.Context) int, cases []precedenceCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(runtimeVar, "")
			os.Unsetenv(runtimeVar)
			for _, e := range c.env {
				k, v, _ := strings.Cut(e, "=")
				t.Setenv(k, v)
			}
			got := -100
			app := &cli.App{Flags: serverFlags(), Action: func(cc *cli.Context) error {
				got = read(cc)
				return nil
			}}
			if err := app.Run(append([]string{"delaywheel"}, c.args...)); err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("got %d, want %d", got, c.want)
			}
		})
	}
}

// TestGCPercentPrecedence checks where a server's collector target comes
// from: the flag (or its variable) when given, else GOGC when set, else
// the default.
func TestGCPercentPrecedence(t *testing.T) {
	checkPrecedence(t, "GOGC", gcPercent, []precedenceCase{
		{name: "default", want: defaultGCPercent},
		{name: "GOGC", env: []string{"GOGC=50"}, want: 0},
		{name: "flag over GOGC", args: []string{"--gc-percent", "200"}, env: []string{"GOGC=50"}, want: 200},
		{name: "variable over GOGC", env: []string{"GOGC=50", "DELAYWHEEL_GC_PERCENT=300"}, want: 300},
	})
}

// TestProcsPrecedence checks which processor count a server applies: the
// flag or its variable, else nothing when GOMAXPROCS is set (the runtime
// read it), else the runtime's count plus the spare ones.
func TestProcsPrecedence(t *testing.T) {
	checkPrecedence(t, "GOMAXPROCS", procs, []precedenceCase{
		{name: "default", want: runtime.GOMAXPROCS(0) + spareProcs},
		{name: "GOMAXPROCS", env: []string{"GOMAXPROCS=1"}, want: 0},
		{name: "flag over GOMAXPROCS", args: []string{"--procs", "3"}, env: []string{"GOMAXPROCS=1"}, want: 3},
		{name: "variable", env: []string{"DELAYWHEEL_PROCS=5"}, want: 5},
		{name: "negative, for validate to refuse", args: []string{"--procs", "-1"}, want: -1},
	})
}

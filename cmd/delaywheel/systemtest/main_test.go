package systemtest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"
)

var (
	chaosDuration = flag.Duration("chaos.duration", 0, "how long each chaos test keeps injecting faults under load (0: just its faults, as in CI)")
	chaosFaults   = flag.Int("chaos.faults", 0, "faults each chaos test injects (0: its CI default, 3 leader kills or 1 of the others)")
)

// binPath is the delaywheel binary built for this run; buildErr says why
// there is none.
var (
	binPath  string
	buildErr error
)

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "delaywheel-systemtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "systemtest:", err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	binPath, buildErr = Build(ctx, dir)
	cancel()
	if buildErr != nil {
		fmt.Fprintf(os.Stderr, "systemtest: the binary does not build, skipping the system tests: %v\n", buildErr)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binary returns the built binary or skips the test.
func binary(t testing.TB) string {
	t.Helper()
	if buildErr != nil {
		t.Skipf("delaywheel binary not built: %v", buildErr)
	}
	return binPath
}

// ctxFor returns a context that ends after d or with the test.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/urfave/cli/v2"
)

// runtimeSettings are the process-wide Go runtime settings of a server
// node: its processors and its memory.
type runtimeSettings struct {
	// Procs is the number of Go processors (runtime.GOMAXPROCS). 0 leaves
	// the runtime's own setting (the GOMAXPROCS environment variable, or
	// the CPUs the process may use).
	Procs int
	// Limit is the Go runtime's soft memory limit in bytes
	// (debug.SetMemoryLimit). 0 leaves the runtime's own setting (the
	// GOMEMLIMIT environment variable, or none).
	Limit int64
	// GCPercent is the Go collector's target (debug.SetGCPercent). 0 leaves
	// the runtime's own setting (the GOGC environment variable, or 100).
	GCPercent int
	// ReleaseIdleHeap hands the heap's free memory back to the kernel once
	// the process goes quiet after a burst of work, and now and then while
	// it stays quiet (see idleReleaser).
	ReleaseIdleHeap bool
}

// validate rejects settings the runtime would misread.
func (m runtimeSettings) validate() error {
	if m.Procs < 0 {
		return fmt.Errorf("--procs %d: want a count above 0, or 0 for the runtime's default", m.Procs)
	}
	if m.Limit < 0 {
		return fmt.Errorf("--memory-limit %d: want a byte count, or 0 for the runtime's default", m.Limit)
	}
	if m.GCPercent < 0 {
		return fmt.Errorf("--gc-percent %d: want a percentage above 0, or 0 for the runtime's default", m.GCPercent)
	}
	return nil
}

// apply sets the runtime's processors, memory limit and collector target
// and returns a function that puts back what was there before (tests run
// servers in one process).
func (m runtimeSettings) apply(log *slog.Logger) (restore func()) {
	prevProcs := runtime.GOMAXPROCS(0)
	prevLimit := debug.SetMemoryLimit(-1) // -1 reads it without a change
	prevPercent, setPercent := 0, m.GCPercent > 0
	if m.Procs > 0 {
		runtime.GOMAXPROCS(m.Procs)
	}
	if m.Limit > 0 {
		debug.SetMemoryLimit(m.Limit)
	}
	if setPercent {
		prevPercent = debug.SetGCPercent(m.GCPercent)
	}
	if m.Procs > 0 || m.Limit > 0 || m.GCPercent > 0 {
		limit := debug.SetMemoryLimit(-1)
		attrs := []any{"procs", runtime.GOMAXPROCS(0), "cpus", runtime.NumCPU(), "gc_percent", currentGCPercent()}
		if limit != math.MaxInt64 {
			attrs = append(attrs, "memory_limit_bytes", limit)
		}
		log.Info("go runtime settings", attrs...)
	}
	return func() {
		if m.Procs > 0 {
			runtime.GOMAXPROCS(prevProcs)
		}
		debug.SetMemoryLimit(prevLimit)
		if setPercent {
			debug.SetGCPercent(prevPercent)
		}
	}
}

// spareProcs is how many Go processors a server runs beyond the CPUs it
// may use, unless --procs or GOMAXPROCS says otherwise. Invariant: the
// goroutine that a due millisecond wakes (the fire loop, on the poller)
// finds an idle processor even while an apply and a compaction, which run
// for milliseconds without blocking, hold one each. With one processor
// per CPU it would wait for the runtime to preempt one of them, which it
// does every 10 ms; with a spare one it waits for the kernel, which runs a
// woken thread within its wake-up granularity. The cost is that CPU-bound
// work runs on more threads than CPUs and is time-sliced by the kernel.
const spareProcs = 2

// procs is the --procs a server applies: the flag when above 0, else the
// runtime's own setting when GOMAXPROCS is set, else the CPUs the process
// may use (the runtime's count, which honours a container's CPU limit)
// plus spareProcs.
func procs(c *cli.Context) int {
	if n := c.Int("procs"); n != 0 {
		return n
	}
	if os.Getenv("GOMAXPROCS") != "" {
		return 0
	}
	return runtime.GOMAXPROCS(0) + spareProcs
}

// gcPercent is the --gc-percent a server applies: the flag when given,
// else the runtime's own setting when GOGC is set, else the default.
func gcPercent(c *cli.Context) int {
	if !c.IsSet("gc-percent") && os.Getenv("GOGC") != "" {
		return 0
	}
	return c.Int("gc-percent")
}

// currentGCPercent reads the collector's target without changing it.
func currentGCPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return -1
	}
	return int(s[0].Value.Uint64())
}

// appliedIndex reads the node's applied Raft index (raft.Raft.AppliedIndex).
type appliedIndex func() uint64

// idleInterval is how often the idle releaser checks whether the process
// has gone quiet.
const idleInterval = time.Second

// release runs, until ctx ends, the heap's idle releaser when the settings
// ask for it.
func (m runtimeSettings) release(ctx context.Context, log *slog.Logger, applied appliedIndex) {
	if m.ReleaseIdleHeap {
		r := newIdleReleaser(log, heapAllocated, releaseHeaps)
		r.applied = applied
		go r.run(ctx, idleInterval)
	}
}

// Idle release thresholds. A check interval in which the process allocated
// at most idleQuiet bytes is quiet. The first quiet interval after at least
// idleBurst bytes were allocated since the heap was last released releases
// it. So does a quiet interval after idleDrift bytes, once idleSpacing
// intervals have passed since the last release: an idle node is not still.
// Each second it expires a slot and promotes the next second from the
// overflow, and now and then it takes a snapshot, and the collector, with
// its heap sized for the last burst, runs no cycle that would hand that
// garbage back: left alone, it refaults the pages the last release
// returned. A release on a quiet heap is one collection and a scavenge, so
// one every few seconds keeps an idle node's memory flat at little cost.
const (
	idleBurst   = 64 << 20
	idleDrift   = 2 << 20
	idleSpacing = 3
	idleQuiet   = 4 << 20
)

// An interval in which the node applied at most idleEntries Raft entries
// is quiet too, as long as it allocated at most idleBackground bytes: the
// clients have stopped, and what allocates is the node's own background
// work. An idle node applies one or two entries a second (its ticks);
// under load, every client request is one. After a large fill the index
// compacts what the fill wrote for a while, allocating more than idleQuiet
// an interval; this keeps the burst's garbage from staying resident until
// the compactions end.
const (
	idleEntries    = 4
	idleBackground = 64 << 20
)

// idleReleaser hands the heap's free memory back to the kernel when the
// process goes quiet. The collector sizes the heap for the last burst
// (twice the live heap at GOGC=100) and, with little allocation, starts no
// further cycle that would shrink it: the garbage of the last requests and
// the free spans stay resident. One collection and scavenge once the burst
// is over returns them, at no cost to the work, which has stopped; while
// the process stays quiet, another follows at most every idleSpacing
// intervals, once idleDrift bytes were allocated. In a build with cgo on
// Linux the C heap, where Pebble's cache and memtables live, is trimmed at
// the same moment. Under load above idleQuiet per interval the process
// never looks quiet, and GOGC and --memory-limit govern the heap as usual.
type idleReleaser struct {
	log       *slog.Logger
	allocated func() uint64 // bytes allocated since the process started
	release   func()
	applied   appliedIndex // nil: quiet is judged by allocation alone
	last      uint64       // allocated at the previous check
	lastIndex uint64       // applied index at the previous check
	since     uint64       // allocated since the last release
	checks    int          // checks since the last release
}

// newIdleReleaser returns a releaser that reads the process's allocation
// counter with allocated and releases with release.
func newIdleReleaser(log *slog.Logger, allocated func() uint64, release func()) *idleReleaser {
	// last starts at 0: what the process allocated before the releaser
	// started (opening the node, replaying its log) is a burst too.
	return &idleReleaser{log: log, allocated: allocated, release: release}
}

// releaseHeaps hands the free memory of Go's heap, and of the C heap in a
// build with cgo, back to the kernel.
func releaseHeaps() {
	debug.FreeOSMemory()
	trimCHeap()
}

// heapAllocated reads the bytes the heap has allocated since the start.
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// check is one interval's look at the allocation counter; it releases the
// heap and reports true when the process has gone quiet after a burst, or
// has stayed quiet long enough to pile up garbage worth releasing.
func (r *idleReleaser) check() bool {
	now := r.allocated()
	delta := now - r.last
	r.last = now
	r.since += delta
	r.checks++
	quiet := delta <= idleQuiet
	if r.applied != nil {
		index := r.applied()
		entries := index - r.lastIndex
		r.lastIndex = index
		quiet = quiet || (entries <= idleEntries && delta <= idleBackground)
	}
	if !quiet {
		return false
	}
	if r.since < idleBurst && (r.since < idleDrift || r.checks < idleSpacing) {
		return false
	}
	r.release()
	r.since, r.checks = 0, 0
	r.last = r.allocated() // the release's own allocations are not work
	return true
}

// run checks every interval until ctx ends.
func (r *idleReleaser) run(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() bool {
		start := time.Now()
		if r.check() {
			r.log.Debug("quiet: released the heap's free memory", "took", time.Since(start))
		}
		return true
	})
}

// every calls fn once an interval until ctx ends or fn returns false.
func every(ctx context.Context, interval time.Duration, fn func() (more bool)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !fn() {
			return
		}
	}
}

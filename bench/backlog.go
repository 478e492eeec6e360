package bench

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// BacklogResult is the outcome of the backlog workload.
//
// Resident memory is read at four moments, each as VmRSS and its anonymous
// and file-backed parts (see [memOf]): before the fill; 2 s after it; once it
// has settled after the fill (steady over several seconds, so that the
// server's background work after a burst is done); and once it has settled
// after a restart. Per-message figures divide by the pending count.
type BacklogResult struct {
	Fill EnqueueResult `json:"fill"`

	Pending             int64 `json:"pending"`               // the target's own count after the fill
	PendingAfterRestart int64 `json:"pending_after_restart"` // and after the restart (-1: not restarted)

	RSSEmpty         int64   `json:"rss_empty_bytes"`     // before the fill
	RSSFull          int64   `json:"rss_full_bytes"`      // 2 s after the fill
	RSSFullAnon      int64   `json:"rss_full_anon_bytes"` // of which anonymous
	RSSFullFile      int64   `json:"rss_full_file_bytes"` // of which mapped file pages
	RSSSettled       int64   `json:"rss_settled_bytes"`   // once steady after the fill
	RSSSettledAnon   int64   `json:"rss_settled_anon_bytes"`
	RSSSettledFile   int64   `json:"rss_settled_file_bytes"`
	SettledS         float64 `json:"settled_s"`           // from the end of the fill to the settled reading
	RSSRestarted     int64   `json:"rss_restarted_bytes"` // once steady after a restart
	RSSRestartedAnon int64   `json:"rss_restarted_anon_bytes"`
	RSSRestartedFile int64   `json:"rss_restarted_file_bytes"`
	RestartedS       float64 `json:"restarted_settled_s"` // from ready to the settled reading
	DiskEmpty        int64   `json:"disk_empty_bytes"`
	DiskFull         int64   `json:"disk_full_bytes"`

	RSSPerMsg          float64 `json:"rss_per_msg"`           // RSSFull / pending
	RSSDeltaPerMsg     float64 `json:"rss_delta_per_msg"`     // (RSSFull − RSSEmpty) / pending
	RSSSettledPerMsg   float64 `json:"rss_settled_per_msg"`   // RSSSettled / pending
	RSSRestartedPerMsg float64 `json:"rss_restarted_per_msg"` // RSSRestarted / pending
	DiskPerMsg         float64 `json:"disk_per_msg"`          // DiskFull / pending

	StopS           float64 `json:"stop_s"`             // SIGTERM → exit
	RestartToReadyS float64 `json:"restart_to_ready_s"` // start → ready
}

// backlogStride is a multiplier coprime with n, used to spread consecutive
// messages over the whole due range (a cheap permutation i → i·stride mod n).
func backlogStride(n int) int {
	for _, p := range []int{1_000_003, 999_983, 7_919, 104_729, 15_485_863} {
		if n%p != 0 {
			return p
		}
	}
	return 1
}

// backlogDue is the due time of message i of n: the range [base, base+span)
// visited in a scattered order.
func backlogDue(i, n int, base int64, span time.Duration, stride int) int64 {
	pos := int64(i) * int64(stride) % int64(n)
	return base + pos*span.Milliseconds()/int64(n)
}

// settle is how long the harness lets a server be still before it reads
// its memory.
const settle = 2 * time.Second

// Settling: after a burst, resident memory moves for a while (collections,
// released pages, index compactions). It is steady once steadySamples
// readings a second apart differ by at most steadyTolerance of the last (and
// never less than steadyMinBytes), or after settleMax.
const (
	steadySamples   = 5
	steadyTolerance = 0.01
	steadyMinBytes  = 1 << 20
	settleMax       = 60 * time.Second
)

// steady reports whether the last steadySamples readings of rss agree.
func steady(rss []int64) bool {
	if len(rss) < steadySamples {
		return false
	}
	last := rss[len(rss)-steadySamples:]
	lo, hi := last[0], last[0]
	for _, v := range last {
		if v < 0 {
			return false
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	return float64(hi-lo) <= max(steadyTolerance*float64(last[len(last)-1]), steadyMinBytes)
}

// settledResources reads the target's resources every second, from settle
// on, until resident memory is steady or settleMax has passed, and returns
// the last reading, how long it waited, and whether memory was steady.
func settledResources(ctx context.Context, t target) (resources, time.Duration, bool, error) {
	t0 := time.Now()
	if err := sleepCtx(ctx, settle); err != nil {
		return resources{}, 0, false, err
	}
	var rss []int64
	for {
		r, err := t.Resources(ctx)
		if err != nil {
			return r, time.Since(t0), false, err
		}
		rss = append(rss, r.RSSBytes)
		if steady(rss) {
			return r, time.Since(t0), true, nil
		}
		if time.Since(t0) >= settleMax {
			return r, time.Since(t0), false, nil
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			return r, time.Since(t0), false, err
		}
	}
}

// unsettledNote says that resident memory still moved when the harness
// took its reading, and what the reading then is.
func unsettledNote(after string, waited time.Duration) string {
	return fmt.Sprintf("resident memory %s did not settle within %.0f s (it moved by more than %.0f%% and %d MiB over %d readings a second apart): the reading is the last one, %.0f s after",
		after, settleMax.Seconds(), steadyTolerance*100, steadyMinBytes>>20, steadySamples, waited.Seconds())
}

// runBacklog is the backlog workload: cfg.Messages messages due 1 to 24 hours
// from now, then the server's memory and disk, a restart and the same again.
func runBacklog(ctx context.Context, cfg Config, t target, res *Result) error {
	b := &BacklogResult{PendingAfterRestart: -1, RSSRestarted: -1, RSSRestartedAnon: -1, RSSRestartedFile: -1}
	res.Backlog = b
	empty, err := t.Resources(ctx)
	if err != nil {
		res.Notes = append(res.Notes, "resources before the fill: "+err.Error())
	}
	b.RSSEmpty, b.DiskEmpty = empty.RSSBytes, empty.DiskBytes

	n := cfg.Messages
	base := time.Now().Add(time.Hour).UnixMilli()
	stride := backlogStride(n)
	p := newProducers(n, func(i int) int64 { return backlogDue(i, n, base, 23*time.Hour, stride) }, nil)
	stop := cfg.progress.Start(ctx, func() string {
		return fmt.Sprintf("backlog %s: %s/%s pending, %s/s", t.Name(), si(float64(p.done.Load())), si(float64(n)),
			si(float64(p.done.Load())/time.Since(p.start).Seconds()))
	})
	cw := startCPU(t)
	err = p.Run(ctx, &cfg, t)
	stop()
	b.Fill = *p.result(t)
	b.Fill.CPU = cw.end(int(p.done.Load()))
	res.Throughput, res.ThroughputOf = p.tl.Rates(120), "enqueued"
	if err != nil {
		return fmt.Errorf("fill: %w", err)
	}

	filled := time.Now()
	if err := sleepCtx(ctx, settle); err != nil {
		return err
	}
	if b.Pending, err = t.Pending(ctx); err != nil {
		return fmt.Errorf("pending: %w", err)
	}
	full, err := t.Resources(ctx)
	if err != nil {
		res.Notes = append(res.Notes, "resources after the fill: "+err.Error())
	}
	b.RSSFull, b.RSSFullAnon, b.RSSFullFile, b.DiskFull = full.RSSBytes, full.RSSAnonBytes, full.RSSFileBytes, full.DiskBytes
	settled, waited, ok, err := settledResources(ctx, t)
	if err != nil {
		res.Notes = append(res.Notes, "resources once settled after the fill: "+err.Error())
	} else if !ok {
		res.Notes = append(res.Notes, unsettledNote("after the fill", waited))
	}
	b.SettledS = round3(time.Since(filled).Seconds())
	b.RSSSettled, b.RSSSettledAnon, b.RSSSettledFile = settled.RSSBytes, settled.RSSAnonBytes, settled.RSSFileBytes
	if b.Pending > 0 {
		b.RSSPerMsg, b.DiskPerMsg, b.RSSSettledPerMsg = perMsg(b.RSSFull, b.Pending), perMsg(b.DiskFull, b.Pending), perMsg(b.RSSSettled, b.Pending)
		if b.RSSEmpty >= 0 && b.RSSFull >= 0 {
			b.RSSDeltaPerMsg = perMsg(b.RSSFull-b.RSSEmpty, b.Pending)
		}
	}
	if b.Pending != int64(p.done.Load()) {
		res.Notes = append(res.Notes, fmt.Sprintf("the target counts %d pending messages after %d acknowledged enqueues", b.Pending, p.done.Load()))
	}

	cfg.logger.Info("restarting", "target", t.Name())
	rt, err := t.Restart(ctx)
	if errors.Is(err, errNotSpawned) {
		res.Notes = append(res.Notes, "not restarted: the harness did not spawn this target")
		return nil
	}
	b.StopS, b.RestartToReadyS = round3(rt.Stop.Seconds()), round3(rt.Ready.Seconds())
	if err != nil {
		return err
	}
	if b.PendingAfterRestart, err = t.Pending(ctx); err != nil {
		return fmt.Errorf("pending after the restart: %w", err)
	}
	if b.PendingAfterRestart != b.Pending {
		res.Notes = append(res.Notes, fmt.Sprintf("pending changed across the restart: %d before, %d after", b.Pending, b.PendingAfterRestart))
	}
	r, waited, ok, err := settledResources(ctx, t)
	if err != nil {
		res.Notes = append(res.Notes, "resources once settled after the restart: "+err.Error())
	} else if !ok {
		res.Notes = append(res.Notes, unsettledNote("after the restart", waited))
	}
	b.RestartedS = round3(waited.Seconds())
	b.RSSRestarted, b.RSSRestartedAnon, b.RSSRestartedFile = r.RSSBytes, r.RSSAnonBytes, r.RSSFileBytes
	if b.Pending > 0 {
		b.RSSRestartedPerMsg = perMsg(r.RSSBytes, b.Pending)
	}
	return nil
}

// perMsg is v / pending, rounded; -1 when v is unknown.
func perMsg(v, pending int64) float64 {
	if v < 0 || pending <= 0 {
		return -1
	}
	return round3(float64(v) / float64(pending))
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// BacklogResult is the outcome of the backlog workload.
type BacklogResult struct {
	Fill EnqueueResult `json:"fill"`

	Pending             int64 `json:"pending"`               // the target's own count after the fill
	PendingAfterRestart int64 `json:"pending_after_restart"` // and after the restart (-1: not restarted)

	RSSEmpty     int64 `json:"rss_empty_bytes"`     // before the fill
	RSSFull      int64 `json:"rss_full_bytes"`      // after it
	RSSRestarted int64 `json:"rss_restarted_bytes"` // once ready after a restart
	DiskEmpty    int64 `json:"disk_empty_bytes"`
	DiskFull     int64 `json:"disk_full_bytes"`

	RSSPerMsg          float64 `json:"rss_per_msg"`           // RSSFull / pending
	RSSDeltaPerMsg     float64 `json:"rss_delta_per_msg"`     // (RSSFull − RSSEmpty) / pending
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

// runBacklog is the backlog workload: cfg.Messages messages due 1 to 24 hours
// from now, then the server's memory and disk, a restart and the same again.
func runBacklog(ctx context.Context, cfg Config, t target, res *Result) error {
	b := &BacklogResult{PendingAfterRestart: -1, RSSRestarted: -1}
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
	err = p.Run(ctx, &cfg, t)
	stop()
	b.Fill = *p.result(t)
	res.Throughput, res.ThroughputOf = p.tl.Rates(120), "enqueued"
	if err != nil {
		return fmt.Errorf("fill: %w", err)
	}

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
	b.RSSFull, b.DiskFull = full.RSSBytes, full.DiskBytes
	if b.Pending > 0 {
		per := func(v int64) float64 {
			if v < 0 {
				return -1
			}
			return round3(float64(v) / float64(b.Pending))
		}
		b.RSSPerMsg, b.DiskPerMsg = per(b.RSSFull), per(b.DiskFull)
		if b.RSSEmpty >= 0 && b.RSSFull >= 0 {
			b.RSSDeltaPerMsg = per(b.RSSFull - b.RSSEmpty)
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
	if err := sleepCtx(ctx, settle); err != nil {
		return err
	}
	if r, err := t.Resources(ctx); err == nil {
		b.RSSRestarted = r.RSSBytes
		if b.Pending > 0 && r.RSSBytes >= 0 {
			b.RSSRestartedPerMsg = round3(float64(r.RSSBytes) / float64(b.Pending))
		}
	}
	return nil
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

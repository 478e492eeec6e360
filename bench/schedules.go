package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// The schedules workload: cfg.Messages recurring schedules, each firing
// every cfg.Every into its own keys, observed by consumers for
// cfg.Duration: occurrences missed, duplicated and how late each reached
// a consumer. An --every longer than --duration starts the schedules a day
// later, so the run measures storing them alone. Then the leader's memory,
// and, when the harness spawned the cluster, a restart until ready.

// DefaultSchedules is how many schedules the workload sets by default.
const DefaultSchedules = 10_000

// SchedulesResult is the outcome of the schedules workload.
type SchedulesResult struct {
	Outcome                // one "message" per occurrence due within the run
	Schedules      int     `json:"schedules"`
	EveryMs        int64   `json:"every_ms"`
	Fired          bool    `json:"fired"`              // false: the schedules start after the run (storage only)
	SetS           float64 `json:"set_s"`              // how long setting them took
	SetPerSec      float64 `json:"set_per_s"`          // its rate
	HeadroomS      float64 `json:"headroom_s"`         // first occurrence − end of setting; < 0: they overlapped
	RSSBefore      int64   `json:"rss_before"`         // the leader's, before setting
	RSSStored      int64   `json:"rss_stored"`         // settled after the run
	DiskStored     int64   `json:"disk_stored"`        // after the run
	RSSPerSchedule float64 `json:"rss_per_sched"`      // (RSSStored − RSSBefore) / schedules
	StopS          float64 `json:"stop_s"`             // SIGTERM → exit (-1: not spawned)
	RestartToReady float64 `json:"restart_to_ready_s"` // start → ready (-1: not spawned)
	RSSRestarted   int64   `json:"rss_restarted"`      // settled after the restart (-1: not restarted)
	ConsumerErrors int64   `json:"consumer_errors"`
	// CPU is the spawned servers' CPU time from the first occurrence to
	// the end of the wait for the last, per occurrence due in the run.
	CPU *ServerCPU `json:"server_cpu,omitempty"`
}

// scheduleSetter is a target whose Enqueue sets one schedule per message:
// message i is schedule i, its body the body of each occurrence.
type scheduleSetter struct {
	*dwTarget
	prefix  string
	everyMs int64
	startMs int64
	n       int // schedules
}

// phase is how long after startMs schedule i starts. The schedules' phases
// spread evenly over one interval, as independent users' schedules do, so
// that the run measures 10,000 occurrences a second rather than 10,000 in
// one millisecond of each second.
func (s scheduleSetter) phase(i int) int64 { return int64(i) * s.everyMs / int64(max(s.n, 1)) }

func (s scheduleSetter) Enqueue(ctx context.Context, msgs []msg) error {
	for _, m := range msgs {
		req := api.ScheduleRequest{Topic: s.topics[0], EveryMs: s.everyMs, StartAtMs: s.startMs + s.phase(m.Seq), Payload: api.TextBody(m.Body)}
		err := s.call(ctx, func(c *client.Client) error {
			_, err := c.SetSchedule(ctx, s.name(m.Seq), req)
			return err
		})
		if err != nil {
			return fmt.Errorf("set schedule %d: %w", m.Seq, err)
		}
	}
	return nil
}

func (s scheduleSetter) name(i int) string { return fmt.Sprintf("%s-%d", s.prefix, i) }

// runSchedules is the schedules workload.
func runSchedules(ctx context.Context, cfg Config, t target, res *Result) error {
	dw, ok := t.(*dwTarget)
	if !ok {
		return errors.New("schedules: a delaywheel target only")
	}
	if dw.consume == ConsumeWebhook {
		return errors.New("schedules: --consume webhook is not supported; use reserve, reserve-inline or stream")
	}
	n, every := cfg.Messages, cfg.Every
	sr := &SchedulesResult{Schedules: n, EveryMs: every.Milliseconds(), StopS: -1, RestartToReady: -1, RSSRestarted: -1}
	res.Schedules = sr
	if r, err := t.Resources(ctx); err == nil {
		sr.RSSBefore = r.RSSBytes
	}
	lead := cfg.Lead
	if lead == 0 {
		// Schedules are set one call each, at about 2,000 a second on three
		// nodes; the estimate assumes half that, so that setting ends before
		// the first occurrences fire: setting while they fire measures both
		// at once, and occurrences of schedules not yet set count as missed.
		lead = autoLead(n, 1000)
	}
	start := time.Now()
	firstMs := start.Add(lead).UnixMilli()
	per := 0 // occurrences of each schedule within the run
	sr.Fired = every <= cfg.Duration
	if sr.Fired {
		per = int((cfg.Duration + every - 1) / every)
	} else {
		firstMs = start.Add(24 * time.Hour).UnixMilli()
	}
	set := scheduleSetter{dwTarget: dw, prefix: "bench-" + cfg.runID, everyMs: every.Milliseconds(), startMs: firstMs, n: n}
	due := make([]int64, n*per) // occurrence k of schedule i is seq i·per+k
	for i := range n {
		for k := range per {
			due[i*per+k] = firstMs + set.phase(i) + int64(k)*every.Milliseconds()
		}
	}
	led := newLedger(due)
	prod := newProducers(n, func(int) int64 { return firstMs }, func(idx []int) {
		seqs := make([]int, 0, len(idx)*per)
		for _, i := range idx {
			for k := range per {
				seqs = append(seqs, i*per+k)
			}
		}
		led.Sent(seqs)
	})

	cctx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	var wg sync.WaitGroup
	var cerrs atomic.Int64
	if sr.Fired {
		seqOf := func(d api.Delivery) int {
			i := decodeSeq(bodyOf(d))
			if i < 0 || i >= n {
				return -1
			}
			since := d.DeliverAtMs - firstMs - set.phase(i)
			k := since / every.Milliseconds()
			if k < 0 || k >= int64(per) || since%every.Milliseconds() != 0 {
				return -1
			}
			return i*per + int(k)
		}
		for range cfg.Consumers {
			var c consumer
			if dw.consume == ConsumeStream {
				sc := newDWStreamConsumer(ctx, dw)
				sc.seqOf, c = seqOf, sc
			} else {
				rc := newDWConsumer(ctx, dw)
				rc.seqOf, c = seqOf, rc
			}
			wg.Go(func() {
				defer c.Close()
				for cctx.Err() == nil {
					b, err := c.Next(cctx)
					if len(b.Seqs) > 0 {
						led.Received(b.At, b.Seqs)
					}
					if err != nil && cctx.Err() == nil {
						cerrs.Add(1)
						sleepCtx(cctx, 20*time.Millisecond)
					}
				}
			})
		}
	}
	stop := cfg.progress.Start(ctx, func() string {
		return fmt.Sprintf("schedules %s: set %s/%s, occurrences received %s/%s", t.Name(),
			si(float64(prod.done.Load())), si(float64(n)), si(float64(led.ReceivedCount())), si(float64(len(due))))
	})
	perr := prod.Run(ctx, &cfg, set)
	sr.SetS, sr.SetPerSec = round3(prod.end.Sub(prod.start).Seconds()), round3(prod.Rate())
	sr.HeadroomS = round3(time.UnixMilli(firstMs).Sub(prod.end).Seconds())
	if perr == nil && sr.Fired {
		sleepCtx(ctx, time.Until(time.UnixMilli(firstMs)))
		cw := startCPU(t)
		end := time.UnixMilli(firstMs).Add(cfg.Duration).Add(cfg.Grace)
		for ctx.Err() == nil && time.Now().Before(end) && led.ReceivedCount() < len(due) {
			sleepCtx(ctx, 50*time.Millisecond)
		}
		sr.CPU = cw.end(len(due))
	}
	stopConsumers()
	wg.Wait()
	stop()
	sr.Outcome, sr.ConsumerErrors = led.Outcome(), cerrs.Load()
	sr.Outcome.Messages = len(due)
	if perr != nil {
		return fmt.Errorf("set schedules: %w", perr)
	}
	r, _, settled, err := settledResources(ctx, t)
	if err != nil {
		return err
	}
	if !settled {
		res.Notes = append(res.Notes, "resident memory after the run did not settle; the reading is the last one")
	}
	sr.RSSStored, sr.DiskStored = r.RSSBytes, r.DiskBytes
	if n > 0 && sr.RSSBefore > 0 {
		sr.RSSPerSchedule = round3(float64(sr.RSSStored-sr.RSSBefore) / float64(n))
	}
	rt, err := t.Restart(ctx)
	switch {
	case errors.Is(err, errNotSpawned):
		return deleteSchedules(ctx, set, n)
	case err != nil:
		return err
	}
	sr.StopS, sr.RestartToReady = round3(rt.Stop.Seconds()), round3(rt.Ready.Seconds())
	if r, _, _, err := settledResources(ctx, t); err == nil {
		sr.RSSRestarted = r.RSSBytes
	}
	return nil
}

// bodyOf is a delivery's body as text.
func bodyOf(d api.Delivery) string {
	b, _ := d.Bytes()
	return string(b)
}

// deleteSchedules removes the schedules a run set on a cluster the harness
// did not spawn.
func deleteSchedules(ctx context.Context, s scheduleSetter, n int) error {
	for i := range n {
		err := s.call(ctx, func(c *client.Client) error {
			err := c.DeleteSchedule(ctx, s.name(i))
			if client.HasCode(err, api.CodeNotFound) {
				return nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("delete schedule %d: %w", i, err)
		}
	}
	return nil
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// FireResult is the outcome of the fire workload.
type FireResult struct {
	Outcome
	LeadS          float64 `json:"lead_s"`            // from the start of enqueueing to the first due time
	EnqueueS       float64 `json:"enqueue_s"`         // how long enqueueing took
	EnqueuePerSec  float64 `json:"enqueue_per_s"`     // its rate
	HeadroomS      float64 `json:"headroom_s"`        // first due time − end of enqueueing; < 0: they overlapped
	ConsumerErrors int64   `json:"consumer_errors"`   // failed reserves and acks
	Retries        int64   `json:"retries,omitempty"` // enqueue and ack calls retried
	// CPU is the servers' CPU time from the start of enqueueing to the end
	// of the wait for deliveries, per message: what a message costs from
	// its enqueue through its hand-off to its ack. EnqueueCPU is the part
	// spent while enqueueing (which includes firing where the two
	// overlapped, HeadroomS < 0).
	CPU        *ServerCPU `json:"server_cpu,omitempty"`
	EnqueueCPU *ServerCPU `json:"enqueue_server_cpu,omitempty"`
}

// fireRun is a fire workload in progress.
type fireRun struct {
	led      *ledger
	tl       *timeline // first deliveries, from the first due time
	firstDue time.Time
	lastDue  time.Time
	prod     *producers
	settled  bool      // the wait ended because every message was accounted for
	waitEnd  time.Time // when the wait for deliveries ended
}

// fireSchedule returns the due times (ms) of n messages coming due evenly at
// rate per second from firstMs.
func fireSchedule(n, rate int, firstMs int64) []int64 {
	due := make([]int64, n)
	for i := range due {
		due[i] = firstMs + int64(i)*1000/int64(rate)
	}
	return due
}

// autoLead is how far ahead of the first due time enqueueing starts: enough
// for the target's usual enqueue rate to finish first, plus two seconds.
func autoLead(n int, hint float64) time.Duration {
	return 2*time.Second + time.Duration(float64(n)/hint*float64(time.Second))
}

// runFire is the fire workload.
func runFire(ctx context.Context, cfg Config, t target, res *Result) error {
	if dw, ok := t.(*dwTarget); ok && dw.consume == ConsumeWebhook {
		return runWebhookFire(ctx, cfg, dw, res)
	}
	fr, err := fire(ctx, cfg, t, res, fireOpts{settleEarly: true})
	if fr != nil {
		res.Throughput, res.ThroughputOf = fr.tl.Rates(120), "delivered"
	}
	return err
}

// fireOpts shape a fire run beyond its Config.
type fireOpts struct {
	// during, when set, runs in its own goroutine once the consumers are
	// open; fire waits for it to return.
	during func(context.Context, *fireRun)
	// settleEarly ends the wait for deliveries, two seconds after the last
	// due time at the earliest, once settled says so.
	settleEarly bool
	// settled says whether every acknowledged message is accounted for;
	// nil: each was received.
	settled func(context.Context, *fireRun) bool
	// wait is how long after the last due time deliveries are awaited at
	// most (0: cfg.Grace).
	wait time.Duration
}

// fire runs the fire workload as opt says.
func fire(ctx context.Context, cfg Config, t target, res *Result, opt fireOpts) (*fireRun, error) {
	n := cfg.fireMessages()
	if n == 0 {
		return nil, errors.New("fire: --rate × --duration is no message")
	}
	lead := cfg.Lead
	if lead == 0 {
		lead = autoLead(n, t.EnqueueRateHint())
	}
	start := time.Now()
	firstMs := start.Add(lead).UnixMilli()
	due := fireSchedule(n, cfg.Rate, firstMs)
	fr := &fireRun{
		led:      newLedger(due),
		tl:       newTimeline(time.UnixMilli(firstMs)),
		firstDue: time.UnixMilli(firstMs),
		lastDue:  time.UnixMilli(due[n-1]),
	}
	fr.prod = newProducers(n, func(i int) int64 { return due[i] }, fr.led.Sent)

	// Consumers first: they long-poll until the end of the run.
	cctx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	var (
		wg      sync.WaitGroup
		cerrs   atomic.Int64
		lastErr atomic.Value
	)
	for i := range cfg.Consumers {
		c, err := t.NewConsumer(ctx)
		if err != nil {
			return nil, fmt.Errorf("consumer %d: %w", i, err)
		}
		wg.Go(func() {
			defer c.Close()
			for cctx.Err() == nil {
				b, err := c.Next(cctx)
				if len(b.Seqs) > 0 {
					fr.led.Received(b.At, b.Seqs)
					fr.tl.Add(b.At, len(b.Seqs))
				}
				if err != nil && cctx.Err() == nil {
					if cerrs.Add(1)%100 == 1 {
						cfg.logger.Warn("consumer", "target", t.Name(), "err", err)
					}
					lastErr.Store(err.Error())
					select {
					case <-cctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
		})
	}
	var dwg sync.WaitGroup
	if opt.during != nil {
		dwg.Go(func() { opt.during(cctx, fr) })
	}

	stop := cfg.progress.Start(ctx, func() string {
		now := time.Now()
		dueNow := 0
		if now.After(fr.firstDue) {
			dueNow = min(n, int(now.Sub(fr.firstDue).Seconds()*float64(cfg.Rate)))
		}
		return fmt.Sprintf("%s %s: enqueued %s/%s, due %s, received %s", cfg.Workload, t.Name(),
			si(float64(fr.prod.done.Load())), si(float64(n)), si(float64(dueNow)), si(float64(fr.led.ReceivedCount())))
	})
	cw := startCPU(t)
	perr := fr.prod.Run(ctx, &cfg, t)
	enqCPU := cw.end(int(fr.prod.done.Load()))
	if perr != nil {
		fr.led.Failed(n - int(fr.prod.done.Load()))
	} else if fr.prod.end.After(fr.firstDue) {
		cfg.logger.Warn("enqueueing overlapped the firing; set a longer --lead", "target", t.Name(),
			"late_by", fr.prod.end.Sub(fr.firstDue).Round(time.Millisecond))
	}

	// Wait for the deliveries: until opt.wait (or grace) after the last
	// due time, or (outside failover, where redeliveries come later) until
	// every acknowledged message is accounted for and two seconds passed.
	wait := opt.wait
	if wait == 0 {
		wait = cfg.Grace
	}
	settled := opt.settled
	if settled == nil {
		settled = func(context.Context, *fireRun) bool { return fr.led.ReceivedCount() >= int(fr.prod.done.Load()) }
	}
	end := fr.lastDue.Add(wait)
	if perr == nil {
		sleepCtx(ctx, time.Until(fr.firstDue))
	}
	tick := time.NewTicker(50 * time.Millisecond)
	for perr == nil && ctx.Err() == nil && time.Now().Before(end) {
		if opt.settleEarly && time.Now().After(fr.lastDue.Add(2*time.Second)) && settled(ctx, fr) {
			fr.settled = true
			break
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	tick.Stop()
	fr.waitEnd = time.Now()
	stopConsumers()
	wg.Wait()
	dwg.Wait()
	stop()

	o := fr.led.Outcome()
	res.Fire = &FireResult{
		Outcome:        o,
		LeadS:          round3(lead.Seconds()),
		EnqueueS:       round3(fr.prod.end.Sub(fr.prod.start).Seconds()),
		EnqueuePerSec:  round3(fr.prod.Rate()),
		HeadroomS:      round3(fr.firstDue.Sub(fr.prod.end).Seconds()),
		ConsumerErrors: cerrs.Load(),
		CPU:            cw.end(o.Messages),
		EnqueueCPU:     enqCPU,
	}
	if dw, ok := t.(*dwTarget); ok {
		res.Fire.Retries = dw.retries.Load()
	}
	if s, ok := lastErr.Load().(string); ok {
		res.Notes = append(res.Notes, "last consumer error: "+s)
	}
	if perr != nil {
		return fr, fmt.Errorf("enqueue: %w", perr)
	}
	return fr, ctx.Err()
}

// FailoverResult is the outcome of the failover workload.
type FailoverResult struct {
	KilledNode  string  `json:"killed_node"`
	KillAtS     float64 `json:"kill_at_s"`   // after the first due time
	NewLeader   string  `json:"new_leader"`  // first leader another node reported
	ElectionMs  float64 `json:"election_ms"` // kill → a survivor knows the new leader
	DownS       float64 `json:"down_s"`      // kill → restart of the killed node
	RejoinMs    float64 `json:"rejoin_ms"`   // restart → the killed node answers /readyz
	GapMs       float64 `json:"gap_ms"`      // longest interval without a delivery around the kill
	GapStartS   float64 `json:"gap_start_s"` // when that gap began, relative to the kill
	KillError   string  `json:"kill_error,omitempty"`
	ExpectedGap float64 `json:"steady_gap_ms"` // the interval between due times (1000/rate)
}

// runFailover runs fire on a spawned cluster and kills its leader with
// SIGKILL cfg.KillAfter after the first due time, restarting it cfg.Down
// later.
func runFailover(ctx context.Context, cfg Config, t target, res *Result) error {
	dw, ok := t.(*dwTarget)
	if !ok || dw.cluster == nil || len(dw.cluster.nodes) < 3 {
		return errors.New("failover needs a three-node cluster spawned by the harness (--spawn 3)")
	}
	ttr := int64(5000)
	dw.ttrMs = &ttr // redeliveries of unacknowledged leases come back within the grace
	fo := &FailoverResult{ExpectedGap: round3(1000 / float64(cfg.Rate))}
	var killAt time.Time
	fr, err := fire(ctx, cfg, t, res, fireOpts{during: func(ctx context.Context, fr *fireRun) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(fr.firstDue.Add(cfg.KillAfter))):
		}
		killAt = killLeader(ctx, cfg, dw, fo)
	}})
	res.Failover = fo
	if fr != nil {
		res.Throughput, res.ThroughputOf = fr.tl.Rates(240), "delivered"
		if !killAt.IsZero() {
			fo.KillAtS = round3(killAt.Sub(fr.firstDue).Seconds())
			gap, at := fr.led.Gap(killAt.Add(-time.Second), fr.lastDue)
			fo.GapMs = round3(float64(gap) / float64(time.Millisecond))
			fo.GapStartS = round3(at.Sub(killAt).Seconds())
		}
	}
	return err
}

// killLeader kills the leader, measures the election, restarts the killed
// node after cfg.Down and waits until it is ready. It returns when the kill
// happened (zero if it did not).
func killLeader(ctx context.Context, cfg Config, dw *dwTarget, fo *FailoverResult) time.Time {
	dw.refreshLeader(ctx)
	victim := dw.leaderNode()
	fo.KilledNode = victim.id
	if err := victim.proc.Kill(); err != nil {
		fo.KillError = err.Error()
		return time.Time{}
	}
	killAt := time.Now()
	cfg.logger.Info("killed the leader with SIGKILL", "node", victim.id)
	dw.failover(ctx, dw.leader.Load())

	// Election: poll the survivors until one names another leader.
	elected := make(chan struct{})
	go func() {
		defer close(elected)
		for ctx.Err() == nil && time.Since(killAt) < time.Minute {
			for i, nd := range dw.cluster.nodes {
				if nd == victim {
					continue
				}
				cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				info, err := dw.clients[i].ClusterLocal(cctx)
				cancel()
				if err == nil && info.Leader != "" && info.Leader != victim.id {
					fo.NewLeader = info.Leader
					fo.ElectionMs = round3(float64(time.Since(killAt)) / float64(time.Millisecond))
					return
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	select {
	case <-ctx.Done():
		<-elected
		return killAt
	case <-time.After(time.Until(killAt.Add(cfg.Down))):
	}
	restartAt := time.Now()
	fo.DownS = round3(restartAt.Sub(killAt).Seconds())
	if err := victim.proc.Start(); err != nil {
		fo.KillError = fmt.Sprintf("restart: %v", err)
		<-elected
		return killAt
	}
	cl := dw.clients[slices.Index(dw.cluster.nodes, victim)]
	if err := waitReady(ctx, victim.proc, time.Minute, cl.Readyz); err != nil {
		fo.KillError = fmt.Sprintf("restart: %v", err)
	} else {
		fo.RejoinMs = round3(float64(time.Since(restartAt)) / float64(time.Millisecond))
	}
	<-elected
	return killAt
}

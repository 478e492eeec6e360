package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// producers enqueues messages 0 … n-1 from cfg.Producers goroutines in
// batches of cfg.Batch; batches are taken in order, so messages go out
// roughly in sequence (the fire workload enqueues in due order).
type producers struct {
	n     int
	due   func(seq int) int64 // the message's deliver_at_ms
	sent  func(seqs []int)    // called after each acknowledged batch; may be nil
	tl    *timeline
	done  atomic.Int64 // messages acknowledged
	start time.Time
	end   time.Time
	lat   *hdrhistogram.Histogram // µs per enqueue call, retries included
}

func newProducers(n int, due func(int) int64, sent func([]int)) *producers {
	now := time.Now()
	return &producers{n: n, due: due, sent: sent, tl: newTimeline(now), start: now, lat: newHist()}
}

// Run enqueues every message and returns the first error, which stops all
// producers. Call it right after newProducers: the rate counts from there.
func (p *producers) Run(ctx context.Context, cfg *Config, t target) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := (p.n + cfg.Batch - 1) / cfg.Batch
	pad := padding(cfg.BodySize)
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range cfg.Producers {
		wg.Go(func() {
			local := newHist()
			defer func() {
				mu.Lock()
				p.lat.Merge(local)
				mu.Unlock()
			}()
			msgs := make([]msg, 0, cfg.Batch)
			seqs := make([]int, 0, cfg.Batch)
			for ctx.Err() == nil {
				b := int(next.Add(1) - 1)
				if b >= batches {
					return
				}
				lo, hi := b*cfg.Batch, min(p.n, (b+1)*cfg.Batch)
				msgs, seqs = msgs[:0], seqs[:0]
				for s := lo; s < hi; s++ {
					msgs = append(msgs, msg{Seq: s, DeliverAtMs: p.due(s), Body: encodeBody(s, cfg.BodySize, pad)})
					seqs = append(seqs, s)
				}
				t0 := time.Now()
				err := t.Enqueue(ctx, msgs)
				t1 := time.Now()
				if err != nil {
					mu.Lock()
					if firstErr == nil && ctx.Err() == nil {
						firstErr = fmt.Errorf("messages %d…%d: %w", lo, hi-1, err)
					}
					mu.Unlock()
					cancel()
					return
				}
				recordMicros(local, t1.Sub(t0).Microseconds())
				p.tl.Add(t1, hi-lo)
				p.done.Add(int64(hi - lo))
				if p.sent != nil {
					p.sent(seqs)
				}
			}
		})
	}
	wg.Wait()
	p.end = time.Now()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// Rate is the messages acknowledged per second over the whole run.
func (p *producers) Rate() float64 {
	secs := p.end.Sub(p.start).Seconds()
	if secs <= 0 {
		return 0
	}
	return float64(p.done.Load()) / secs
}

// EnqueueResult is the outcome of the enqueue workload (and of the fill of a
// backlog).
type EnqueueResult struct {
	Messages int64      `json:"messages"` // acknowledged
	Seconds  float64    `json:"seconds"`
	PerSec   float64    `json:"per_s"`
	Latency  Summary    `json:"call_latency"` // one enqueue call of a batch
	CDF      []CDFPoint `json:"call_latency_cdf,omitempty"`
	Retries  int64      `json:"retries,omitempty"`
	// CPU is the servers' CPU time over the enqueue, when it can be read.
	CPU *ServerCPU `json:"server_cpu,omitempty"`
}

func (p *producers) result(t target) *EnqueueResult {
	r := &EnqueueResult{
		Messages: p.done.Load(),
		Seconds:  round3(p.end.Sub(p.start).Seconds()),
		PerSec:   round3(p.Rate()),
		Latency:  summarize(p.lat),
		CDF:      cdf(p.lat),
	}
	if dw, ok := t.(*dwTarget); ok {
		r.Retries = dw.retries.Load()
	}
	return r
}

// runEnqueue is the enqueue workload: cfg.Messages messages due cfg.Delay
// from now, spread over one minute.
func runEnqueue(ctx context.Context, cfg Config, t target, res *Result) error {
	n := cfg.Messages
	base := time.Now().Add(cfg.Delay).UnixMilli()
	p := newProducers(n, func(i int) int64 { return base + int64(i)*60_000/int64(n) }, nil)
	stop := cfg.progress.Start(ctx, func() string {
		return fmt.Sprintf("enqueue %s: %s/%s messages, %s/s", t.Name(), si(float64(p.done.Load())), si(float64(n)),
			si(float64(p.done.Load())/time.Since(p.start).Seconds()))
	})
	cw := startCPU(t)
	err := p.Run(ctx, &cfg, t)
	stop()
	res.Enqueue = p.result(t)
	res.Enqueue.CPU = cw.end(int(p.done.Load()))
	res.Throughput, res.ThroughputOf = p.tl.Rates(120), "enqueued"
	return err
}

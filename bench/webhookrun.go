package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/delaywheel/delaywheel/transport/client"
)

// maxMaxAttempts is the server's upper bound of a message's max_attempts.
const maxMaxAttempts = 1000

// Webhook retries as the server schedules them (replication/webhook): a
// failed attempt k waits webhookBackoff·2^(k-1), at most webhookMaxBackoff.
const (
	webhookBackoff    = time.Second
	webhookMaxBackoff = time.Hour
)

// webhookDrain is the longest a message can take from its first attempt
// to its last when every attempt fails at once: the sum of the backoffs
// between maxAttempts attempts (at most an hour), plus 30 s for the queue
// of requests ahead of it and the commits of its nacks.
func webhookDrain(maxAttempts int) time.Duration {
	var sum time.Duration
	b := webhookBackoff
	for k := 1; k < maxAttempts && sum < time.Hour; k++ {
		sum += b
		b = min(2*b, webhookMaxBackoff)
	}
	return min(sum, time.Hour) + 30*time.Second
}

// WebhookResult is what a fire run with --consume webhook adds.
type WebhookResult struct {
	MaxConcurrency int     `json:"max_concurrency"`
	MaxAttempts    int     `json:"max_attempts"`
	FailRate       float64 `json:"fail_rate"`
	Hang           bool    `json:"hang"`
	// The receiver's count of the requests it took, answered 2xx and
	// answered 500.
	Requests    int64 `json:"requests"`
	Answered2xx int64 `json:"answered_2xx_requests"`
	Answered500 int64 `json:"answered_500_requests"`

	// Account is what became of the messages (not with Hang).
	Account *WebhookAccount `json:"account,omitempty"`
	// Drain: from the last due time until every message was answered 2xx
	// or dead, or until DrainLimitS passed (DrainTimedOut).
	DrainS        float64 `json:"drain_s,omitempty"`
	DrainLimitS   float64 `json:"drain_limit_s,omitempty"`
	DrainTimedOut bool    `json:"drain_timed_out,omitempty"`

	// Hold is what a receiver that never answers did to the leader (Hang).
	Hold *WebhookHold `json:"hold,omitempty"`
	// NotApplicable says which checks a Hang run does not make, and why.
	NotApplicable string `json:"not_applicable,omitempty"`
}

// WebhookAccount is what became of the messages of a webhook run with
// failures: each acknowledged message should end answered 2xx or dead
// after exactly max_attempts attempts.
type WebhookAccount struct {
	Sent     int   `json:"sent"`         // enqueue acknowledged
	Answered int   `json:"answered_2xx"` // sent messages the receiver answered 2xx at least once
	Dead     int64 `json:"dead"`         // the topic's dead letters
	// Lost is Sent − Answered − the dead letters that were neither answered
	// nor foreign: acknowledged messages with no final answer. Exact when
	// the listing held every dead letter (DeadListed = Dead).
	Lost              int   `json:"lost"`
	DeadListed        int   `json:"dead_listed"`                // dead letters the listing returned (it is bounded)
	AttemptViolations int   `json:"attempt_violations"`         // listed dead letters whose attempts ≠ max_attempts
	AnsweredAndDead   int   `json:"answered_and_dead"`          // listed dead letters the receiver had answered 2xx
	ForeignDead       int   `json:"foreign_dead,omitempty"`     // listed dead letters this run did not send
	Delayed           int64 `json:"pending_delayed,omitempty"`  // still waiting for a retry when counted
	Ready             int64 `json:"pending_ready,omitempty"`    // due, not yet sent
	Reserved          int64 `json:"pending_reserved,omitempty"` // requests in flight
}

// Pending is how many messages the topic still held when counted.
func (a *WebhookAccount) Pending() int64 { return a.Delayed + a.Ready + a.Reserved }

// deadLetter is one dead message of the listing.
type deadLetter struct {
	seq      int // decodeSeq of its body
	attempts int32
}

// accountWebhook tallies a webhook run: sent[i] and answered[i] say
// whether message i's enqueue was acknowledged and whether the receiver
// answered it 2xx; dead is the topic's count of dead letters and listed
// the ones its listing returned.
func accountWebhook(sent, answered []bool, dead int64, listed []deadLetter, maxAttempts int) WebhookAccount {
	a := WebhookAccount{Dead: dead, DeadListed: len(listed)}
	for i, ok := range sent {
		if !ok {
			continue
		}
		a.Sent++
		if answered[i] {
			a.Answered++
		}
	}
	for _, d := range listed {
		if int(d.attempts) != maxAttempts {
			a.AttemptViolations++
		}
		switch {
		case d.seq < 0 || d.seq >= len(sent) || !sent[d.seq]:
			a.ForeignDead++
		case answered[d.seq]:
			a.AnsweredAndDead++
		}
	}
	a.Lost = a.Sent - a.Answered - int(dead-int64(a.AnsweredAndDead+a.ForeignDead))
	return a
}

// deadListLimit is the most dead letters one listing returns (the
// server's bound).
const deadListLimit = 1000

// account counts the dead letters of the target's topics and tallies the
// run.
func (t *dwTarget) account(ctx context.Context, fr *fireRun, maxAttempts int) (WebhookAccount, error) {
	tc, err := t.counts(ctx)
	if err != nil {
		return WebhookAccount{}, err
	}
	var listed []deadLetter
	if tc.Dead > 0 {
		err := t.call(ctx, func(c *client.Client) error {
			listed = listed[:0]
			for _, topic := range t.topics {
				vs, err := c.Dead(ctx, topic, deadListLimit)
				if err != nil {
					return err
				}
				for _, v := range vs {
					b, _ := v.Bytes()
					listed = append(listed, deadLetter{seq: decodeSeq(string(b)), attempts: v.Attempts})
				}
			}
			return nil
		})
		if err != nil {
			return WebhookAccount{}, fmt.Errorf("dead letters: %w", err)
		}
	}
	sent, answered := fr.led.sentAndReceived()
	a := accountWebhook(sent, answered, tc.Dead, listed, maxAttempts)
	a.Delayed, a.Ready, a.Reserved = tc.Delayed, tc.Ready, tc.Reserved
	return a, nil
}

// WebhookHold is what the leader did while the receiver held every
// request: its webhook requests in flight, and the nodes' resident memory.
type WebhookHold struct {
	InflightMetric string `json:"inflight_metric"`
	// Min and max of the 1 s samples of InflightMetric on the leader from
	// one second after the first due time to the end of the run.
	InflightMin     float64   `json:"inflight_min"`
	InflightMax     float64   `json:"inflight_max"`
	InflightSamples int       `json:"inflight_samples"`
	RSS             []NodeRSS `json:"rss,omitempty"`
}

// NodeRSS is one node's resident memory (VmRSS) over the due window of a
// run: at its first sample, halfway, at the last, and the largest; -1 is
// unknown.
type NodeRSS struct {
	Node        string `json:"node"`
	Leader      bool   `json:"leader,omitempty"`
	StartBytes  int64  `json:"start_bytes"`
	MiddleBytes int64  `json:"middle_bytes"`
	EndBytes    int64  `json:"end_bytes"`
	MaxBytes    int64  `json:"max_bytes"`
}

// webhookInflightMetric is the leader's gauge of stream deliveries handed
// out and not yet settled: a webhook sender is a stream whose window is
// the webhook's max_concurrency, and a bench run opens no other stream.
const webhookInflightMetric = "delaywheel_stream_inflight"

// holdSample is one second of a hang run; -1 is unknown.
type holdSample struct {
	at       time.Time
	inflight float64
	rss      []int64 // by node
}

// summarizeHold reduces the samples taken at or after from.
func summarizeHold(samples []holdSample, from time.Time, nodes []string) WebhookHold {
	h := WebhookHold{InflightMetric: webhookInflightMetric, InflightMin: -1, InflightMax: -1}
	var window []holdSample
	for _, s := range samples {
		if !s.at.Before(from) {
			window = append(window, s)
		}
	}
	for _, s := range window {
		if s.inflight < 0 {
			continue
		}
		if h.InflightSamples == 0 || s.inflight < h.InflightMin {
			h.InflightMin = s.inflight
		}
		h.InflightMax = max(h.InflightMax, s.inflight)
		h.InflightSamples++
	}
	for i, name := range nodes {
		var known []int64
		for _, s := range window {
			if i < len(s.rss) && s.rss[i] >= 0 {
				known = append(known, s.rss[i])
			}
		}
		n := NodeRSS{Node: name, StartBytes: -1, MiddleBytes: -1, EndBytes: -1, MaxBytes: -1}
		if len(known) > 0 {
			n.StartBytes, n.MiddleBytes, n.EndBytes = known[0], known[len(known)/2], known[len(known)-1]
			for _, v := range known {
				n.MaxBytes = max(n.MaxBytes, v)
			}
		}
		h.RSS = append(h.RSS, n)
	}
	return h
}

// sampleHold takes one sample: the leader's in-flight gauge and each
// node's resident memory (spawned nodes from /proc; a cluster the harness
// did not spawn, its leader's process_resident_memory_bytes).
func (t *dwTarget) sampleHold(ctx context.Context) holdSample {
	s := holdSample{at: time.Now(), inflight: -1}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if v, err := t.scrapeMetric(sctx, webhookInflightMetric); err == nil {
		s.inflight = v
	}
	if t.cluster == nil {
		rss, _ := t.scrapeRSS(sctx)
		s.rss = []int64{rss}
		return s
	}
	for _, nd := range t.cluster.nodes {
		m, _ := nd.proc.Mem()
		s.rss = append(s.rss, m.RSS)
	}
	return s
}

// holdNodes names the nodes sampleHold samples.
func (t *dwTarget) holdNodes() []string {
	if t.cluster == nil {
		return []string{"leader " + t.addrs[t.leader.Load()]}
	}
	var out []string
	for _, nd := range t.cluster.nodes {
		out = append(out, nd.id)
	}
	return out
}

// runWebhookFire is the fire workload with --consume webhook: with
// failures, it waits for the retries and accounts for every message;
// with a receiver that hangs, it samples the leader's requests in flight
// and the nodes' memory instead.
func runWebhookFire(ctx context.Context, cfg Config, dw *dwTarget, res *Result) error {
	wr := &WebhookResult{MaxConcurrency: webhookConcurrency, MaxAttempts: cfg.MaxAttempts, FailRate: cfg.WebhookFailRate, Hang: cfg.WebhookHang}
	res.Webhook = wr
	var (
		fr  *fireRun
		err error
	)
	if cfg.WebhookHang {
		var samples []holdSample
		fr, err = fire(ctx, cfg, dw, res, fireOpts{during: func(ctx context.Context, _ *fireRun) {
			tickUntil(ctx, time.Second, func() { samples = append(samples, dw.sampleHold(ctx)) })
		}})
		if fr != nil {
			dw.refreshLeader(context.WithoutCancel(ctx))
			hold := summarizeHold(samples, fr.firstDue.Add(time.Second), dw.holdNodes())
			if dw.cluster != nil {
				leader := dw.leaderNode().id
				for i := range hold.RSS {
					hold.RSS[i].Leader = hold.RSS[i].Node == leader
				}
			}
			wr.Hold = &hold
			wr.NotApplicable = "lateness and lost do not apply: the receiver never answers (--webhook-hang)"
		}
	} else {
		var (
			polled time.Time
			dead   int64
		)
		fr, err = fire(ctx, cfg, dw, res, fireOpts{settleEarly: true, wait: cfg.Drain, settled: func(ctx context.Context, fr *fireRun) bool {
			sent, got := int(fr.prod.done.Load()), fr.led.ReceivedCount()
			if got >= sent {
				return true
			}
			if time.Since(polled) >= time.Second { // the rest is retried with backoffs of seconds
				polled = time.Now()
				if tc, err := dw.counts(ctx); err == nil {
					dead = tc.Dead
				}
			}
			return got+int(dead) >= sent
		}})
		if fr != nil {
			wr.DrainS = round3(fr.waitEnd.Sub(fr.lastDue).Seconds())
			wr.DrainLimitS = round3(cfg.Drain.Seconds())
			wr.DrainTimedOut = !fr.settled && err == nil
		}
		if fr != nil && err == nil {
			a, aerr := dw.account(ctx, fr, cfg.MaxAttempts)
			if aerr != nil {
				err = fmt.Errorf("account for the messages: %w", aerr)
			} else {
				wr.Account = &a
				// Lost, for a webhook, is a message with no final answer:
				// a dead message went through its attempts and is not lost.
				res.Fire.Lost = a.Lost
			}
		}
	}
	if r := dw.hook; r != nil {
		wr.Requests, wr.Answered2xx, wr.Answered500 = r.requests.Load(), r.ok.Load(), r.failed.Load()
	}
	if fr != nil {
		res.Throughput, res.ThroughputOf = fr.tl.Rates(120), "delivered"
	}
	return err
}

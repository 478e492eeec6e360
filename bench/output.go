package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write JSON report: %w", err)
	}
	return nil
}

// Title describes the run in one line.
func (r *Report) Title() string {
	p := r.Params
	switch r.Workload {
	case WorkloadEnqueue:
		return fmt.Sprintf("enqueue: %d messages, %d producers, batches of %d, %d-byte bodies", p.Messages, p.Producers, p.Batch, p.BodySize)
	case WorkloadFire, WorkloadFailover:
		s := fmt.Sprintf("%s: %d messages coming due at %d/s for %s, %d consumers (reserve max %d, wait %d ms), Redis poll %s",
			r.Workload, p.Messages, p.Rate, time.Duration(p.DurationS*float64(time.Second)), p.Consumers, p.ReserveMax, p.WaitMs,
			time.Duration(p.RedisPollMs*float64(time.Millisecond)))
		if r.Workload == WorkloadFailover {
			s += "; the leader is killed with SIGKILL and restarted"
		}
		return s
	case WorkloadBacklog:
		return fmt.Sprintf("backlog: %d messages pending 1–24 h ahead, %d producers, batches of %d, %d-byte bodies", p.Messages, p.Producers, p.Batch, p.BodySize)
	case WorkloadSchedules:
		return fmt.Sprintf("schedules: %d recurring schedules, each into its own keys, observed for %s by %d consumers",
			p.Messages, time.Duration(p.DurationS*float64(time.Second)), p.Consumers)
	}
	return r.Workload
}

// target describes where delaywheel ran.
func (r *Report) target() string {
	if len(r.Params.Addrs) > 0 {
		return "delaywheel at " + strings.Join(r.Params.Addrs, ",")
	}
	return fmt.Sprintf("delaywheel spawned, %d node(s)", r.Params.Spawn)
}

// WriteTable writes the report as a human-readable table.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n%s; %d CPUs, %s/%s", r.Title(), r.target(), r.Host.CPUs, r.Host.OS, r.Host.Arch)
	if r.Host.LoadAvg != "" {
		fmt.Fprintf(&b, ", load average %s at the start", r.Host.LoadAvg)
	}
	b.WriteString("\n")
	if d := r.durability(); d != "" {
		b.WriteString(d + "\n")
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(cells ...any) {
		for _, c := range cells {
			fmt.Fprintf(tw, "%v\t", c)
		}
		fmt.Fprintln(tw)
	}
	ran := r.ran()
	switch r.Workload {
	case WorkloadEnqueue:
		row("target", "messages", "seconds", "msg/s", "server CPU µs/msg", "call p50 ms", "p90", "p99", "p99.9", "max")
		for _, res := range ran {
			e := res.Enqueue
			row(res.Target, e.Messages, f3(e.Seconds), f0(e.PerSec), e.CPU.perMsgUs(), f2(e.Latency.P50), f2(e.Latency.P90), f2(e.Latency.P99), f2(e.Latency.P999), f2(e.Latency.Max))
		}
	case WorkloadFire, WorkloadFailover:
		head := []any{"target", "sent", "received", "lost", "early", "dup", "late p50 ms", "p90", "p99", "p99.9", "max", "server CPU µs/msg"}
		if r.Workload == WorkloadFailover {
			head = append(head, "killed", "election ms", "gap ms")
		}
		row(head...)
		for _, res := range ran {
			f := res.Fire
			l := f.Lateness
			cells := []any{res.Target, f.Sent, f.Received, f.Lost, f.Early, f.Duplicates, f2(l.P50), f2(l.P90), f2(l.P99), f2(l.P999), f2(l.Max), f.CPU.perMsgUs()}
			if wh := res.Webhook; wh != nil && wh.Hang {
				cells = []any{res.Target, f.Sent, f.Received, "n/a", f.Early, f.Duplicates, "n/a", "n/a", "n/a", "n/a", "n/a", f.CPU.perMsgUs()}
			}
			if fo := res.Failover; fo != nil {
				cells = append(cells, fo.KilledNode, f0(fo.ElectionMs), f0(fo.GapMs))
			}
			row(cells...)
		}
	case WorkloadBacklog:
		row("target", "pending", "fill msg/s", "fill server CPU µs/msg", "disk", "disk B/msg", "stop s", "restart→ready s")
		for _, res := range ran {
			k := res.Backlog
			row(res.Target, k.Pending, f0(k.Fill.PerSec), k.Fill.CPU.perMsgUs(), bytesStr(k.DiskFull), f1(k.DiskPerMsg), f2(k.StopS), f3(k.RestartToReadyS))
		}
		tw.Flush()
		b.WriteString("\nresident memory (VmRSS = anonymous + mapped file pages, the executable's included):\n")
		row("target", "when", "RSS", "anon", "file", "RSS B/msg")
		for _, res := range ran {
			k := res.Backlog
			row(res.Target, "before the fill", bytesStr(k.RSSEmpty), "", "", "")
			row("", "2 s after the fill", bytesStr(k.RSSFull), bytesStr(k.RSSFullAnon), bytesStr(k.RSSFullFile), f1(k.RSSPerMsg))
			row("", fmt.Sprintf("settled, %.0f s after the fill", k.SettledS), bytesStr(k.RSSSettled), bytesStr(k.RSSSettledAnon), bytesStr(k.RSSSettledFile), f1(k.RSSSettledPerMsg))
			if k.RSSRestarted >= 0 {
				row("", fmt.Sprintf("settled, %.0f s after a restart", k.RestartedS), bytesStr(k.RSSRestarted), bytesStr(k.RSSRestartedAnon), bytesStr(k.RSSRestartedFile), f1(k.RSSRestartedPerMsg))
			}
		}
	case WorkloadSchedules:
		row("target", "every ms", "set/s", "occurrences", "received", "missed", "early", "dup", "late p50 ms", "p99", "max", "RSS B/sched", "restart→ready s")
		for _, res := range ran {
			s := res.Schedules
			l := s.Lateness
			row(res.Target, s.EveryMs, f0(s.SetPerSec), s.Messages, s.Received, s.Lost+int(s.Failed), s.Early, s.Duplicates,
				f2(l.P50), f2(l.P99), f2(l.Max), f1(s.RSSPerSchedule), f3(s.RestartToReady))
		}
	}
	tw.Flush()
	for _, res := range ran {
		if res.Webhook != nil {
			writeWebhook(&b, res.Target, res.Webhook)
		}
		if c := res.serverCPU(); c != nil {
			leader := ""
			if c.LeaderSec >= 0 {
				leader = fmt.Sprintf("; the leader %.1f s", c.LeaderSec)
			}
			enq := ""
			if res.Fire != nil && res.Fire.EnqueueCPU != nil {
				enq = fmt.Sprintf(" (%.1f µs of it while enqueueing)", res.Fire.EnqueueCPU.Seconds*1e6/float64(max(c.Messages, 1)))
			}
			fmt.Fprintf(&b, "%s: the servers used %.1f s of CPU over %.1f s (%.2f cores%s), %.1f µs a message%s\n",
				res.Target, c.Seconds, c.WindowS, c.Cores, leader, c.PerMsgUs, enq)
		}
	}
	for _, res := range r.Results {
		switch {
		case res.Skipped != "":
			fmt.Fprintf(&b, "skipped: %s\n", res.Skipped)
		case res.Error != "":
			fmt.Fprintf(&b, "%s failed: %s\n", res.Target, res.Error)
		}
		for _, n := range res.Notes {
			fmt.Fprintf(&b, "%s: %s\n", res.Target, n)
		}
	}
	for _, c := range r.Comparisons() {
		fmt.Fprintln(&b, c)
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// writeWebhook writes what a webhook run adds: the account of its
// messages, or what a receiver that hangs did to the leader.
func writeWebhook(b *strings.Builder, target string, wh *WebhookResult) {
	fmt.Fprintf(b, "\n%s: max_concurrency %d, max_attempts %d; ", target, wh.MaxConcurrency, wh.MaxAttempts)
	if wh.Hang {
		fmt.Fprintf(b, "the receiver took %d requests and held each unanswered (--webhook-hang)\n", wh.Requests)
	} else {
		fmt.Fprintf(b, "the receiver took %d requests, answered %d 2xx and %d 500 (--webhook-fail-rate %g)\n",
			wh.Requests, wh.Answered2xx, wh.Answered500, wh.FailRate)
	}
	if a := wh.Account; a != nil {
		fmt.Fprintf(b, "  sent %d = answered 2xx %d + dead %d + lost %d; dead letters listed %d, attempts ≠ max_attempts %d",
			a.Sent, a.Answered, a.Dead, a.Lost, a.DeadListed, a.AttemptViolations)
		if a.AnsweredAndDead > 0 || a.ForeignDead > 0 {
			fmt.Fprintf(b, ", dead yet answered 2xx %d, dead not sent by this run %d", a.AnsweredAndDead, a.ForeignDead)
		}
		b.WriteString("\n")
	}
	if !wh.Hang && wh.DrainLimitS > 0 {
		if wh.DrainTimedOut {
			fmt.Fprintf(b, "  drain timed out %.1f s after the last due time", wh.DrainS)
			if a := wh.Account; a != nil {
				fmt.Fprintf(b, ": still pending %d (delayed for a retry %d, ready %d, in flight %d)", a.Pending(), a.Delayed, a.Ready, a.Reserved)
			}
			b.WriteString("\n")
		} else {
			fmt.Fprintf(b, "  every message accounted for %.1f s after the last due time (drain limit %.0f s)\n", wh.DrainS, wh.DrainLimitS)
		}
	}
	if h := wh.Hold; h != nil {
		fmt.Fprintf(b, "  %s on the leader, %d samples 1 s apart from 1 s after the first due time: min %s, max %s (max_concurrency %d)\n",
			h.InflightMetric, h.InflightSamples, f0(h.InflightMin), f0(h.InflightMax), wh.MaxConcurrency)
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  node\tRSS at the first due time\thalfway\tat the end\tmax\t")
		for _, n := range h.RSS {
			name := n.Node
			if n.Leader {
				name += " (leader)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t\n", name, bytesStr(n.StartBytes), bytesStr(n.MiddleBytes), bytesStr(n.EndBytes), bytesStr(n.MaxBytes))
		}
		tw.Flush()
	}
	if wh.NotApplicable != "" {
		fmt.Fprintf(b, "  %s\n", wh.NotApplicable)
	}
}

// ran are the results that carry the workload's numbers.
func (r *Report) ran() []Result {
	var out []Result
	for _, res := range r.Results {
		ok := false
		switch r.Workload {
		case WorkloadEnqueue:
			ok = res.Enqueue != nil
		case WorkloadFire, WorkloadFailover:
			ok = res.Fire != nil
		case WorkloadBacklog:
			ok = res.Backlog != nil
		case WorkloadSchedules:
			ok = res.Schedules != nil
		}
		if ok {
			out = append(out, res)
		}
	}
	return out
}

// Comparisons are delaywheel's figures as ratios of each alternative's:
// ratios from one run hold across machines better than absolute figures.
func (r *Report) Comparisons() []string {
	var dw *Result
	ran := r.ran()
	for i := range ran {
		if strings.HasPrefix(ran[i].Target, TargetDelaywheel) {
			dw = &ran[i]
			break
		}
	}
	if dw == nil || dw.Error != "" {
		return nil
	}
	var out []string
	for _, alt := range ran {
		if alt.Target == dw.Target || alt.Error != "" {
			continue
		}
		if d, a := dw.serverCPU(), alt.serverCPU(); d != nil && a != nil && d.PerMsgUs > 0 && a.PerMsgUs > 0 {
			out = append(out, fmt.Sprintf("server CPU per message: delaywheel = %s× %s", times(d.PerMsgUs/a.PerMsgUs, 2), alt.Target))
		}
		switch r.Workload {
		case WorkloadEnqueue:
			if alt.Enqueue.PerSec > 0 {
				out = append(out, fmt.Sprintf("enqueue rate: delaywheel = %s× %s", times(dw.Enqueue.PerSec/alt.Enqueue.PerSec, 2), alt.Target))
			}
		case WorkloadFire:
			if alt.Fire.Lateness.P99 > 0 && (dw.Webhook == nil || !dw.Webhook.Hang) {
				out = append(out, fmt.Sprintf("p99 lateness: delaywheel = %s× %s", times(dw.Fire.Lateness.P99/alt.Fire.Lateness.P99, 3), alt.Target))
			}
		case WorkloadBacklog:
			d, a := dw.Backlog, alt.Backlog
			if a.RSSPerMsg > 0 && d.RSSPerMsg > 0 {
				out = append(out, fmt.Sprintf("resident bytes per pending message: delaywheel = %s× %s settled after the fill (2 s after it: %s×; settled after a restart: %s×)",
					times(ratio(d.RSSSettledPerMsg, a.RSSSettledPerMsg), 4), alt.Target, times(d.RSSPerMsg/a.RSSPerMsg, 4), times(ratio(d.RSSRestartedPerMsg, a.RSSRestartedPerMsg), 4)))
			}
		}
	}
	return out
}

// times formats a ratio with prec decimals, or with two significant digits
// where those decimals would show a ratio above 0 as 0 (an alternative far
// behind: 0.00021× rather than 0.000×).
func times(x float64, prec int) string {
	if x > 0 && x < 0.5*math.Pow10(-prec) {
		return strconv.FormatFloat(x, 'g', 2, 64)
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}

func ratio(a, b float64) float64 {
	if b <= 0 || a < 0 {
		return 0
	}
	return a / b
}

func f0(v float64) string { return fmt.Sprintf("%.0f", v) }
func f1(v float64) string { return fmt.Sprintf("%.1f", v) }
func f2(v float64) string { return fmt.Sprintf("%.2f", v) }
func f3(v float64) string { return fmt.Sprintf("%.3f", v) }

// bytesStr formats a byte count with a binary unit; "?" when unknown.
func bytesStr(n int64) string {
	switch {
	case n < 0:
		return "?"
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// durability says how the alternatives that ran persist what they accept.
func (r *Report) durability() string {
	var parts []string
	for _, res := range r.Results {
		if res.Skipped != "" {
			continue
		}
		switch res.Target {
		case TargetRedis:
			parts = append(parts, "redis: AOF appendfsync always")
		case TargetBeanstalkd:
			if r.Params.BeanstalkdFsyncMs > 0 {
				parts = append(parts, fmt.Sprintf("beanstalkd: binlog fsync at most every %d ms", r.Params.BeanstalkdFsyncMs))
			} else {
				parts = append(parts, "beanstalkd: binlog fsync on every write")
			}
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "delaywheel: Raft log fsync before each answer; " + strings.Join(parts, "; ")
}

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/bench"
)

// benchCommand is `delaywheel bench <workload>`.
func benchCommand() *cli.Command {
	describe := map[string]string{
		bench.WorkloadEnqueue:   "N messages from P producers in batches of B: messages/s and enqueue-call latency",
		bench.WorkloadFire:      "R messages/s coming due for D, C consumers long-polling: lateness percentiles, lost, early, duplicated",
		bench.WorkloadBacklog:   "N messages pending 1–24 h ahead: resident memory and disk per pending message, restart-to-ready time",
		bench.WorkloadFailover:  "fire on a spawned 3-node cluster while the leader is killed (SIGKILL) and restarted",
		bench.WorkloadSchedules: "N recurring schedules (default 10,000) every --every, observed for --duration: missed, duplicated, lateness; then leader memory and restart-to-ready",
	}
	var subs []*cli.Command
	for _, w := range bench.Workloads() {
		subs = append(subs, &cli.Command{
			Name:   w,
			Usage:  describe[w],
			Flags:  benchFlags(),
			Action: func(c *cli.Context) error { return runBench(c, w) },
		})
	}
	subs = append(subs, &cli.Command{
		Name: "webhook",
		Usage: "fire through a topic's webhook: a receiver in the harness takes the POSTs of a spawned 3-node " +
			"cluster (default 5,000 msg/s): lateness at the receiver, lost, early, duplicated; with " +
			"--webhook-fail-rate every message ends answered 2xx or dead; --webhook-hang measures in-flight and memory",
		Flags:  benchFlags(),
		Action: func(c *cli.Context) error { return runBench(c, webhookWorkload) },
	})
	return &cli.Command{
		Name:  "bench",
		Usage: "load-test delaywheel side by side with Redis and beanstalkd",
		Description: "Runs one workload against each target in turn: delaywheel (a cluster at --addr, or\n" +
			"--spawn 1|3 nodes of this binary in temporary directories), Redis (a sorted set popped\n" +
			"by a Lua script every --redis-poll, AOF appendfsync always) and beanstalkd (binlog,\n" +
			"fsync on every write). The alternatives are spawned on free loopback ports when their\n" +
			"server is installed, and skipped otherwise. Prints a table (or --json) and can write\n" +
			"a self-contained HTML report with charts (--report). Ctrl-C stops cleanly and removes\n" +
			"everything the run spawned.",
		Subcommands: subs,
	}
}

func benchFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "targets", Value: cli.NewStringSlice(bench.AllTargets()...), Usage: "targets to run, comma-separated: " + strings.Join(bench.AllTargets(), ",")},
		&cli.IntFlag{Name: "spawn", Usage: "spawn a delaywheel cluster of `N` nodes (1 or 3); default 1 without --addr (3 for failover)"},
		&cli.StringSliceFlag{Name: "addr", Usage: "HTTP addresses of a running delaywheel cluster, comma-separated"},
		&cli.IntSliceFlag{Name: "server-pid", Usage: "with --addr or --beanstalkd-target-addr: pids of the cluster's server processes on this machine, comma-separated; their CPU time is read from /proc and reported per message (spawned servers are always measured)"},
		&cli.StringFlag{Name: "proto", Value: bench.ProtoHTTP, Usage: "the API delaywheel is enqueued and streamed through: http (protobuf over HTTP, the NDJSON stream), json (the same with JSON enqueues) or grpc (a spawned cluster's gRPC Enqueue and Subscribe)"},
		&cli.StringFlag{Name: "binary", Usage: "delaywheel binary to spawn (default: this executable)"},
		&cli.StringFlag{Name: "token-file", Usage: "file holding the bearer token of the delaywheel API (spawned nodes require it too)"},
		&cli.IntFlag{Name: "messages", Aliases: []string{"n"}, Usage: fmt.Sprintf("messages to enqueue (default %d; backlog %d; fire: rate × duration); schedules: how many schedules (default %d)", bench.DefaultEnqueueMessages, bench.DefaultBacklogMessages, bench.DefaultSchedules)},
		&cli.IntFlag{Name: "producers", Value: bench.DefaultProducers, Usage: "concurrent producers"},
		&cli.IntFlag{Name: "batch", Value: bench.DefaultBatch, Usage: "messages per enqueue call"},
		&cli.IntFlag{Name: "body-size", Value: bench.DefaultBodySize, Usage: "message body size in bytes"},
		&cli.DurationFlag{Name: "delay", Usage: "enqueue: how far ahead the messages are due (default 30m)"},
		&cli.IntFlag{Name: "rate", Value: bench.DefaultRate, Usage: "fire, failover: messages coming due per second"},
		&cli.DurationFlag{Name: "duration", Value: bench.DefaultDuration, Usage: "fire, failover: how long messages come due"},
		&cli.IntFlag{Name: "consumers", Value: bench.DefaultConsumers, Usage: "fire, failover: concurrent consumers"},
		&cli.IntFlag{Name: "groups", Value: 1, Usage: "delaywheel: the spawned cluster's --groups, Raft groups per node"},
		&cli.IntFlag{Name: "topics", Value: 1, Usage: "delaywheel: spread the messages over `K` topics, each consumer taking one (needs --consumers of at least K)"},
		&cli.StringFlag{Name: "consume", Value: bench.ConsumeReserve, Usage: "fire, failover, schedules: how delaywheel delivers: reserve (long-polls, acks in the background), reserve-inline (each batch acked before the next reserve), stream, or webhook (POSTs to a receiver in the harness; fire and failover only)"},
		&cli.Float64Flag{Name: "webhook-fail-rate", Usage: "--consume webhook: share of requests the receiver answers 500, at random (e.g. 0.2); the run waits for the retries and accounts for every message: answered 2xx, dead after max_attempts, or lost"},
		&cli.BoolFlag{Name: "webhook-hang", Usage: "--consume webhook: the receiver answers no request until the run ends; reports the leader's requests in flight and the nodes' resident memory instead of lateness and lost"},
		&cli.IntFlag{Name: "max-attempts", Usage: "delaywheel: the messages' max_attempts (default: the server's; 10 with --consume webhook)"},
		&cli.DurationFlag{Name: "drain", Usage: "--consume webhook: how long after the last due time the retries are awaited at most (default: their whole backoff schedule plus 30s)"},
		&cli.IntFlag{Name: "reserve-max", Value: bench.DefaultReserveMax, Usage: "most messages per reserve (delaywheel) or pop (Redis)"},
		&cli.IntFlag{Name: "max-inflight", Usage: "delaywheel streams (--consume stream): each stream's window, deliveries not yet acked (default: the server's, 1000)"},
		&cli.DurationFlag{Name: "wait", Value: bench.DefaultWait, Usage: "long-poll wait of a reserve"},
		&cli.DurationFlag{Name: "redis-poll", Value: bench.DefaultRedisPoll, Usage: "Redis: interval between polls of the Lua pop"},
		&cli.StringFlag{Name: "beanstalkd-target-addr", Usage: "drive this running beanstalkd-protocol server as the beanstalkd target instead of spawning beanstalkd, e.g. a delaywheel node's --beanstalkd-addr"},
		&cli.DurationFlag{Name: "beanstalkd-fsync", Usage: "beanstalkd -f: fsync its binlog at most this often (default 0: every write, the durability of the others)"},
		&cli.DurationFlag{Name: "lead", Usage: "fire, schedules: from the start of enqueueing (setting) to the first due time (default: estimated per target)"},
		&cli.DurationFlag{Name: "grace", Usage: "fire: how long after the last due time deliveries are awaited (default 10s; failover 20s)"},
		&cli.DurationFlag{Name: "kill-after", Usage: "failover: from the first due time to the kill (default a third of --duration)"},
		&cli.DurationFlag{Name: "down", Usage: "failover: how long the killed leader stays down (default 3s)"},
		&cli.DurationFlag{Name: "every", Usage: "schedules: each schedule's interval (default 1s); longer than --duration: stored only, not fired"},
		&cli.BoolFlag{Name: "json", Usage: "print the report as JSON instead of a table"},
		&cli.StringFlag{Name: "report", Usage: "also write a self-contained HTML report with charts to `FILE`"},
		&cli.BoolFlag{Name: "verbose", Usage: "log what the harness spawns"},
		&cli.BoolFlag{Name: "keep", Usage: "keep the spawned servers' data directories and logs (their path is logged)"},
	}
}

// harnessGCPercent is the bench harness's collector target.
const harnessGCPercent = 400

// runBench runs one workload with the flags of c.
func runBench(c *cli.Context, workload string) error {
	if c.Args().Present() {
		return fmt.Errorf("bench %s takes no arguments, got %q (flags go before or after the workload, e.g. --spawn 1)", workload, c.Args().Slice())
	}
	ctx := c.Context // ends at SIGINT or SIGTERM (main)
	// The harness shares the machine with the servers it measures: with a
	// larger collector target it spends less of it on its own garbage, for
	// every target alike. GOGC, when set, wins.
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(harnessGCPercent))
	}
	stderr := c.App.ErrWriter
	if stderr == nil {
		stderr = os.Stderr
	}
	stdout := c.App.Writer
	if stdout == nil {
		stdout = os.Stdout
	}
	var targets []string
	for _, t := range c.StringSlice("targets") {
		if t = strings.TrimSpace(t); t != "" {
			targets = append(targets, t)
		}
	}
	binary := c.String("binary")
	if binary == "" && len(c.StringSlice("addr")) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this executable to spawn (set --binary): %w", err)
		}
		binary = exe
	}
	cfg := bench.Config{
		Workload:        workload,
		Targets:         targets,
		Addrs:           c.StringSlice("addr"),
		ServerPIDs:      c.IntSlice("server-pid"),
		Proto:           c.String("proto"),
		Spawn:           c.Int("spawn"),
		Binary:          binary,
		TokenFile:       c.String("token-file"),
		Messages:        c.Int("messages"),
		Producers:       c.Int("producers"),
		Batch:           c.Int("batch"),
		BodySize:        c.Int("body-size"),
		Delay:           c.Duration("delay"),
		Rate:            c.Int("rate"),
		Duration:        c.Duration("duration"),
		Consumers:       c.Int("consumers"),
		Groups:          c.Int("groups"),
		Topics:          c.Int("topics"),
		ReserveMax:      c.Int("reserve-max"),
		MaxInflight:     c.Int("max-inflight"),
		Consume:         c.String("consume"),
		WebhookFailRate: c.Float64("webhook-fail-rate"),
		WebhookHang:     c.Bool("webhook-hang"),
		MaxAttempts:     c.Int("max-attempts"),
		Drain:           c.Duration("drain"),
		Wait:            c.Duration("wait"),
		RedisPoll:       c.Duration("redis-poll"),
		BeanstalkdFsync: c.Duration("beanstalkd-fsync"),
		BeanstalkdAddr:  c.String("beanstalkd-target-addr"),
		Lead:            c.Duration("lead"),
		Grace:           c.Duration("grace"),
		KillAfter:       c.Duration("kill-after"),
		Down:            c.Duration("down"),
		Every:           c.Duration("every"),
		Stderr:          stderr,
		TTY:             isTerminal(stderr),
		Verbose:         c.Bool("verbose"),
		Keep:            c.Bool("keep"),
	}
	if workload == webhookWorkload {
		if err := webhookDefaults(c, &cfg); err != nil {
			return err
		}
	}
	rep, runErr := bench.Run(ctx, cfg)
	if rep == nil {
		return runErr
	}
	rep.Command = "delaywheel " + strings.Join(os.Args[1:], " ")
	var err error
	if c.Bool("json") {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteTable(stdout)
	}
	if path := c.String("report"); path != "" {
		err = errors.Join(err, writeHTMLReport(path, rep))
	}
	if runErr != nil {
		if errors.Is(runErr, ctx.Err()) && ctx.Err() != nil {
			runErr = fmt.Errorf("interrupted; the results so far are above: %w", runErr)
		}
		return errors.Join(runErr, err)
	}
	return err
}

func writeHTMLReport(path string, rep *bench.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	if err := rep.WriteHTML(f); err != nil {
		f.Close()
		return fmt.Errorf("--report %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("--report %s: %w", path, err)
	}
	return nil
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// webhookWorkload is `bench webhook`: the fire workload delivered through a
// topic's webhook to a receiver in the harness.
const webhookWorkload = "webhook"

// webhookDefaults turns cfg into `bench fire --consume webhook` against
// delaywheel alone (no other target has webhooks), on a spawned 3-node
// cluster at 5,000 msg/s unless the flags say otherwise.
func webhookDefaults(c *cli.Context, cfg *bench.Config) error {
	if c.IsSet("consume") && cfg.Consume != bench.ConsumeWebhook {
		return fmt.Errorf("bench webhook delivers through a webhook; --consume %s is for bench fire", cfg.Consume)
	}
	cfg.Workload, cfg.Consume = bench.WorkloadFire, bench.ConsumeWebhook
	if !c.IsSet("targets") {
		cfg.Targets = []string{bench.TargetDelaywheel}
	}
	if !c.IsSet("spawn") && len(cfg.Addrs) == 0 {
		cfg.Spawn = 3
	}
	if !c.IsSet("rate") {
		cfg.Rate = 5000
	}
	return nil
}

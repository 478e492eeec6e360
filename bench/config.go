package bench

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// Workload names.
const (
	WorkloadEnqueue  = "enqueue"
	WorkloadFire     = "fire"
	WorkloadBacklog  = "backlog"
	WorkloadFailover = "failover"
	// WorkloadSchedules is in schedules.go.
	WorkloadSchedules = "schedules"
)

// Workloads lists the workloads in the order the help shows them.
func Workloads() []string {
	return []string{WorkloadEnqueue, WorkloadFire, WorkloadBacklog, WorkloadFailover, WorkloadSchedules}
}

// AllTargets lists every target the harness knows.
func AllTargets() []string {
	return []string{TargetDelaywheel, TargetRedis, TargetBeanstalkd}
}

// Config is one run of the harness. Zero fields take the defaults of
// [Config.withDefaults].
type Config struct {
	Workload string   // enqueue, fire, backlog or failover
	Targets  []string // delaywheel, redis, beanstalkd

	// The delaywheel target: Addrs of a running cluster, or Spawn nodes (1 or
	// 3) of Binary, started by the harness. Neither means Spawn 1.
	Addrs     []string
	Spawn     int
	Binary    string
	TokenFile string // bearer token for the delaywheel API
	// ServerPIDs are the pids of the running cluster at Addrs, on this
	// machine: their CPU time is read from /proc and reported per message.
	ServerPIDs []int
	// Groups is the spawned cluster's --groups: Raft groups per node
	// (default 1). Topics spreads the messages over that many topics, by
	// sequence number, each consumer taking one of them, so that a cluster
	// of many groups shares the load among its groups' leaders (default 1).
	Groups int
	Topics int
	// Proto is the API the delaywheel target enqueues and streams through:
	// ProtoHTTP (the Go client's protobuf over HTTP, the NDJSON stream),
	// ProtoJSON (the same with JSON enqueues, as most non-Go clients send)
	// or ProtoGRPC (Enqueue and Subscribe; spawned clusters only).
	Proto string

	Messages  int // enqueue and backlog: how many
	Producers int
	Batch     int
	BodySize  int
	Delay     time.Duration // enqueue: how far ahead the messages are due

	Rate       int           // fire, failover: messages coming due per second
	Duration   time.Duration // fire, failover: how long messages come due
	Consumers  int
	ReserveMax int // most messages per reserve
	// MaxInflight is each delaywheel stream's window (ConsumeStream): its
	// deliveries handed out and not yet acked; 0: the server's default.
	MaxInflight int
	Consume     string // delaywheel consumers: ConsumeReserve (default), ConsumeStream or ConsumeWebhook
	// WebhookFailRate is the share of requests the webhook receiver
	// answers 500, at random (ConsumeWebhook).
	WebhookFailRate float64
	// WebhookHang makes the receiver take every request and answer none
	// until the run ends (ConsumeWebhook; excludes WebhookFailRate).
	WebhookHang bool
	// MaxAttempts is the max_attempts of the delaywheel target's messages:
	// 0 leaves the server's default, except with ConsumeWebhook, where it
	// becomes DefaultMaxAttempts so that dead letters can be checked
	// against a known value.
	MaxAttempts int
	// Drain bounds how long a ConsumeWebhook run with failures waits after
	// the last due time for every message to be answered 2xx or dead; 0 =
	// the whole backoff schedule of MaxAttempts (webhookDrain).
	Drain time.Duration

	Wait  time.Duration // long-poll wait of a reserve
	Lead  time.Duration // fire: from the start of enqueueing to the first due time; 0 = estimate
	Grace time.Duration // fire: how long after the last due time a delivery still counts

	RedisPoll time.Duration // Redis: the poll interval of the Lua pop

	// BeanstalkdFsync is beanstalkd's -f: fsync the binlog at most this
	// often. 0 fsyncs every write, the durability of the other targets.
	BeanstalkdFsync time.Duration
	// BeanstalkdAddr is a running server of beanstalkd's protocol (a
	// delaywheel node's --beanstalkd-addr, or beanstalkd) that the
	// beanstalkd target drives instead of spawning beanstalkd; its
	// memory, disk and restarts are then not measured.
	BeanstalkdAddr string

	KillAfter time.Duration // failover: from the first due time to the kill; 0 = a third of Duration
	Down      time.Duration // failover: how long the killed leader stays down

	Every time.Duration // schedules: the interval of each schedule (default 1s)

	TempDir string    // where spawned servers live ("" = the system's)
	Stderr  io.Writer // logs and the progress line; nil = none
	TTY     bool      // Stderr is a terminal: the progress line is \r-updated
	Verbose bool      // log at debug level
	Keep    bool      // keep the spawned servers' directories and logs

	// Set by withDefaults.
	runID    string
	logger   *slog.Logger
	progress *progress
}

// Values of Config.Proto.
const (
	ProtoHTTP = "http"
	ProtoJSON = "json"
	ProtoGRPC = "grpc"
)

// Defaults of the harness.
const (
	DefaultEnqueueMessages = 100_000
	DefaultBacklogMessages = 10_000_000
	DefaultProducers       = 4
	DefaultBatch           = 100
	DefaultBodySize        = 100
	DefaultRate            = 10_000
	DefaultConsumers       = 4
	DefaultReserveMax      = 100
	DefaultDuration        = 30 * time.Second
	DefaultWait            = 2 * time.Second
	DefaultRedisPoll       = 10 * time.Millisecond
	// DefaultMaxAttempts is the server's max_attempts of a message that
	// sets none.
	DefaultMaxAttempts = 10
)

// withDefaults returns cfg with every zero field set to its default.
func (cfg Config) withDefaults() Config {
	if len(cfg.Targets) == 0 {
		cfg.Targets = AllTargets()
	}
	if len(cfg.Addrs) == 0 && cfg.Spawn == 0 {
		cfg.Spawn = 1
		if cfg.Workload == WorkloadFailover {
			cfg.Spawn = 3
		}
	}
	if cfg.Messages == 0 {
		cfg.Messages = DefaultEnqueueMessages
		if cfg.Workload == WorkloadBacklog {
			cfg.Messages = DefaultBacklogMessages
		}
		if cfg.Workload == WorkloadSchedules {
			cfg.Messages = DefaultSchedules
		}
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defd := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	def(&cfg.Producers, DefaultProducers)
	def(&cfg.Batch, DefaultBatch)
	def(&cfg.BodySize, DefaultBodySize)
	def(&cfg.Rate, DefaultRate)
	def(&cfg.Consumers, DefaultConsumers)
	def(&cfg.Groups, 1)
	def(&cfg.Topics, 1)
	def(&cfg.ReserveMax, DefaultReserveMax)
	if cfg.Consume == "" {
		cfg.Consume = ConsumeReserve
	}
	defd(&cfg.Delay, 30*time.Minute)
	defd(&cfg.Duration, DefaultDuration)
	defd(&cfg.Wait, DefaultWait)
	defd(&cfg.RedisPoll, DefaultRedisPoll)
	defd(&cfg.Down, 3*time.Second)
	defd(&cfg.Every, time.Second)
	if cfg.Consume == ConsumeWebhook {
		def(&cfg.MaxAttempts, DefaultMaxAttempts)
		defd(&cfg.Drain, webhookDrain(cfg.MaxAttempts))
	}
	if cfg.Grace == 0 {
		cfg.Grace = 10 * time.Second
		if cfg.Workload == WorkloadFailover {
			cfg.Grace = 20 * time.Second
		}
	}
	if cfg.KillAfter == 0 {
		cfg.KillAfter = cfg.Duration / 3
	}
	if cfg.Stderr == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	} else {
		cfg.progress = newProgress(cfg.Stderr, cfg.TTY)
		level := slog.LevelInfo
		if cfg.Verbose {
			level = slog.LevelDebug
		}
		cfg.logger = slog.New(slog.NewTextHandler(cfg.progress.ClearingWriter(cfg.Stderr), &slog.HandlerOptions{Level: level}))
	}
	if cfg.runID == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.runID = time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
	}
	return cfg
}

// validate checks a config with its defaults applied.
func (cfg Config) validate() error {
	var errs []error
	if !slices.Contains(Workloads(), cfg.Workload) {
		errs = append(errs, fmt.Errorf("workload %q: want one of %s", cfg.Workload, strings.Join(Workloads(), ", ")))
	}
	for _, t := range cfg.Targets {
		if !slices.Contains(AllTargets(), t) {
			errs = append(errs, fmt.Errorf("--targets: unknown target %q: want some of %s", t, strings.Join(AllTargets(), ",")))
		}
	}
	switch {
	case cfg.Proto != "" && !slices.Contains([]string{ProtoHTTP, ProtoJSON, ProtoGRPC}, cfg.Proto):
		errs = append(errs, fmt.Errorf("--proto %q: want %s, %s or %s", cfg.Proto, ProtoHTTP, ProtoJSON, ProtoGRPC))
	case cfg.Proto == ProtoGRPC && len(cfg.Addrs) > 0:
		errs = append(errs, errors.New("--proto grpc: only for a spawned cluster, whose gRPC addresses the harness knows"))
	}
	if len(cfg.Addrs) > 0 && cfg.Spawn != 0 {
		errs = append(errs, errors.New("--addr and --spawn exclude each other: bench a running cluster, or spawn one"))
	}
	if len(cfg.ServerPIDs) > 0 && len(cfg.Addrs) == 0 && cfg.BeanstalkdAddr == "" {
		errs = append(errs, errors.New("--server-pid: only with --addr or --beanstalkd-target-addr (the servers the harness spawns are measured anyway)"))
	}
	for _, pid := range cfg.ServerPIDs {
		if pid < 1 {
			errs = append(errs, fmt.Errorf("--server-pid %d: must be a process id, 1 or more", pid))
		}
	}
	if cfg.Spawn != 0 && cfg.Spawn != 1 && cfg.Spawn != 3 {
		errs = append(errs, fmt.Errorf("--spawn %d: want 1 or 3 nodes", cfg.Spawn))
	}
	if cfg.Workload == WorkloadFailover && cfg.Spawn != 3 {
		errs = append(errs, errors.New("failover needs --spawn 3: the harness kills and restarts the leader's process"))
	}
	positive := func(name string, v int, limit int) {
		if v < 1 || v > limit {
			errs = append(errs, fmt.Errorf("%s %d: must be between 1 and %d", name, v, limit))
		}
	}
	positive("--messages", cfg.Messages, 1_000_000_000)
	positive("--producers", cfg.Producers, 1024)
	positive("--batch", cfg.Batch, 10_000)
	positive("--body-size", cfg.BodySize, 1<<20)
	positive("--rate", cfg.Rate, 10_000_000)
	positive("--consumers", cfg.Consumers, 1024)
	positive("--reserve-max", cfg.ReserveMax, 1000)
	if cfg.MaxInflight < 0 || cfg.MaxInflight > 100_000 {
		errs = append(errs, fmt.Errorf("--max-inflight must be between 0 (the server's default) and 100000, got %d", cfg.MaxInflight))
	}
	positive("--groups", cfg.Groups, model.MaxGroups)
	positive("--topics", cfg.Topics, 10_000)
	if cfg.Groups > 1 && cfg.Spawn == 0 {
		errs = append(errs, errors.New("--groups: only for a spawned cluster (a running one has its own)"))
	}
	if cfg.Topics > 1 && cfg.Consume != ConsumeWebhook && cfg.Consumers < cfg.Topics {
		errs = append(errs, fmt.Errorf("--topics %d needs at least as many --consumers (%d): each consumer takes one topic", cfg.Topics, cfg.Consumers))
	}
	if cfg.Topics > 1 && cfg.Workload == WorkloadSchedules {
		errs = append(errs, errors.New("--topics: the schedules workload fires into one topic"))
	}
	if !slices.Contains([]string{ConsumeReserve, ConsumeReserveInline, ConsumeStream, ConsumeWebhook}, cfg.Consume) {
		errs = append(errs, fmt.Errorf("--consume %q: want %s, %s, %s or %s", cfg.Consume, ConsumeReserve, ConsumeReserveInline, ConsumeStream, ConsumeWebhook))
	}
	if cfg.WebhookFailRate < 0 || cfg.WebhookFailRate >= 1 {
		errs = append(errs, fmt.Errorf("--webhook-fail-rate %g: must be at least 0 and below 1", cfg.WebhookFailRate))
	}
	if cfg.WebhookHang && cfg.WebhookFailRate > 0 {
		errs = append(errs, errors.New("--webhook-hang and --webhook-fail-rate exclude each other: a receiver that never answers fails every request already"))
	}
	if (cfg.WebhookHang || cfg.WebhookFailRate > 0) && cfg.Consume != ConsumeWebhook {
		errs = append(errs, fmt.Errorf("--webhook-hang and --webhook-fail-rate shape the webhook receiver: they need --consume %s", ConsumeWebhook))
	}
	if cfg.MaxAttempts < 0 || cfg.MaxAttempts > maxMaxAttempts {
		errs = append(errs, fmt.Errorf("--max-attempts %d: must be between 1 and %d (0: the server's default)", cfg.MaxAttempts, maxMaxAttempts))
	}
	if cfg.Every < time.Second || cfg.Every%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("--every %s: must be at least 1s, in whole milliseconds", cfg.Every))
	}
	if cfg.Duration < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--duration %s: must be at least 100ms", cfg.Duration))
	}
	if n := cfg.fireMessages(); (cfg.Workload == WorkloadFire || cfg.Workload == WorkloadFailover) && n > 100_000_000 {
		errs = append(errs, fmt.Errorf("--rate × --duration = %d messages: at most 100,000,000", n))
	}
	if cfg.Wait < 0 || cfg.Lead < 0 || cfg.Grace < 0 || cfg.RedisPoll <= 0 || cfg.Down < 0 || cfg.Delay < 0 || cfg.BeanstalkdFsync < 0 || cfg.Drain < 0 {
		errs = append(errs, errors.New("durations must not be negative (and --redis-poll must be positive)"))
	}
	if cfg.Workload == WorkloadFailover && (cfg.KillAfter <= 0 || cfg.KillAfter >= cfg.Duration) {
		errs = append(errs, fmt.Errorf("--kill-after %s: must fall inside --duration %s", cfg.KillAfter, cfg.Duration))
	}
	return errors.Join(errs...)
}

// fireMessages is how many messages a fire run schedules.
func (cfg Config) fireMessages() int {
	return int(float64(cfg.Rate) * cfg.Duration.Seconds())
}

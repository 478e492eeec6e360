package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
)

// Report is the outcome of one run: one workload against every target.
type Report struct {
	Workload string    `json:"workload"`
	Started  time.Time `json:"started"`
	Command  string    `json:"command,omitempty"`
	Host     Host      `json:"host"`
	Params   Params    `json:"params"`
	Results  []Result  `json:"results"`
}

// Host describes the machine the run measured.
type Host struct {
	CPUs     int    `json:"cpus"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	Go       string `json:"go"`
	Hostname string `json:"hostname,omitempty"`
	LoadAvg  string `json:"loadavg,omitempty"` // /proc/loadavg when the run started: other load skews results
}

// Params are the workload's parameters after defaults.
type Params struct {
	Messages          int      `json:"messages"`
	Producers         int      `json:"producers"`
	Batch             int      `json:"batch"`
	BodySize          int      `json:"body_size"`
	Rate              int      `json:"rate,omitempty"`
	DurationS         float64  `json:"duration_s,omitempty"`
	Consumers         int      `json:"consumers,omitempty"`
	ReserveMax        int      `json:"reserve_max,omitempty"`
	WaitMs            int64    `json:"wait_ms,omitempty"`
	RedisPollMs       float64  `json:"redis_poll_ms,omitempty"`
	BeanstalkdFsyncMs int64    `json:"beanstalkd_fsync_ms"`
	Spawn             int      `json:"spawn,omitempty"`
	Addrs             []string `json:"addrs,omitempty"`
}

// Result is what one target did.
type Result struct {
	Target  string `json:"target"`
	Skipped string `json:"skipped,omitempty"` // why the target did not run
	Error   string `json:"error,omitempty"`   // why it stopped early

	Enqueue   *EnqueueResult   `json:"enqueue,omitempty"`
	Fire      *FireResult      `json:"fire,omitempty"`
	Backlog   *BacklogResult   `json:"backlog,omitempty"`
	Failover  *FailoverResult  `json:"failover,omitempty"`
	Schedules *SchedulesResult `json:"schedules,omitempty"`
	Webhook   *WebhookResult   `json:"webhook,omitempty"` // fire with --consume webhook

	// Throughput over time: enqueue acknowledgements (enqueue, backlog) or
	// first deliveries (fire, failover) per second.
	Throughput   []RatePoint `json:"throughput,omitempty"`
	ThroughputOf string      `json:"throughput_of,omitempty"`
	Notes        []string    `json:"notes,omitempty"`
}

// Run runs cfg.Workload against each of cfg.Targets in turn and returns the
// report. A target whose server is not installed is skipped with a reason; a
// target that fails gets its error in the report and the next one runs. When
// ctx ends, Run stops what it spawned and returns the report so far with
// ctx's error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Spawn > 0 && cfg.Binary == "" && slices.Contains(cfg.Targets, TargetDelaywheel) {
		return nil, errors.New("spawning delaywheel needs the server binary: set --binary")
	}
	root, err := os.MkdirTemp(cfg.TempDir, "delaywheel-bench-*")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	if cfg.Keep {
		defer cfg.logger.Info("kept the spawned servers' directories and logs", "dir", root)
	} else {
		defer os.RemoveAll(root)
	}
	host, _ := os.Hostname()
	rep := &Report{
		Workload: cfg.Workload,
		Started:  time.Now().UTC(),
		Host:     Host{CPUs: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version(), Hostname: host, LoadAvg: loadAvg()},
		Params:   cfg.params(),
	}
	for _, name := range cfg.Targets {
		if ctx.Err() != nil {
			break
		}
		res := runTarget(ctx, cfg, filepath.Join(root, name), name)
		if res.Skipped != "" {
			cfg.logger.Warn("skipped: " + res.Skipped)
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, ctx.Err()
}

func (cfg Config) params() Params {
	p := Params{Messages: cfg.Messages, Producers: cfg.Producers, Batch: cfg.Batch, BodySize: cfg.BodySize, Spawn: cfg.Spawn, Addrs: cfg.Addrs,
		BeanstalkdFsyncMs: cfg.BeanstalkdFsync.Milliseconds()}
	switch cfg.Workload {
	case WorkloadFire, WorkloadFailover:
		p.Messages = cfg.fireMessages()
		p.Rate, p.DurationS = cfg.Rate, cfg.Duration.Seconds()
		p.Consumers, p.ReserveMax, p.WaitMs = cfg.Consumers, cfg.ReserveMax, cfg.Wait.Milliseconds()
		p.RedisPollMs = float64(cfg.RedisPoll) / float64(time.Millisecond)
	case WorkloadSchedules:
		p.DurationS, p.Consumers, p.ReserveMax, p.WaitMs = cfg.Duration.Seconds(), cfg.Consumers, cfg.ReserveMax, cfg.Wait.Milliseconds()
	}
	return p
}

// installHint is how to install an alternative's server.
func installHint(bin string) string {
	return fmt.Sprintf("%s not installed (apt-get install %s)", bin, bin)
}

// runTarget opens one target in dir, runs the workload on it and tears it
// down.
func runTarget(ctx context.Context, cfg Config, dir, name string) (res Result) {
	res.Target = name
	if cfg.Workload == WorkloadFailover && name != TargetDelaywheel {
		res.Skipped = name + ": failover applies to a replicated delaywheel cluster only"
		return res
	}
	if cfg.Workload == WorkloadSchedules && name != TargetDelaywheel {
		res.Skipped = name + ": has no recurring schedules to measure"
		return res
	}
	switch name {
	case TargetRedis:
		if _, err := exec.LookPath("redis-server"); err != nil {
			res.Skipped = installHint("redis-server")
			return res
		}
	case TargetBeanstalkd:
		if _, err := exec.LookPath("beanstalkd"); err != nil && cfg.BeanstalkdAddr == "" {
			res.Skipped = installHint("beanstalkd")
			return res
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		res.Error = err.Error()
		return res
	}
	if !cfg.Keep {
		defer os.RemoveAll(dir)
	}
	t, err := openTarget(ctx, cfg, dir, name)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Target = t.Name()
	defer func() {
		if err := t.Close(); err != nil {
			cfg.logger.Warn("tear down", "target", t.Name(), "err", err)
		}
	}()
	cfg.logger.Info("running", "workload", cfg.Workload, "target", t.Name())
	switch cfg.Workload {
	case WorkloadEnqueue:
		err = runEnqueue(ctx, cfg, t, &res)
	case WorkloadFire:
		err = runFire(ctx, cfg, t, &res)
	case WorkloadBacklog:
		err = runBacklog(ctx, cfg, t, &res)
	case WorkloadFailover:
		err = runFailover(ctx, cfg, t, &res)
	case WorkloadSchedules:
		err = runSchedules(ctx, cfg, t, &res)
	}
	switch {
	case err != nil && ctx.Err() != nil:
		res.Error = "interrupted: the counts are partial (lost includes messages not yet due)"
	case err != nil:
		res.Error = err.Error()
		cfg.logger.Error("target failed", "target", t.Name(), "err", err)
	}
	return res
}

// openTarget connects to or spawns one target.
func openTarget(ctx context.Context, cfg Config, dir, name string) (target, error) {
	switch name {
	case TargetDelaywheel:
		token, err := api.ReadTokenFile("--token-file", cfg.TokenFile)
		if err != nil {
			return nil, err
		}
		if len(cfg.Addrs) > 0 {
			return newDelaywheelTarget(ctx, &cfg, cfg.Addrs, nil, token), nil
		}
		var extra []string
		if cfg.Workload == WorkloadFailover {
			extra = []string{"--redelivery-backoff", "0"}
		}
		if cfg.Groups > 1 {
			extra = append(extra, "--groups", strconv.Itoa(cfg.Groups))
		}
		cl, err := spawnDelaywheel(ctx, cfg.logger, dir, cfg.Binary, cfg.Spawn, cfg.TokenFile, token, extra)
		if err != nil {
			return nil, err
		}
		return newDelaywheelTarget(ctx, &cfg, cl.addrs(), cl, token), nil
	case TargetRedis:
		return spawnRedis(ctx, &cfg, dir)
	case TargetBeanstalkd:
		if cfg.BeanstalkdAddr != "" {
			return connectBeanstalkd(ctx, &cfg)
		}
		return spawnBeanstalkd(ctx, &cfg, dir)
	}
	return nil, fmt.Errorf("unknown target %q", name)
}

// loadAvg is the 1, 5 and 15 minute load averages, "" when unknown.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// serverCPU is the CPU time a result measured, if any.
func (r *Result) serverCPU() *ServerCPU {
	switch {
	case r.Fire != nil:
		return r.Fire.CPU
	case r.Schedules != nil:
		return r.Schedules.CPU
	case r.Enqueue != nil:
		return r.Enqueue.CPU
	case r.Backlog != nil:
		return r.Backlog.Fill.CPU
	}
	return nil
}

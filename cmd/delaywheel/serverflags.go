package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/transport"
)

// envs names the environment variable of a server flag: DELAYWHEEL_<FLAG>.
func envs(flag string) []string {
	return []string{"DELAYWHEEL_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

// Memory defaults. A node's memory must not grow with its backlog: it is
// the runtime and its heap, and the index's block cache and memtables.
const (
	defaultCacheBytes = 16 << 20
	// An idle node holds two memtables, the current one and a flushed one
	// Pebble keeps for reuse: a smaller memtable holds less memory at rest
	// and costs more flushes and compactions under writes.
	defaultMemTableBytes = 3 << 20
	defaultMemoryLimit   = 0
	// The collector's target, unless GOGC is set. Invariant: the live heap
	// is bounded by the load, never by the backlog, so a larger multiple of
	// it is a bounded cost; fewer collections mean fewer mark phases, each
	// of which takes a quarter of the processors and stalls allocating
	// goroutines, the hand-off path among them. The idle releaser hands
	// the difference back once the node goes quiet.
	defaultGCPercent = 400
)

// serverFlags are the server's flags, each also read from its
// environment variable and (but lists) the --config file; the node's
// tuning and the API's limits show replication.DefaultConfig's and
// transport.DefaultLimits' values as their defaults.
func serverFlags() []cli.Flag {
	def, lim := replication.DefaultConfig(), transport.DefaultLimits()
	flags := []cli.Flag{
		&cli.StringFlag{Name: "node-id", Value: "n1", Usage: "this node's id"},
		&cli.StringFlag{Name: "data-dir", Value: "./data", Usage: "where segments, the index and the Raft log live"},
		&cli.StringFlag{Name: "http-addr", Value: "127.0.0.1:7070", Usage: "client API listen and advertised address"},
		&cli.StringFlag{Name: "grpc-addr", Value: "127.0.0.1:7072", Usage: `gRPC API listen address ("" or "off": none); same token, TLS and limits as HTTP`},
		&cli.StringFlag{Name: "beanstalkd-addr", Usage: "serve beanstalkd's protocol on this address, e.g. 127.0.0.1:11300 (off when empty); it has no auth and no TLS: keep it private"},
		&cli.StringFlag{Name: "raft-addr", Value: "127.0.0.1:7071", Usage: "Raft listen and advertised address"},
		&cli.StringFlag{Name: "raft-advertise", Usage: "Raft address peers dial, when it differs from --raft-addr (NAT, proxies)"},
		&cli.StringFlag{Name: "initial-cluster", Usage: "members of a new cluster, `id=raftaddr,...`; every node gets the same list"},
		&cli.StringFlag{Name: "join", Usage: "HTTP address of any member: join that cluster as a voter"},
		&cli.IntFlag{Name: "groups", Value: 1, Usage: "Raft groups every node runs over --raft-addr, topics spread over them (fixed when the cluster is created)"},
		&cli.StringSliceFlag{Name: "webhook-allow", Usage: "hosts, IP addresses or CIDRs webhooks may point to, comma-separated (default: any)"},
		&cli.StringFlag{Name: "auth-token-file", Usage: "file holding the bearer token every /v1 call must present"},
		&cli.StringFlag{Name: "tls-cert-file", Usage: "serve the client API over HTTPS with this PEM certificate"},
		&cli.StringFlag{Name: "tls-key-file", Usage: "PEM key of --tls-cert-file"},
		&cli.StringFlag{Name: "tls-ca-file", Usage: "CA bundle to verify other nodes' HTTPS when forwarding (default: system roots)"},
		&cli.StringFlag{Name: "raft-tls-cert-file", Usage: "mutual TLS between nodes: this node's PEM certificate"},
		&cli.StringFlag{Name: "raft-tls-key-file", Usage: "mutual TLS between nodes: this node's PEM key"},
		&cli.StringFlag{Name: "raft-tls-ca-file", Usage: "mutual TLS between nodes: the CA every node's certificate chains to"},
		&cli.StringFlag{Name: "debug-addr", Usage: "serve Go's /debug/pprof profiles on this address (keep it private; off when empty)"},
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: "log format: text or json"},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "log level: debug, info, warn, error"},
		&cli.DurationFlag{Name: "redelivery-backoff", Value: def.RedeliveryBackoff, Usage: "added to an expired lease before redelivery, times the attempt (capped at 1m)"},
		&cli.DurationFlag{Name: "expire-grace", Value: def.ExpireGrace, Usage: "how long after a second ends its slot expires to the ready queues"},
		&cli.IntFlag{Name: "max-topics", Value: def.MaxTopics, Usage: "distinct topics the cluster accepts"},
		&cli.IntFlag{Name: "max-pending-applies", Value: def.MaxPendingApply, Usage: "proposals waiting for the log before writes answer 429"},
		&cli.IntFlag{Name: "max-body-bytes", Value: lim.MaxBodyBytes, Usage: "largest message body in bytes (at most 48 MiB)"},
		&cli.IntFlag{Name: "max-batch", Value: lim.MaxBatch, Usage: "most messages per enqueue (and receipts per ack)"},
		&cli.Int64Flag{Name: "max-request-bytes", Value: lim.MaxRequestBytes, Usage: "largest request body in bytes (at most 48 MiB)"},
		&cli.DurationFlag{Name: "max-delay", Value: time.Duration(lim.MaxDelayMs) * time.Millisecond, Usage: "furthest a message may be scheduled ahead"},
		&cli.IntFlag{Name: "max-waiters", Value: lim.MaxWaiters, Usage: "concurrent long-polling reserves per node before 429"},
		&cli.Uint64Flag{Name: "ready-max-lag", Value: def.ReadyMaxLag, Usage: "log entries a node that has caught up since it started may trail the leader's commit index by and still answer /readyz 200 (at least 1): entries in flight do not make it flap, a backlog does"},
		&cli.Uint64Flag{Name: "snapshot-threshold", Value: def.SnapshotThreshold, Usage: "log entries between snapshots"},
		&cli.IntFlag{Name: "raft-segment-bytes", Value: def.LogSegmentBytes, Usage: "size of the Raft log's segment files (1 MiB to 1 GiB); one spare segment, written ahead, is kept besides the log's"},
		&cli.DurationFlag{Name: "commit-linger", Value: def.CommitLinger, Usage: "least time between the starts of two Raft log writes, so that writes arriving meanwhile share one fsync: fewer fsyncs and less CPU under load, for up to this much more latency on every write, ack and fire (0: write at once)"},
		&cli.Uint64Flag{Name: "trailing-logs", Value: def.TrailingLogs, Usage: "log entries kept after a snapshot for slow followers"},
		&cli.Int64Flag{Name: "cache-bytes", Value: defaultCacheBytes, Usage: "index block cache in bytes"},
		&cli.Uint64Flag{Name: "memtable-bytes", Value: defaultMemTableBytes, Usage: "index memtable size in bytes (up to four are held while flushes lag)"},
		&cli.IntFlag{Name: "procs", Usage: "Go processors (GOMAXPROCS) (0: GOMAXPROCS when set, else the CPUs the process may use plus 2, so that a due message's wake-up never waits for a busy processor)"},
		&cli.Int64Flag{Name: "memory-limit", Value: defaultMemoryLimit, Usage: "soft limit in bytes of the Go heap and runtime: past it the collector runs more often (0: GOMEMLIMIT, or none)"},
		&cli.IntFlag{Name: "gc-percent", Value: defaultGCPercent, Usage: "heap growth in percent between collections; when unset, GOGC wins if set (0: GOGC, or 100)"},
		&cli.BoolFlag{Name: "compress-index", Usage: "compress the index's blocks with snappy: less disk where bodies due beyond the two-hour horizon compress well, more CPU on every write"},
		&cli.BoolFlag{Name: "release-idle-heap", Value: true, Usage: "once the node goes quiet after a burst of work, and now and then while it stays quiet, collect and hand the heap's free memory back to the kernel"},
	}
	for i, f := range flags {
		flags[i] = fromEnvAndFile(f)
	}
	return flags
}

// fromEnvAndFile gives f its environment variable (envs) and, unless it
// is a list, wraps it so that the --config file can set it too.
func fromEnvAndFile(f cli.Flag) cli.Flag {
	switch sf := f.(type) {
	case *cli.StringFlag:
		sf.EnvVars, f = envs(sf.Name), altsrc.NewStringFlag(sf)
	case *cli.IntFlag:
		sf.EnvVars, f = envs(sf.Name), altsrc.NewIntFlag(sf)
	case *cli.Int64Flag:
		sf.EnvVars, f = envs(sf.Name), altsrc.NewInt64Flag(sf)
	case *cli.Uint64Flag:
		sf.EnvVars, f = envs(sf.Name), altsrc.NewUint64Flag(sf)
	case *cli.DurationFlag:
		sf.EnvVars, f = envs(sf.Name), altsrc.NewDurationFlag(sf)
	case *cli.BoolFlag:
		sf.EnvVars, f = envs(sf.Name), altsrc.NewBoolFlag(sf)
	case *cli.StringSliceFlag:
		sf.EnvVars = envs(sf.Name)
	}
	return f
}

// configFlags is the server flags and --config, whose file they can also
// come from (YAML, TOML or JSON, keys named like the flags). Precedence:
// command line, then environment, then the file, then the default.
func configFlags() ([]cli.Flag, cli.BeforeFunc) {
	out := append(serverFlags(), &cli.StringFlag{Name: "config", Usage: "optional config file (.yaml, .toml or .json) whose keys are these flags' names", EnvVars: envs("config")})
	load := func(c *cli.Context) (altsrc.InputSourceContext, error) {
		path := c.String("config")
		switch strings.ToLower(filepath.Ext(path)) {
		case ".toml":
			return altsrc.NewTomlSourceFromFile(path)
		case ".json":
			return altsrc.NewJSONSourceFromFile(path)
		default:
			return altsrc.NewYamlSourceFromFile(path)
		}
	}
	before := func(c *cli.Context) error {
		if c.String("config") == "" {
			return nil
		}
		if err := altsrc.InitInputSourceWithContext(out, load)(c); err != nil {
			return fmt.Errorf("--config %s: %w", c.String("config"), err)
		}
		return nil
	}
	return out, before
}

func serverCommand() *cli.Command {
	flags, before := configFlags()
	return &cli.Command{
		Name:  "server",
		Usage: "run a node (with no flags: a single-node cluster in ./data on 127.0.0.1:7070)",
		Description: "Starts a delaywheel node. A node restarted with the same --data-dir keeps its state and\n" +
			"ignores --initial-cluster; --join then only adds back a node its cluster removed.\n" +
			"SIGTERM or SIGINT shut it down cleanly: leadership moves to a follower, long-polls\n" +
			"answer empty, the store is synced.",
		Flags:  flags,
		Before: before,
		Action: runServer,
	}
}

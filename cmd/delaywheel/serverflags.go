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

// serverFlags are the server's flags; the node's tuning and the API's
// limits show replication.DefaultConfig's and transport.DefaultLimits'
// values as their defaults.
func serverFlags() []cli.Flag {
	def, lim := replication.DefaultConfig(), transport.DefaultLimits()
	return []cli.Flag{
		&cli.StringFlag{Name: "node-id", Value: "n1", Usage: "this node's id", EnvVars: envs("node-id")},
		&cli.StringFlag{Name: "data-dir", Value: "./data", Usage: "where segments, the index and the Raft log live", EnvVars: envs("data-dir")},
		&cli.StringFlag{Name: "http-addr", Value: "127.0.0.1:7070", Usage: "client API listen and advertised address", EnvVars: envs("http-addr")},
		&cli.StringFlag{Name: "grpc-addr", Value: "127.0.0.1:7072", Usage: `gRPC API listen address ("" or "off": none); same token, TLS and limits as HTTP`, EnvVars: envs("grpc-addr")},
		&cli.StringFlag{Name: "beanstalkd-addr", Usage: "serve beanstalkd's protocol on this address, e.g. 127.0.0.1:11300 (off when empty); it has no auth and no TLS: keep it private", EnvVars: envs("beanstalkd-addr")},
		&cli.StringFlag{Name: "raft-addr", Value: "127.0.0.1:7071", Usage: "Raft listen and advertised address", EnvVars: envs("raft-addr")},
		&cli.StringFlag{Name: "raft-advertise", Usage: "Raft address peers dial, when it differs from --raft-addr (NAT, proxies)", EnvVars: envs("raft-advertise")},
		&cli.StringFlag{Name: "initial-cluster", Usage: "members of a new cluster, `id=raftaddr,...`; every node gets the same list", EnvVars: envs("initial-cluster")},
		&cli.StringFlag{Name: "join", Usage: "HTTP address of any member: join that cluster as a voter", EnvVars: envs("join")},
		&cli.IntFlag{Name: "groups", Value: 1, Usage: "Raft groups every node runs over --raft-addr, topics spread over them (fixed when the cluster is created)", EnvVars: envs("groups")},
		&cli.StringSliceFlag{Name: "webhook-allow", Usage: "hosts, IP addresses or CIDRs webhooks may point to, comma-separated (default: any)", EnvVars: envs("webhook-allow")},
		&cli.StringFlag{Name: "auth-token-file", Usage: "file holding the bearer token every /v1 call must present", EnvVars: envs("auth-token-file")},
		&cli.StringFlag{Name: "tls-cert-file", Usage: "serve the client API over HTTPS with this PEM certificate", EnvVars: envs("tls-cert-file")},
		&cli.StringFlag{Name: "tls-key-file", Usage: "PEM key of --tls-cert-file", EnvVars: envs("tls-key-file")},
		&cli.StringFlag{Name: "tls-ca-file", Usage: "CA bundle to verify other nodes' HTTPS when forwarding (default: system roots)", EnvVars: envs("tls-ca-file")},
		&cli.StringFlag{Name: "raft-tls-cert-file", Usage: "mutual TLS between nodes: this node's PEM certificate", EnvVars: envs("raft-tls-cert-file")},
		&cli.StringFlag{Name: "raft-tls-key-file", Usage: "mutual TLS between nodes: this node's PEM key", EnvVars: envs("raft-tls-key-file")},
		&cli.StringFlag{Name: "raft-tls-ca-file", Usage: "mutual TLS between nodes: the CA every node's certificate chains to", EnvVars: envs("raft-tls-ca-file")},
		&cli.StringFlag{Name: "debug-addr", Usage: "serve Go's /debug/pprof profiles on this address (keep it private; off when empty)", EnvVars: envs("debug-addr")},
		&cli.StringFlag{Name: "log-format", Value: "text", Usage: "log format: text or json", EnvVars: envs("log-format")},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "log level: debug, info, warn, error", EnvVars: envs("log-level")},
		&cli.DurationFlag{Name: "redelivery-backoff", Value: def.RedeliveryBackoff, Usage: "added to an expired lease before redelivery, times the attempt (capped at 1m)", EnvVars: envs("redelivery-backoff")},
		&cli.DurationFlag{Name: "expire-grace", Value: def.ExpireGrace, Usage: "how long after a second ends its slot expires to the ready queues", EnvVars: envs("expire-grace")},
		&cli.IntFlag{Name: "max-topics", Value: def.MaxTopics, Usage: "distinct topics the cluster accepts", EnvVars: envs("max-topics")},
		&cli.IntFlag{Name: "max-pending-applies", Value: def.MaxPendingApply, Usage: "proposals waiting for the log before writes answer 429", EnvVars: envs("max-pending-applies")},
		&cli.IntFlag{Name: "max-body-bytes", Value: lim.MaxBodyBytes, Usage: "largest message body in bytes", EnvVars: envs("max-body-bytes")},
		&cli.IntFlag{Name: "max-batch", Value: lim.MaxBatch, Usage: "most messages per enqueue (and receipts per ack)", EnvVars: envs("max-batch")},
		&cli.Int64Flag{Name: "max-request-bytes", Value: lim.MaxRequestBytes, Usage: "largest request body in bytes", EnvVars: envs("max-request-bytes")},
		&cli.DurationFlag{Name: "max-delay", Value: time.Duration(lim.MaxDelayMs) * time.Millisecond, Usage: "furthest a message may be scheduled ahead", EnvVars: envs("max-delay")},
		&cli.IntFlag{Name: "max-waiters", Value: lim.MaxWaiters, Usage: "concurrent long-polling reserves per node before 429", EnvVars: envs("max-waiters")},
		&cli.Uint64Flag{Name: "ready-max-lag", Value: def.ReadyMaxLag, Usage: "log entries a node that has caught up since it started may trail the leader's commit index by and still answer /readyz 200 (at least 1): entries in flight do not make it flap, a backlog does", EnvVars: envs("ready-max-lag")},
		&cli.Uint64Flag{Name: "snapshot-threshold", Value: def.SnapshotThreshold, Usage: "log entries between snapshots", EnvVars: envs("snapshot-threshold")},
		&cli.IntFlag{Name: "raft-segment-bytes", Value: def.LogSegmentBytes, Usage: "size of the Raft log's segment files (1 MiB to 1 GiB); one spare segment, written ahead, is kept besides the log's", EnvVars: envs("raft-segment-bytes")},
		&cli.Uint64Flag{Name: "trailing-logs", Value: def.TrailingLogs, Usage: "log entries kept after a snapshot for slow followers", EnvVars: envs("trailing-logs")},
		&cli.Int64Flag{Name: "cache-bytes", Value: defaultCacheBytes, Usage: "index block cache in bytes", EnvVars: envs("cache-bytes")},
		&cli.Uint64Flag{Name: "memtable-bytes", Value: defaultMemTableBytes, Usage: "index memtable size in bytes (up to four are held while flushes lag)", EnvVars: envs("memtable-bytes")},
		&cli.IntFlag{Name: "procs", Usage: "Go processors (GOMAXPROCS) (0: GOMAXPROCS when set, else the CPUs the process may use plus 2, so that a due message's wake-up never waits for a busy processor)", EnvVars: envs("procs")},
		&cli.Int64Flag{Name: "memory-limit", Value: defaultMemoryLimit, Usage: "soft limit in bytes of the Go heap and runtime: past it the collector runs more often (0: GOMEMLIMIT, or none)", EnvVars: envs("memory-limit")},
		&cli.IntFlag{Name: "gc-percent", Value: defaultGCPercent, Usage: "heap growth in percent between collections; when unset, GOGC wins if set (0: GOGC, or 100)", EnvVars: envs("gc-percent")},
		&cli.BoolFlag{Name: "compress-index", Usage: "compress the index's blocks with snappy: less disk where bodies due beyond the two-hour horizon compress well, more CPU on every write", EnvVars: envs("compress-index")},
		&cli.BoolFlag{Name: "release-idle-heap", Value: true, Usage: "once the node goes quiet after a burst of work, and now and then while it stays quiet, collect and hand the heap's free memory back to the kernel", EnvVars: envs("release-idle-heap")},
	}
}

// configFlags wraps the server flags so that each can also come from the
// --config file (YAML, TOML or JSON, keys named like the flags). Precedence:
// command line, then environment, then the file, then the default.
func configFlags() ([]cli.Flag, cli.BeforeFunc) {
	var out []cli.Flag
	for _, f := range serverFlags() {
		switch sf := f.(type) {
		case *cli.StringFlag:
			f = altsrc.NewStringFlag(sf)
		case *cli.IntFlag:
			f = altsrc.NewIntFlag(sf)
		case *cli.Int64Flag:
			f = altsrc.NewInt64Flag(sf)
		case *cli.Uint64Flag:
			f = altsrc.NewUint64Flag(sf)
		case *cli.DurationFlag:
			f = altsrc.NewDurationFlag(sf)
		case *cli.BoolFlag:
			f = altsrc.NewBoolFlag(sf)
		}
		out = append(out, f)
	}
	out = append(out, &cli.StringFlag{Name: "config", Usage: "optional config file (.yaml, .toml or .json) whose keys are these flags' names", EnvVars: envs("config")})
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

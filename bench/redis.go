package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// popDue atomically takes up to ARGV[2] members of the sorted set KEYS[1]
// scored at or below ARGV[1] (now, in ms): the Lua pop most hand-rolled
// Redis delay queues use.
const popDue = `local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #due > 0 then redis.call('ZREM', KEYS[1], unpack(due)) end
return due`

// redisTarget is a Redis sorted set used as a delay queue: ZADD scored by
// the due time, a Lua script polled every cfg.RedisPoll pops what is due.
// Durability matches delaywheel's: AOF with appendfsync always.
type redisTarget struct {
	rdb    *redis.Client
	key    string
	script *redis.Script
	proc   *proc
	dir    string
	max    int
	wait   time.Duration
	poll   time.Duration
}

// redisArgs are the redis-server flags of a spawned instance.
func redisArgs(dir string, port int) []string {
	return []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--protected-mode", "no", "--daemonize", "no", "--logfile", "",
	}
}

// spawnRedis starts redis-server in dir on a free port.
func spawnRedis(ctx context.Context, cfg *Config, dir string) (*redisTarget, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	p := newProc(cfg.logger, "redis-server", dir, "redis-server", redisArgs(dir, ports[0])...)
	t := newRedisTarget(cfg, &redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(ports[0])})
	t.proc, t.dir = p, dir
	if err := p.Start(); err != nil {
		return nil, err
	}
	if err := t.waitReady(ctx); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// newRedisTarget makes a target of the server opt points at.
func newRedisTarget(cfg *Config, opt *redis.Options) *redisTarget {
	opt.Protocol = 2
	opt.DisableIdentity = true
	opt.PoolSize = cfg.Producers + cfg.Consumers + 4
	opt.MaxRetries = -1 // a retried ZADD or pop would count twice
	opt.ReadTimeout = 30 * time.Second
	opt.WriteTimeout = 30 * time.Second
	opt.ContextTimeoutEnabled = true
	return &redisTarget{
		rdb:    redis.NewClient(opt),
		key:    "bench:" + cfg.runID,
		script: redis.NewScript(popDue),
		max:    cfg.ReserveMax,
		wait:   cfg.Wait,
		poll:   cfg.RedisPoll,
	}
}

func (t *redisTarget) waitReady(ctx context.Context) error {
	return waitReady(ctx, t.proc, readyTimeout, func(ctx context.Context) error {
		return t.rdb.Ping(ctx).Err() // "LOADING" while it replays the AOF
	})
}

func (t *redisTarget) Name() string { return TargetRedis }

func (t *redisTarget) EnqueueRateHint() float64 { return 40000 }

func (t *redisTarget) Enqueue(ctx context.Context, msgs []msg) error {
	zs := make([]redis.Z, len(msgs))
	for i, m := range msgs {
		zs[i] = redis.Z{Score: float64(m.DeliverAtMs), Member: m.Body}
	}
	if err := t.rdb.ZAdd(ctx, t.key, zs...).Err(); err != nil {
		return fmt.Errorf("redis ZADD of %d members: %w", len(msgs), err)
	}
	return nil
}

func (t *redisTarget) NewConsumer(context.Context) (consumer, error) {
	return &redisConsumer{t: t}, nil
}

func (t *redisTarget) Pending(ctx context.Context) (int64, error) {
	n, err := t.rdb.ZCard(ctx, t.key).Result()
	if err != nil {
		return -1, fmt.Errorf("redis ZCARD: %w", err)
	}
	return n, nil
}

func (t *redisTarget) Resources(context.Context) (resources, error) { return footprint(t.proc, t.dir) }

func (t *redisTarget) Restart(ctx context.Context) (restartTimes, error) {
	return restartProc(ctx, t.proc, t.waitReady)
}

func (t *redisTarget) Close() error {
	_, err := t.proc.Stop(30 * time.Second)
	return errors.Join(t.rdb.Close(), err)
}

// redisConsumer polls the Lua pop: again at once after a full batch,
// otherwise cfg.RedisPoll after the previous poll.
type redisConsumer struct {
	t        *redisTarget
	lastPoll time.Time
	full     bool
}

func (c *redisConsumer) Next(ctx context.Context) (batch, error) {
	t := c.t
	deadline := time.Now().Add(t.wait)
	for {
		if !c.full {
			if err := sleepCtx(ctx, time.Until(c.lastPoll.Add(t.poll))); err != nil {
				return batch{}, err
			}
		}
		now := time.Now()
		c.lastPoll = now
		members, err := t.script.Run(ctx, t.rdb, []string{t.key}, now.UnixMilli(), t.max).StringSlice()
		at := time.Now()
		if err != nil && !errors.Is(err, redis.Nil) {
			c.full = false
			return batch{}, fmt.Errorf("redis pop: %w", err)
		}
		c.full = len(members) >= t.max
		if len(members) > 0 {
			b := batch{At: at, Seqs: make([]int, len(members))}
			for i, m := range members {
				b.Seqs[i] = decodeSeq(m)
			}
			return b, nil
		}
		if at.After(deadline) {
			return batch{}, nil
		}
	}
}

func (c *redisConsumer) Close() error { return nil }

package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// bsTarget is beanstalkd with its binlog: a delayed put per message (whole
// seconds, rounded up so that nothing comes early), reserve-with-timeout and
// delete. By default the binlog is fsynced on every write (-f 0), the
// durability of delaywheel's and of Redis's appendfsync always.
type bsTarget struct {
	addr  string
	tube  string
	proc  *proc
	pids  []int // a running server's processes, whose CPU time is read
	dir   string
	wait  time.Duration
	conns chan *bsConn // idle producer connections
	ttr   int
	fsync time.Duration
}

// beanstalkdArgs are the beanstalkd flags of a spawned instance.
func beanstalkdArgs(binlog string, port int, fsync time.Duration) []string {
	return []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port), "-b", binlog, "-f", strconv.FormatInt(fsync.Milliseconds(), 10)}
}

// spawnBeanstalkd starts beanstalkd in dir on a free port.
func spawnBeanstalkd(ctx context.Context, cfg *Config, dir string) (*bsTarget, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	binlog := filepath.Join(dir, "binlog")
	t := &bsTarget{
		addr:  "127.0.0.1:" + strconv.Itoa(ports[0]),
		tube:  "bench-" + cfg.runID,
		dir:   binlog,
		wait:  cfg.Wait,
		conns: make(chan *bsConn, cfg.Producers+4),
		ttr:   60,
		fsync: cfg.BeanstalkdFsync,
	}
	if err := mkdirAll(binlog); err != nil {
		return nil, err
	}
	t.proc = newProc(cfg.logger, "beanstalkd", dir, "beanstalkd", beanstalkdArgs(binlog, ports[0], cfg.BeanstalkdFsync)...)
	if err := t.proc.Start(); err != nil {
		return nil, err
	}
	if err := t.waitReady(ctx); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// connectBeanstalkd drives the running server at cfg.BeanstalkdAddr.
func connectBeanstalkd(ctx context.Context, cfg *Config) (*bsTarget, error) {
	t := &bsTarget{addr: cfg.BeanstalkdAddr, tube: "bench-" + cfg.runID, wait: cfg.Wait,
		conns: make(chan *bsConn, cfg.Producers+4), ttr: 60, pids: cfg.ServerPIDs}
	c, err := dialBeanstalk(ctx, t.addr)
	if err != nil {
		return nil, fmt.Errorf("--beanstalkd-target-addr: %w", err)
	}
	defer c.Close()
	if _, err := c.Stats(ctx, "stats"); err != nil {
		return nil, fmt.Errorf("--beanstalkd-target-addr: %w", err)
	}
	return t, nil
}

func (t *bsTarget) waitReady(ctx context.Context) error {
	return waitReady(ctx, t.proc, readyTimeout, func(ctx context.Context) error {
		c, err := dialBeanstalk(ctx, t.addr)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Stats(ctx, "stats")
		return err
	})
}

func (t *bsTarget) Name() string { return TargetBeanstalkd }

// EnqueueRateHint: with -f 0 every put is an fsync of the binlog, one at a
// time.
func (t *bsTarget) EnqueueRateHint() float64 {
	if t.fsync > 0 {
		return 30000
	}
	return 3000
}

// conn takes an idle producer connection or dials one.
func (t *bsTarget) conn(ctx context.Context) (*bsConn, error) {
	select {
	case c := <-t.conns:
		return c, nil
	default:
	}
	return t.dial(ctx, func(c *bsConn) error { return c.Use(ctx, t.tube) })
}

// dial connects and runs setup on the new connection.
func (t *bsTarget) dial(ctx context.Context, setup func(*bsConn) error) (*bsConn, error) {
	c, err := dialBeanstalk(ctx, t.addr)
	if err != nil {
		return nil, err
	}
	if err := setup(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (t *bsTarget) release(c *bsConn) {
	select {
	case t.conns <- c:
	default:
		c.Close()
	}
}

func (t *bsTarget) Enqueue(ctx context.Context, msgs []msg) error {
	c, err := t.conn(ctx)
	if err != nil {
		return err
	}
	nowMs := time.Now().UnixMilli()
	jobs := make([]bsJob, len(msgs))
	for i, m := range msgs {
		jobs[i] = bsJob{Pri: 1024, Delay: delaySeconds(m.DeliverAtMs, nowMs), TTR: t.ttr, Body: []byte(m.Body)}
	}
	if _, err := c.Put(ctx, jobs); err != nil {
		c.Close()
		return fmt.Errorf("put %d jobs: %w", len(jobs), err)
	}
	t.release(c)
	return nil
}

// delaySeconds is beanstalkd's whole-second delay for a message due at dueMs
// when put at nowMs, rounded up: a job is never ready before its due time.
func delaySeconds(dueMs, nowMs int64) int {
	d := dueMs - nowMs
	if d <= 0 {
		return 0
	}
	return int((d + 999) / 1000)
}

// bsConnsPerConsumer is how many connections one consumer reserves
// through. Invariant: a beanstalkd connection holds one reserve at a time
// and each job's delete waits for a durable write before the next reserve,
// so a connection takes at most one job per write: like a beanstalkd
// deployment's many workers, a consumer spreads its reserves over several
// connections, so that neither server is limited by the harness's client.
const bsConnsPerConsumer = 64

func (t *bsTarget) NewConsumer(ctx context.Context) (consumer, error) {
	p := &bsPool{out: make(chan bsResult, bsConnsPerConsumer)}
	for range bsConnsPerConsumer {
		c, err := t.dial(ctx, func(c *bsConn) error { return c.WatchOnly(ctx, t.tube) })
		if err != nil {
			p.Close()
			return nil, err
		}
		p.workers = append(p.workers, &bsConsumer{c: c, secs: max(1, int(t.wait.Round(time.Second)/time.Second))})
	}
	p.start()
	return p, nil
}

// bsPool is a consumer over several connections, each reserving on its own
// goroutine.
type bsPool struct {
	workers []*bsConsumer
	out     chan bsResult
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// bsResult is what one connection's reserve returned.
type bsResult struct {
	b   batch
	err error
}

// start runs every connection's reserves until Close.
func (p *bsPool) start() {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	for _, w := range p.workers {
		p.wg.Go(func() {
			for ctx.Err() == nil {
				b, err := w.Next(ctx)
				if len(b.Seqs) == 0 && err == nil {
					continue
				}
				select {
				case p.out <- bsResult{b, err}:
				case <-ctx.Done():
					return
				}
				if err != nil && len(b.Seqs) == 0 {
					select { // the connection failed: do not spin
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
		})
	}
}

// Next returns the jobs one connection received.
func (p *bsPool) Next(ctx context.Context) (batch, error) {
	select {
	case r := <-p.out:
		return r.b, r.err
	case <-ctx.Done():
		return batch{}, ctx.Err()
	}
}

// Close stops the reserves and closes every connection.
func (p *bsPool) Close() error {
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
	var errs []error
	for _, w := range p.workers {
		errs = append(errs, w.Close())
	}
	return errors.Join(errs...)
}

func (t *bsTarget) Pending(ctx context.Context) (int64, error) {
	c, err := dialBeanstalk(ctx, t.addr)
	if err != nil {
		return -1, err
	}
	defer c.Close()
	st, err := c.Stats(ctx, "stats-tube "+t.tube)
	var be *bsError
	if errors.As(err, &be) && be.Reply == "NOT_FOUND" {
		return 0, nil
	}
	if err != nil {
		return -1, err
	}
	var n int64
	for _, k := range []string{"current-jobs-ready", "current-jobs-delayed", "current-jobs-reserved"} {
		v, err := strconv.ParseInt(st[k], 10, 64)
		if err != nil {
			return -1, fmt.Errorf("beanstalkd: stats-tube %s: %q: %w", k, st[k], err)
		}
		n += v
	}
	return n, nil
}

func (t *bsTarget) Resources(context.Context) (resources, error) {
	if t.proc == nil {
		return resources{RSSBytes: -1, RSSAnonBytes: -1, RSSFileBytes: -1, DiskBytes: -1}, errNotSpawned
	}
	return footprint(t.proc, t.dir)
}

func (t *bsTarget) Restart(ctx context.Context) (restartTimes, error) {
	if t.proc == nil {
		return restartTimes{}, errNotSpawned
	}
	t.drain()
	return restartProc(ctx, t.proc, t.waitReady)
}

// drain closes the idle producer connections.
func (t *bsTarget) drain() {
	for {
		select {
		case c := <-t.conns:
			c.Close()
		default:
			return
		}
	}
}

func (t *bsTarget) Close() error {
	t.drain()
	if t.proc == nil {
		return nil
	}
	_, err := t.proc.Stop(30 * time.Second)
	return err
}

// bsConsumer reserves one job at a time and deletes it in the round trip of
// the next reserve.
type bsConsumer struct {
	c       *bsConn
	secs    int
	pending uint64 // a job received and not yet deleted
}

func (c *bsConsumer) Next(ctx context.Context) (batch, error) {
	id, body, ok, err := c.c.ReserveWithTimeout(ctx, c.secs, c.pending)
	at := time.Now()
	c.pending = 0
	if ok {
		c.pending = id
	}
	if err != nil && !ok {
		return batch{}, err
	}
	if !ok {
		return batch{}, nil
	}
	return batch{At: at, Seqs: []int{decodeSeq(string(body))}}, err
}

func (c *bsConsumer) Close() error {
	if c.pending != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = c.c.Delete(ctx, c.pending)
		cancel()
	}
	return c.c.Close()
}

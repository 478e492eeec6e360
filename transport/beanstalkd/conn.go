package beanstalkd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// defaultTube is the tube every connection uses and watches at first.
const defaultTube = "default"

// deadlineSoon is how close to the end of a held job's lease a reserve
// answers DEADLINE_SOON, as beanstalkd's safety margin.
const deadlineSoon = time.Second

// retryPause is how long a reserve waits before it asks again while its
// group has no leader.
const retryPause = 100 * time.Millisecond

// errLineTooLong means a command line went past MaxLine.
var errLineTooLong = errors.New("command line too long")

// conn is one client connection. Its methods run on its own goroutine,
// but stop, which the server calls to drain it.
type conn struct {
	s      *Server
	nc     net.Conn
	r      *bufio.Reader
	w      *bufio.Writer
	ctx    context.Context // ends when the server drains
	cancel context.CancelFunc

	use     string
	watched []string
	held    map[uint64]heldJob // jobs this connection reserved
}

// heldJob is a job a connection holds reserved.
type heldJob struct {
	r        model.Receipt
	topic    string
	leaseEnd time.Time
	lease    time.Duration
}

func newConn(ctx context.Context, s *Server, nc net.Conn) *conn {
	cctx, cancel := context.WithCancel(ctx)
	c := &conn{s: s, nc: nc, r: bufio.NewReaderSize(nc, 4096), w: bufio.NewWriterSize(nc, 4096), ctx: cctx, cancel: cancel,
		use: defaultTube, watched: []string{defaultTube}, held: map[uint64]heldJob{}}
	s.tubesChange(func(tube func(string) *tubeState) {
		tube(defaultTube).using++
		tube(defaultTube).watching++
	})
	return c
}

// stop ends the connection's wait and makes its next read fail.
func (c *conn) stop() {
	c.cancel()
	c.nc.SetReadDeadline(time.Unix(1, 0))
}

// close releases what the connection holds: like beanstalkd, its
// reserved jobs go back to ready.
func (c *conn) close() {
	c.cancel()
	c.nc.Close()
	if len(c.held) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.CommandTimeout)
		for id, h := range c.held {
			if _, err := c.s.be.Nack(ctx, h.r, 0); err != nil {
				c.s.log.Debug("beanstalkd: release of a closed connection's job", "job", id, "err", err)
			}
		}
		cancel()
	}
	c.s.forget(c)
}

// serve reads and answers commands until the client quits, fails or the
// server drains.
func (c *conn) serve() {
	defer c.close()
	for {
		c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.IdleTimeout))
		if c.ctx.Err() != nil {
			return
		}
		if _, err := c.r.Peek(1); err != nil {
			return
		}
		c.nc.SetDeadline(time.Now().Add(c.s.cfg.CommandTimeout))
		line, err := c.readLine()
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				c.reply("BAD_FORMAT")
				c.w.Flush()
			}
			return
		}
		cmd, err := ParseCommand(line)
		switch {
		case err != nil:
			c.reply(err.Error())
		case cmd.Op == OpQuit:
			c.w.Flush()
			return
		default:
			c.s.cmds[cmd.Op].Add(1)
			if err := c.do(cmd); err != nil {
				return
			}
		}
		if c.r.Buffered() == 0 {
			c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.CommandTimeout))
			if c.w.Flush() != nil {
				return
			}
		}
	}
}

// readLine reads a command line and strips its CRLF. A line without CR
// before its LF is returned as it is, which the parser refuses.
func (c *conn) readLine() (string, error) {
	line, err := c.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) || len(line) > MaxLine {
		return "", errLineTooLong
	}
	if err != nil {
		return "", err
	}
	if l, ok := bytes.CutSuffix(line, []byte("\r\n")); ok {
		return string(l), nil
	}
	return string(line), nil
}

// reply writes one reply line.
func (c *conn) reply(parts ...string) {
	for i, p := range parts {
		if i > 0 {
			c.w.WriteByte(' ')
		}
		c.w.WriteString(p)
	}
	c.w.WriteString("\r\n")
}

// replyData writes a reply line ending in the data's length, then the
// data and CRLF.
func (c *conn) replyData(data []byte, parts ...string) {
	c.reply(append(parts, strconv.Itoa(len(data)))...)
	c.w.Write(data)
	c.w.WriteString("\r\n")
}

// callCtx is the context of a backend call: it outlives the server's
// drain, so that a write under way finishes, and is bounded.
func (c *conn) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(c.ctx), c.s.cfg.CommandTimeout)
}

// do answers one command; an error means the connection must close.
func (c *conn) do(cmd Command) error {
	switch cmd.Op {
	case OpPut:
		return c.put(cmd)
	case OpUse:
		c.setUse(cmd.Tube)
		c.reply("USING", cmd.Tube)
	case OpWatch:
		c.watch(cmd.Tube)
	case OpIgnore:
		c.ignore(cmd.Tube)
	case OpReserve, OpReserveWithTimeout:
		c.reserve(cmd)
	case OpReserveJob:
		c.s.log.Info("beanstalkd: reserve-job is answered NOT_FOUND: a node hands out messages by due time only", "job", cmd.ID)
		c.reply("NOT_FOUND")
	case OpDelete:
		c.deleteJob(cmd.ID)
	case OpRelease, OpBury, OpTouch:
		c.settle(cmd)
	case OpPeek:
		c.peekID(cmd.ID)
	case OpPeekReady, OpPeekBuried:
		c.peekState(cmd.Op)
	case OpPeekDelayed:
		c.s.log.Debug("beanstalkd: peek-delayed is answered NOT_FOUND: delayed messages are listed by due second, not by tube")
		c.reply("NOT_FOUND")
	case OpKick:
		c.kick(cmd.Bound)
	case OpKickJob:
		c.kickJob(cmd.ID)
	case OpStatsJob:
		c.statsJob(cmd.ID)
	case OpStatsTube:
		c.statsTube(cmd.Tube)
	case OpStats:
		c.stats()
	case OpListTubes:
		c.listTubes()
	case OpListTubeUsed:
		c.reply("USING", c.use)
	case OpListTubesWatched:
		c.replyData(yamlList(c.watched), "OK")
	case OpPauseTube:
		c.pauseTube(cmd.Tube, time.Duration(cmd.Delay)*time.Second)
	}
	return nil
}

// fail answers a backend error with the closest reply, and logs it when
// the protocol cannot say what it was.
func (c *conn) fail(op string, err error) {
	switch {
	case errors.Is(err, model.ErrNotFound), errors.Is(err, model.ErrConflict):
		c.reply("NOT_FOUND")
	case errors.Is(err, model.ErrTooLarge):
		c.reply("JOB_TOO_BIG")
	case errors.Is(err, model.ErrOverloaded):
		c.s.log.Warn("beanstalkd: answered OUT_OF_MEMORY", "cmd", op, "err", err)
		c.reply("OUT_OF_MEMORY")
	case errors.Is(err, model.ErrInvalid):
		c.s.log.Info("beanstalkd: answered BAD_FORMAT", "cmd", op, "err", err)
		c.reply("BAD_FORMAT")
	default:
		c.s.log.Warn("beanstalkd: answered INTERNAL_ERROR", "cmd", op, "err", err)
		c.reply("INTERNAL_ERROR")
	}
}

// put reads a job's body and enqueues it: INSERTED once committed.
func (c *conn) put(cmd Command) error {
	if cmd.Bytes > c.s.cfg.MaxJobSize {
		if _, err := io.CopyN(io.Discard, c.r, int64(cmd.Bytes)+2); err != nil {
			return err
		}
		c.reply("JOB_TOO_BIG")
		return nil
	}
	body := make([]byte, cmd.Bytes+2)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return err
	}
	if !bytes.HasSuffix(body, []byte("\r\n")) {
		c.reply("EXPECTED_CRLF")
		return nil
	}
	body = body[:cmd.Bytes]
	if c.s.draining.Load() {
		c.reply("DRAINING")
		return nil
	}
	delay := time.Duration(cmd.Delay) * time.Second
	if delay > c.s.cfg.MaxDelay {
		c.s.log.Info("beanstalkd: put answered BAD_FORMAT: delay over the limit", "delay", delay, "max", c.s.cfg.MaxDelay)
		c.reply("BAD_FORMAT")
		return nil
	}
	// beanstalkd makes a ttr of 0 one second.
	ttr := min(max(time.Duration(max(cmd.TTR, 1))*time.Second, c.s.cfg.MinTTR), c.s.cfg.MaxTTR)
	if len(body) == 0 {
		body = nil
	}
	// Due at the first millisecond not before now + delay: never early.
	due := c.s.cfg.Now().Add(delay + time.Millisecond - 1).UnixMilli()
	m := command.NewMessage{Topic: c.use, Body: body, Priority: PriorityOf(cmd.Pri),
		DeliverAtMs: due, TTRMs: ttr.Milliseconds(), MaxAttempts: c.s.cfg.MaxAttempts}
	ctx, cancel := c.callCtx()
	defer cancel()
	id, err := retrying(c, ctx, func() (model.ID, error) { return c.s.be.Put(ctx, m) })
	if err != nil {
		c.fail("put", err)
		return nil
	}
	job, ok := JobID(id)
	if !ok {
		c.s.log.Error("beanstalkd: put: the message's id does not pack into a job id", "id", id.String())
		c.reply("INTERNAL_ERROR")
		return nil
	}
	c.reply("INSERTED", strconv.FormatUint(job, 10))
	return nil
}

// PriorityOf maps a beanstalkd pri (0 most urgent, 1024 the clients'
// default) to a delaywheel priority (higher first, 0 the default).
func PriorityOf(pri uint32) int64 { return 1024 - int64(pri) }

// PriOf maps a delaywheel priority back to a beanstalkd pri, clamped to
// the protocol's range.
func PriOf(priority int64) uint32 {
	return uint32(min(max(1024-priority, 0), math.MaxUint32))
}

func (c *conn) setUse(t string) {
	old := c.use
	c.use = t
	c.s.tubesChange(func(tube func(string) *tubeState) {
		tube(old).using--
		tube(t).using++
	})
}

func (c *conn) watch(t string) {
	if !slices.Contains(c.watched, t) {
		if len(c.watched) >= c.s.cfg.MaxWatched {
			c.s.log.Info("beanstalkd: watch answered OUT_OF_MEMORY: too many watched tubes", "limit", c.s.cfg.MaxWatched)
			c.reply("OUT_OF_MEMORY")
			return
		}
		c.watched = append(c.watched, t)
		c.s.tubesChange(func(tube func(string) *tubeState) { tube(t).watching++ })
	}
	c.reply("WATCHING", strconv.Itoa(len(c.watched)))
}

func (c *conn) ignore(t string) {
	i := slices.Index(c.watched, t)
	if i >= 0 {
		if len(c.watched) == 1 {
			c.reply("NOT_IGNORED")
			return
		}
		c.watched = slices.Delete(c.watched, i, i+1)
		c.s.tubesChange(func(tube func(string) *tubeState) { tube(t).watching-- })
	}
	c.reply("WATCHING", strconv.Itoa(len(c.watched)))
}

// job writes a FOUND or RESERVED reply of a message.
func (c *conn) job(word string, job uint64, body []byte) {
	c.replyData(body, word, strconv.FormatUint(job, 10))
}

// soonest returns the earliest end of a held job's lease, dropping the
// jobs whose lease ended (the node has taken them back).
func (c *conn) soonest(now time.Time) (time.Time, bool) {
	var first time.Time
	for id, h := range c.held {
		if !h.leaseEnd.After(now) {
			delete(c.held, id)
			continue
		}
		if first.IsZero() || h.leaseEnd.Before(first) {
			first = h.leaseEnd
		}
	}
	return first, !first.IsZero()
}

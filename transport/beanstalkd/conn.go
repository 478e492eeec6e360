package beanstalkd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

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

	puts     []pendingPut // pipelined puts not yet answered (put.go)
	putBytes int          // the size of their bodies

	pending *pendingDelete // a delete answered after the reserve that follows it (ack.go)

	hungUp atomic.Bool // the client closed its side while a reserve waited (watchHangup)
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

// watchHangup ends the connection's wait (c.ctx) when the client closes
// its side while nothing it sent is left to read, and sets hungUp: a
// reserve that waits then stops, as beanstalkd's does, instead of taking
// a job for a client that is gone. The returned stop ends the watch; the
// connection's reader is the caller's again once it returns.
func (c *conn) watchHangup() (stop func()) {
	if c.r.Buffered() > 0 {
		return func() {}
	}
	c.nc.SetReadDeadline(time.Time{}) // a reserve that waits is not idle
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := c.r.Peek(1); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			c.hungUp.Store(true)
			c.cancel()
		}
	}()
	return func() {
		c.nc.SetReadDeadline(time.Unix(1, 0))
		<-done
	}
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
	defer func() {
		// Puts the client sent before it left are made, as beanstalkd
		// makes each command it received.
		if len(c.puts) > 0 || c.pending != nil {
			c.settlePending()
			c.flushPuts()
			c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.CommandTimeout))
			c.w.Flush()
		}
	}()
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
		var cmd Command
		switch {
		case errors.Is(err, errLineTooLong):
			err = ErrBadFormat // as beanstalkd, which reads on
		case err != nil:
			return
		default:
			cmd, err = ParseCommand(line)
		}
		if err != nil || cmd.Op != OpReserve && cmd.Op != OpReserveWithTimeout {
			c.settlePending() // the answers keep the commands' order
		}
		if err != nil || cmd.Op != OpPut {
			c.flushPuts()
		}
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

// readLine reads a command line and strips its CRLF, as beanstalkd reads
// one: the line ends at the first CR of its first MaxLine bytes when an
// LF follows it (an LF alone ends nothing). A line that does not end
// there is too long: it is read on, MaxLine bytes at a time, each looked
// at as the first, up to the first of them that ends, which ends it, and
// errLineTooLong is returned once it has.
func (c *conn) readLine() (string, error) {
	n, err := c.scanLine()
	if err != nil {
		return "", err
	}
	if n > 0 {
		b, _ := c.r.Peek(n)
		line := string(b[:n-2])
		c.r.Discard(n)
		return line, nil
	}
	for n == 0 {
		c.r.Discard(MaxLine)
		if n, err = c.scanLine(); err != nil {
			return "", err
		}
	}
	c.r.Discard(n)
	return "", errLineTooLong
}

// scanLine returns the length, CRLF included, of the line that starts the
// unread input, reading more of it as it comes: 0 once MaxLine bytes have
// come without the line ending within them.
func (c *conn) scanLine() (int, error) {
	for n := 1; ; {
		c.flushBeforeRead(n)
		b, err := c.r.Peek(n)
		if err != nil {
			return 0, err
		}
		if i := bytes.IndexByte(b[:len(b)-1], '\r'); i >= 0 && b[i+1] == '\n' {
			return i + 2, nil
		}
		if len(b) == MaxLine {
			return 0, nil
		}
		n = min(max(len(b)+1, c.r.Buffered()), MaxLine)
	}
}

// flushBeforeRead sends the replies written and not yet sent when fewer
// than n bytes are left to read, before the read waits for more: as
// beanstalkd, which answers each command before it reads the next, a
// client that has sent part of a line or body (a put's body shorter than
// its length says, answered EXPECTED_CRLF once the rest comes) has the
// answers to what came before. A failed send ends the connection at its
// next flush.
func (c *conn) flushBeforeRead(n int) {
	if c.r.Buffered() < n && c.w.Buffered() > 0 {
		c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.CommandTimeout))
		c.w.Flush()
	}
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
		c.reserveJob(cmd.ID)
	case OpDelete:
		c.deleteJob(cmd.ID)
	case OpRelease, OpBury, OpTouch:
		c.settle(cmd)
	case OpPeek:
		c.peekID(cmd.ID)
	case OpPeekReady, OpPeekBuried:
		c.peekState(cmd.Op)
	case OpPeekDelayed:
		c.peekDelayed()
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
func (c *conn) fail(op string, err error) { c.reply(c.failure(op, err)) }

// failure returns the closest reply to a backend error, and logs the error
// when the protocol cannot say what it was.
func (c *conn) failure(op string, err error) string {
	switch {
	case errors.Is(err, model.ErrNotFound), errors.Is(err, model.ErrConflict):
		return "NOT_FOUND"
	case errors.Is(err, model.ErrTooLarge):
		return "JOB_TOO_BIG"
	case errors.Is(err, model.ErrOverloaded):
		c.s.log.Warn("beanstalkd: answered OUT_OF_MEMORY", "cmd", op, "err", err)
		return "OUT_OF_MEMORY"
	case errors.Is(err, model.ErrInvalid):
		c.s.log.Info("beanstalkd: answered BAD_FORMAT", "cmd", op, "err", err)
		return "BAD_FORMAT"
	default:
		c.s.log.Warn("beanstalkd: answered INTERNAL_ERROR", "cmd", op, "err", err)
		return "INTERNAL_ERROR"
	}
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

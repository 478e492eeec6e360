package beanstalkd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// The bounds of one batch of pipelined puts. Invariant: a client that
// pipelines puts (sends the next before the answer to the last) has its
// consecutive puts enqueued as one Backend.Put, one log entry and one
// commit for all of them, instead of one commit each, one after the other;
// each is still answered INSERTED only once that entry is committed, and
// the answers keep the commands' order. A batch holds at most as many
// messages as a job id's position bits can name, and holds at most
// maxPutBatchBytes of bodies in memory.
const (
	maxPutBatch      = 1 << positionBits
	maxPutBatchBytes = 1 << 20
)

// pendingPut is a put read and not yet answered: a message to enqueue, or
// the answer it gets without one (reply).
type pendingPut struct {
	m     command.NewMessage
	reply string
}

// put reads a job's body and queues it; the queued puts are enqueued and
// answered (INSERTED once committed) when the next command is not a put
// already received, or the batch is full.
func (c *conn) put(cmd Command) error {
	p, err := c.readPut(cmd)
	if err != nil {
		return err
	}
	c.puts = append(c.puts, p)
	c.putBytes += len(p.m.Body)
	if len(c.puts) >= maxPutBatch || c.putBytes >= maxPutBatchBytes || !c.putFollows() {
		c.flushPuts()
	}
	return nil
}

// putFollows tells whether the client has already sent the start of
// another put.
func (c *conn) putFollows() bool {
	const word = "put "
	if c.r.Buffered() < len(word) {
		return false
	}
	next, err := c.r.Peek(len(word))
	return err == nil && string(next) == word
}

// readPut reads a put's body and makes its message.
func (c *conn) readPut(cmd Command) (pendingPut, error) {
	if cmd.Trailer && cmd.Bytes <= c.s.cfg.MaxJobSize {
		return pendingPut{reply: "BAD_FORMAT"}, nil // no body is read, as beanstalkd reads none
	}
	c.flushBeforeRead(cmd.Bytes + 2)
	if cmd.Bytes > c.s.cfg.MaxJobSize {
		if _, err := io.CopyN(io.Discard, c.r, int64(cmd.Bytes)+2); err != nil {
			return pendingPut{}, err
		}
		return pendingPut{reply: "JOB_TOO_BIG"}, nil
	}
	body := make([]byte, cmd.Bytes+2)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return pendingPut{}, err
	}
	if !bytes.HasSuffix(body, []byte("\r\n")) {
		return pendingPut{reply: "EXPECTED_CRLF"}, nil
	}
	body = body[:cmd.Bytes]
	if c.s.draining.Load() {
		return pendingPut{reply: "DRAINING"}, nil
	}
	delay := time.Duration(cmd.Delay) * time.Second
	if delay > c.s.cfg.MaxDelay {
		c.s.log.Info("beanstalkd: put answered BAD_FORMAT: delay over the limit", "delay", delay, "max", c.s.cfg.MaxDelay)
		return pendingPut{reply: "BAD_FORMAT"}, nil
	}
	// beanstalkd makes a ttr of 0 one second.
	ttr := min(max(time.Duration(max(cmd.TTR, 1))*time.Second, c.s.cfg.MinTTR), c.s.cfg.MaxTTR)
	if len(body) == 0 {
		body = nil
	}
	// Due at the first millisecond not before now + delay: never early.
	due := c.s.cfg.Now().Add(delay + time.Millisecond - 1).UnixMilli()
	return pendingPut{m: command.NewMessage{Topic: c.use, Body: body, Priority: PriorityOf(cmd.Pri),
		DeliverAtMs: due, TTRMs: ttr.Milliseconds(), MaxAttempts: c.s.cfg.MaxAttempts}}, nil
}

// flushPuts enqueues the queued puts and answers each, in order.
func (c *conn) flushPuts() {
	if len(c.puts) == 0 {
		return
	}
	msgs := make([]command.NewMessage, 0, len(c.puts))
	for _, p := range c.puts {
		if p.reply == "" {
			msgs = append(msgs, p.m)
		}
	}
	answers := c.enqueue(msgs)
	for _, p := range c.puts {
		if p.reply == "" {
			p.reply, answers = answers[0], answers[1:]
		}
		c.reply(p.reply)
	}
	clear(c.puts)
	c.puts, c.putBytes = c.puts[:0], 0
}

// enqueue puts msgs as one batch and returns each one's answer. A batch
// refused as invalid or too large was not enqueued: its messages are put
// one by one, so that each gets its own answer.
func (c *conn) enqueue(msgs []command.NewMessage) []string {
	if len(msgs) == 0 {
		return nil
	}
	ctx, cancel := c.callCtx()
	defer cancel()
	ids, err := retrying(ctx, c, func() ([]model.ID, error) { return c.s.be.Put(ctx, msgs) })
	if err == nil && len(ids) != len(msgs) {
		err = fmt.Errorf("beanstalkd: %d ids for %d puts", len(ids), len(msgs))
	}
	out := make([]string, len(msgs))
	switch {
	case err != nil && len(msgs) > 1 && (errors.Is(err, model.ErrInvalid) || errors.Is(err, model.ErrTooLarge)):
		for i := range msgs {
			out[i] = c.enqueue(msgs[i : i+1])[0]
		}
	case err != nil:
		reply := c.failure("put", err)
		for i := range out {
			out[i] = reply
		}
	default:
		for i, id := range ids {
			job, ok := JobID(id)
			if !ok {
				c.s.log.Error("beanstalkd: put: the message's id does not pack into a job id", "id", id.String())
				out[i] = "INTERNAL_ERROR"
				continue
			}
			out[i] = "INSERTED " + strconv.FormatUint(job, 10)
		}
	}
	return out
}

// PriorityOf maps a beanstalkd pri (0 most urgent, 1024 the clients'
// default) to a delaywheel priority (higher first, 0 the default).
func PriorityOf(pri uint32) int64 { return 1024 - int64(pri) }

// PriOf maps a delaywheel priority back to a beanstalkd pri, clamped to
// the protocol's range.
func PriOf(priority int64) uint32 {
	return uint32(min(max(1024-priority, 0), math.MaxUint32))
}

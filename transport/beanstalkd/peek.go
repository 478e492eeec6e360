package beanstalkd

import (
	"context"
	"errors"
	"strconv"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Looking at jobs and moving them back: peek, peek-ready, peek-buried,
// peek-delayed, kick and kick-job.

// peekID answers peek: FOUND with the job in any state.
func (c *conn) peekID(job uint64) {
	if v, ok := c.view("peek", job); ok {
		c.job("FOUND", job, v.Body)
	}
}

// view returns job's message in any state for the command op and true;
// when it cannot, it answers op's failure and returns false.
func (c *conn) view(op string, job uint64) (wheel.View, bool) {
	ctx, cancel := c.callCtx()
	defer cancel()
	v, err := c.s.be.Get(ctx, MessageID(job))
	if err != nil {
		c.fail(op, err)
		return v, false
	}
	return v, true
}

// peekState answers peek-ready and peek-buried of the used tube.
func (c *conn) peekState(op Op) {
	ctx, cancel := c.callCtx()
	defer cancel()
	list, name := c.s.be.Ready, "peek-ready"
	if op == OpPeekBuried {
		list, name = c.s.be.Dead, "peek-buried"
	}
	vs, err := list(ctx, c.use, 16)
	if err != nil {
		c.fail(name, err)
		return
	}
	for _, v := range vs {
		if job, ok := JobID(v.ID); ok {
			c.job("FOUND", job, v.Body)
			return
		}
	}
	c.reply("NOT_FOUND")
}

// peekDelayed answers peek-delayed: FOUND with the used tube's delayed job
// that is due first.
func (c *conn) peekDelayed() {
	ctx, cancel := c.callCtx()
	defer cancel()
	v, ok, err := c.s.be.Delayed(ctx, c.use)
	switch {
	case err != nil:
		c.fail("peek-delayed", err)
		return
	case !ok:
		c.reply("NOT_FOUND")
		return
	}
	job, ok := JobID(v.ID)
	if !ok {
		c.s.log.Info("beanstalkd: peek-delayed answered NOT_FOUND: the message's id does not pack into a job id", "id", v.ID.String())
		c.reply("NOT_FOUND")
		return
	}
	c.job("FOUND", job, v.Body)
}

// maxKick is the most jobs one kick moves.
const maxKick = 1000

// kick answers kick: up to bound buried jobs of the used tube back to
// ready or, when it has none, up to bound of its delayed jobs due now,
// the first due first (the delayed jobs within the wheel's horizon, as
// peek-delayed sees them).
func (c *conn) kick(bound uint32) {
	ctx, cancel := c.callCtx()
	defer cancel()
	n := 0
	if bound > 0 {
		dead, err := c.s.be.Dead(ctx, c.use, int(min(bound, maxKick)))
		if err != nil {
			c.fail("kick", err)
			return
		}
		if len(dead) > 0 {
			ids := make([]model.ID, len(dead))
			for i, v := range dead {
				ids[i] = v.ID
			}
			if n, err = c.s.be.Redrive(ctx, c.use, ids); err != nil {
				c.fail("kick", err)
				return
			}
		} else if n, err = c.kickDelayed(ctx, int(min(bound, maxKick))); err != nil {
			if n == 0 {
				c.fail("kick", err)
				return
			}
			c.s.log.Warn("beanstalkd: kick answered with the delayed jobs kicked before a failure", "kicked", n, "err", err)
		}
	}
	c.reply("KICKED", strconv.Itoa(n))
}

// kickDelayed makes up to bound delayed jobs of the used tube due now, the
// first due first, and returns how many it moved. A job that left the
// delayed state meanwhile is passed over.
func (c *conn) kickDelayed(ctx context.Context, bound int) (int, error) {
	seen := map[model.ID]bool{}
	n := 0
	for n < bound {
		v, ok, err := c.s.be.Delayed(ctx, c.use)
		if err != nil || !ok || seen[v.ID] {
			return n, err
		}
		seen[v.ID] = true
		err = c.s.be.Reschedule(ctx, v.ID, c.s.cfg.Now().UnixMilli())
		switch {
		case errors.Is(err, model.ErrNotFound), errors.Is(err, model.ErrConflict):
			continue
		case err != nil:
			return n, err
		}
		n++
	}
	return n, nil
}

// kickJob answers kick-job: a buried job back to ready, a delayed one due
// now.
func (c *conn) kickJob(job uint64) {
	ctx, cancel := c.callCtx()
	defer cancel()
	id := MessageID(job)
	v, err := c.s.be.Get(ctx, id)
	if err != nil {
		c.fail("kick-job", err)
		return
	}
	switch v.State {
	case wheel.StateDead:
		n, err := c.s.be.Redrive(ctx, v.Topic, []model.ID{id})
		if err == nil && n == 0 {
			err = model.ErrNotFound
		}
		if err != nil {
			c.fail("kick-job", err)
			return
		}
	case wheel.StateDelayed:
		if err := c.s.be.Reschedule(ctx, id, c.s.cfg.Now().UnixMilli()); err != nil {
			c.fail("kick-job", err)
			return
		}
	default:
		c.reply("NOT_FOUND")
		return
	}
	c.reply("KICKED")
}

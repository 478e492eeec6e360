package beanstalkd

import (
	"github.com/delaywheel/delaywheel/wheel/model"
)

// reserveJob answers reserve-job: RESERVED with the job, leased for its
// time-to-run whatever its due time, when it is ready, delayed or buried
// (or was reserved and its time-to-run is over); NOT_FOUND when it is
// reserved, unknown or out of attempts.
func (c *conn) reserveJob(job uint64) {
	if _, ok := c.held[job]; ok {
		c.reply("NOT_FOUND") // reserved by this connection
		return
	}
	ctx, cancel := c.callCtx()
	defer cancel()
	d, err := retrying(ctx, c, func() (model.Delivery, error) { return c.s.be.ReserveID(ctx, MessageID(job)) })
	if err != nil {
		c.fail("reserve-job", err)
		return
	}
	c.hold(d)
}

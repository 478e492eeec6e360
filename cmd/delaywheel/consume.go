package main

import (
	"errors"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/transport/api"
)

// ack, nack and touch act on the receipts of reserved messages; reschedule
// moves a delayed or ready message. Each prints its answer as the other
// commands do.

func (a *admin) ack(c *cli.Context) error {
	return show(c, 1, -1, func(s *session) (api.AckResponse, error) {
		return s.cl.Ack(c.Context, c.Args().Slice())
	}, func(w io.Writer, r api.AckResponse) {
		row(w, "acked:", r.Acked)
		row(w, "stale:", r.Stale)
	})
}

func (a *admin) nack(c *cli.Context) error {
	return show(c, 1, -1, func(s *session) (api.NackResponse, error) {
		return s.cl.Nack(c.Context, c.Args().Slice(), c.Duration("delay").Milliseconds())
	}, func(w io.Writer, r api.NackResponse) {
		row(w, "nacked:", r.Nacked)
		row(w, "stale:", r.Stale)
	})
}

func (a *admin) touch(c *cli.Context) error {
	return show(c, 1, -1, func(s *session) (api.TouchResponse, error) {
		return s.cl.Touch(c.Context, c.Args().Slice())
	}, func(w io.Writer, r api.TouchResponse) {
		row(w, "touched:", r.Touched)
		row(w, "stale:", r.Stale)
	})
}

func (a *admin) reschedule(c *cli.Context) error {
	return show(c, 1, 1, func(s *session) (api.Rescheduled, error) {
		var req api.RescheduleRequest
		var err error
		if req.DelayMs, req.DeliverAtMs, err = when(c); err != nil {
			return api.Rescheduled{}, err
		}
		if (req.DelayMs == nil) == (req.DeliverAtMs == nil) {
			return api.Rescheduled{}, errors.New("reschedule needs one of --delay and --deliver-at")
		}
		return s.cl.Reschedule(c.Context, c.Args().Get(0), req)
	}, func(w io.Writer, r api.Rescheduled) {
		row(w, "ID", "DELIVER_AT")
		row(w, r.ID, instant(r.DeliverAtMs))
	})
}

package main

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/transport/api"
)

// The commands of a topic's consumers: reserve, ack, nack, touch and
// bury, dead and redrive; and reschedule, which moves a delayed or ready message.
// An empty list says on stderr why it is empty.

func (a *admin) reserve(c *cli.Context) error {
	s, err := newSession(c, 1, 1)
	if err != nil {
		return err
	}
	req := api.ReserveRequest{Max: api.Ptr(c.Int("max")), WaitMs: c.Duration("wait").Milliseconds()}
	if c.IsSet("ttr") {
		req.TTRMs = api.Ptr(c.Duration("ttr").Milliseconds())
	}
	topic := c.Args().Get(0)
	ds, err := s.api.Reserve(c.Context, topic, req)
	if err != nil {
		return err
	}
	if len(ds) == 0 {
		return s.empty(topic, "no messages due on topic %s", false)
	}
	err = s.print(func(w io.Writer) {
		row(w, "ID", "ATTEMPT", "DELIVER_AT", "LEASE_EXPIRES", "RECEIPT", "BODY")
		for _, d := range ds {
			row(w, d.ID, d.Attempt, instant(d.DeliverAtMs), instant(d.LeaseExpiresMs), d.Receipt, bodyText(d.Payload))
		}
	})
	if err != nil || !c.Bool("ack") {
		return err
	}
	receipts := make([]string, len(ds))
	for i, d := range ds {
		receipts[i] = d.Receipt
	}
	acked, err := s.api.Ack(c.Context, receipts)
	if err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	out := c.App.Writer
	if c.Bool("json") {
		out = c.App.ErrWriter // keep stdout one JSON document
	}
	_, err = fmt.Fprintf(out, "acked %d, stale %d\n", acked.Acked, acked.Stale)
	return err
}

func (a *admin) ack(c *cli.Context) error {
	return settleReceipts(c, "acked:", func(s *session, rs []string) (int, int, error) {
		r, err := s.api.Ack(c.Context, rs)
		return r.Acked, r.Stale, err
	})
}

func (a *admin) nack(c *cli.Context) error {
	return settleReceipts(c, "nacked:", func(s *session, rs []string) (int, int, error) {
		r, err := s.api.Nack(c.Context, rs, c.Duration("delay").Milliseconds())
		return r.Nacked, r.Stale, err
	})
}

func (a *admin) touch(c *cli.Context) error {
	return settleReceipts(c, "touched:", func(s *session, rs []string) (int, int, error) {
		r, err := s.api.Touch(c.Context, rs)
		return r.Touched, r.Stale, err
	})
}

func (a *admin) bury(c *cli.Context) error {
	return settleReceipts(c, "buried:", func(s *session, rs []string) (int, int, error) {
		r, err := s.api.Bury(c.Context, rs)
		return r.Buried, r.Stale, err
	})
}

// settleReceipts runs a command that settles the receipts its arguments
// list with settle, and prints how many it settled (labelled done) and
// how many were stale.
func settleReceipts(c *cli.Context, done string, settle func(s *session, receipts []string) (n, stale int, err error)) error {
	type counts struct{ n, stale int }
	return show(c, 1, -1, func(s *session) (counts, error) {
		n, stale, err := settle(s, c.Args().Slice())
		return counts{n, stale}, err
	}, func(w io.Writer, r counts) {
		row(w, done, r.n)
		row(w, "stale:", r.stale)
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
		return s.api.Reschedule(c.Context, c.Args().Get(0), req)
	}, func(w io.Writer, r api.Rescheduled) {
		row(w, "ID", "DELIVER_AT")
		row(w, r.ID, instant(r.DeliverAtMs))
	})
}

func (a *admin) dead(c *cli.Context) error {
	s, err := newSession(c, 1, 1)
	if err != nil {
		return err
	}
	topic := c.Args().Get(0)
	ms, err := s.api.Dead(c.Context, topic, c.Int("limit"))
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return s.empty(topic, "no dead letters on topic %s", true)
	}
	return s.print(func(w io.Writer) {
		row(w, "ID", "ATTEMPTS", "ENQUEUED_AT", "KEY", "BODY")
		for _, m := range ms {
			row(w, m.ID, m.Attempts, instant(m.EnqueuedMs), m.Key, bodyText(m.Payload))
		}
	})
}

func (a *admin) redrive(c *cli.Context) error {
	s, err := newSession(c, 1, -1)
	if err != nil {
		return err
	}
	topic := c.Args().Get(0)
	var ids []string // nil: every dead letter of the topic
	if c.Args().Len() > 1 {
		ids = c.Args().Tail()
	}
	n, err := s.api.Redrive(c.Context, topic, ids)
	if err != nil {
		return err
	}
	if n == 0 {
		ok, err := s.topicExists(topic)
		if err != nil {
			return err
		}
		if !ok {
			return errNoTopic(topic)
		}
	}
	return s.print(func(w io.Writer) { row(w, "redriven:", n) })
}

// errNoTopic says that topic has never held a message.
func errNoTopic(topic string) error { return fmt.Errorf("topic %s does not exist", topic) }

// topicExists reports whether topic has ever held a message. It keeps the
// last answer for print.
func (s *session) topicExists(topic string) (bool, error) {
	raw := s.raw
	ts, err := s.api.Topics(s.c.Context)
	s.raw = raw
	return slices.ContainsFunc(ts, func(t api.TopicCounts) bool { return t.Topic == topic }), err
}

// empty handles an empty list of topic: with --json it prints the answer
// as usual; then it says on stderr why the list is empty: the note, or that
// the topic does not exist (an error when missingFails).
func (s *session) empty(topic, note string, missingFails bool) error {
	if s.c.Bool("json") {
		if err := s.print(nil); err != nil {
			return err
		}
	}
	ok, err := s.topicExists(topic)
	switch {
	case err != nil:
		return err
	case !ok && missingFails:
		return errNoTopic(topic)
	case !ok:
		note = errNoTopic(topic).Error()
	default:
		note = fmt.Sprintf(note, topic)
	}
	_, err = fmt.Fprintln(s.c.App.ErrWriter, note)
	return err
}

package dispatch

import (
	"context"
	"fmt"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// ReserveID leases one message by its id, whatever its due time, for ttr
// (zero: its own): beanstalkd's reserve-job. The message must be ready,
// delayed, reserved with its lease over (beanstalkd's TTR timed out: the
// job is ready again) or dead (buried), must have attempts left unless
// dead, and must not be in a hand-off already; skip(topic) true refuses it
// too (a webhook's topic). Anything else is model.ErrNotFound.
//
// It takes the same Lease entry a reserve's hand-off does, so the message
// leaves its ready queue or its slot or overflow placement, becomes
// reserved under a new receipt and counts an attempt, and the store's
// apply decides as it does for any Lease. A dead message takes a
// LeaseBuried entry instead: redriven (its attempts counted afresh, as a
// kick's) and leased in one apply. It is marked in flight while its
// Lease is on its way, as a reserve's hand-off is, so neither takes it
// from the other. It is answered only once the Lease has committed: a
// message taken by id may have been handed out, settled or buried by an
// entry not yet applied when it was read, and only the apply knows.
func (d *Dispatcher) ReserveID(ctx context.Context, id model.ID, ttr time.Duration, skip func(topic string) bool) (model.Delivery, error) {
	d.mu.Lock()
	if _, ok := d.inflight[id]; ok {
		d.mu.Unlock()
		return model.Delivery{}, fmt.Errorf("%w: message %s is being handed to a consumer", model.ErrNotFound, id)
	}
	v, err := d.n.Store().Get(id)
	if err != nil {
		d.mu.Unlock()
		return model.Delivery{}, err
	}
	nowMs := d.clock.Now().UnixMilli()
	if err := reservable(v, nowMs, skip); err != nil {
		d.mu.Unlock()
		return model.Delivery{}, err
	}
	d.inflight[id] = struct{}{}
	d.mu.Unlock()

	entry := leaseOf
	if v.State == wheel.StateDead {
		v.Attempts, v.DeliverAtMs = 0, nowMs // the redrive's
		entry = func(nowMs int64, items []command.LeaseItem) command.Command {
			return command.LeaseBuried{NowMs: nowMs, Topic: v.Topic, Item: items[0]}
		}
	}
	ds, err := d.lease(ctx, []model.Message{v.Message}, ttr, false, entry)
	switch {
	case err != nil:
		return model.Delivery{}, err
	case len(ds) == 0:
		return model.Delivery{}, fmt.Errorf("%w: message %s changed before its lease applied", model.ErrNotFound, id)
	}
	return ds[0], nil
}

// reservable refuses, with model.ErrNotFound, a message ReserveID must not
// lease at nowMs.
func reservable(v wheel.View, nowMs int64, skip func(topic string) bool) error {
	leaseOver := v.State == wheel.StateReserved && v.LeaseExpiresMs < nowMs
	switch {
	case v.State != wheel.StateReady && v.State != wheel.StateDelayed && v.State != wheel.StateDead && !leaseOver:
		return fmt.Errorf("%w: message %s is %s", model.ErrNotFound, v.ID, v.State)
	case v.State != wheel.StateDead && v.Attempts >= v.MaxAttempts:
		return fmt.Errorf("%w: message %s has no attempts left", model.ErrNotFound, v.ID)
	case skip != nil && skip(v.Topic):
		return fmt.Errorf("%w: message %s is of topic %q, delivered by its webhook", model.ErrNotFound, v.ID, v.Topic)
	}
	return nil
}

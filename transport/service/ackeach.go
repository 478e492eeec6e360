package service

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// Acked is one receipt's outcome of AckEach.
type Acked struct {
	// Done tells whether the ack took effect; false with a nil Err: the
	// receipt no longer held its message.
	Done bool
	// Err is the receipt's own failure: its ack was refused, or whether
	// it took effect is unknown. Done is then false.
	Err error
}

// AckEach acks rs, all of group g, and tells of each its outcome: res[i]
// is rs[i]'s. On a group this node leads they are one log entry, all or
// nothing: its failure is err. On a group led elsewhere each receipt is
// its own forwarded ack, all at once, and each failure is its receipt's
// own Err, whatever the others' outcomes; err is then only an answer
// that holds for every receipt (the group refused, no leader reached).
func AckEach(ctx context.Context, r *Router, g int, rs []model.Receipt) (res []Acked, err error) {
	for i, rc := range rs {
		if rc.ID.Group() != g && r.pin == 0 {
			return nil, refuse(model.ErrInvalid, "receipts[%d]: of group %d, not %d", i, rc.ID.Group(), g)
		}
	}
	if err := r.CheckGroup(g); err != nil {
		return nil, err
	}
	return Call(ctx, r, g, func(b Backend) ([]Acked, error) {
		done, err := b.AckEach(ctx, rs)
		if err != nil {
			return nil, err
		}
		res := make([]Acked, len(done))
		for i, d := range done {
			res[i].Done = d
		}
		return res, nil
	}, func(f Forwarder, to model.Member) ([]Acked, uint64, error) {
		var (
			mu    sync.Mutex
			index uint64
		)
		res := eachAck(rs, func(rc model.Receipt) (bool, error) {
			c, i, err := f.Settle(ctx, to, OpAck, []model.Receipt{rc}, 0)
			mu.Lock()
			index = max(index, i)
			mu.Unlock()
			if errors.Is(err, ErrNoForward) {
				err = &NotLeaderError{Leader: to, Known: true}
			}
			return c.Done == 1, err
		})
		return res, index, nil
	})
}

// eachAck acks each receipt with ack, all at once, and returns each one's
// own outcome: a forwarded part's answer is a count, so each receipt is
// its own call.
func eachAck(rs []model.Receipt, ack func(model.Receipt) (bool, error)) []Acked {
	res := make([]Acked, len(rs))
	var wg sync.WaitGroup
	for i, rc := range rs {
		wg.Go(func() {
			done, err := ack(rc)
			if err != nil {
				res[i].Err = fmt.Errorf("receipt %s: %w", rc, err)
				return
			}
			res[i].Done = done
		})
	}
	wg.Wait()
	return res
}

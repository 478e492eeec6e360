package service

import (
	"context"
	"fmt"
	"sync"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// AckEach acks rs, all of group g, and tells of each whether it took
// effect: done[i] is rs[i]'s. On a group this node leads they are one log
// entry; on a group led elsewhere each receipt is its own forwarded ack,
// all at once, and the first error fails the whole.
func AckEach(ctx context.Context, r *Router, g int, rs []model.Receipt) ([]bool, error) {
	for i, rc := range rs {
		if rc.ID.Group() != g && r.pin == 0 {
			return nil, refuse(model.ErrInvalid, "receipts[%d]: of group %d, not %d", i, rc.ID.Group(), g)
		}
	}
	if err := r.CheckGroup(g); err != nil {
		return nil, err
	}
	return Call(ctx, r, g, func(b Backend) ([]bool, error) {
		return b.AckEach(ctx, rs)
	}, func(f Forwarder, to model.Member) ([]bool, uint64, error) {
		var (
			mu    sync.Mutex
			index uint64
		)
		done, err := eachAck(rs, func(rc model.Receipt) (bool, error) {
			c, i, err := f.Settle(ctx, to, OpAck, []model.Receipt{rc}, 0)
			mu.Lock()
			index = max(index, i)
			mu.Unlock()
			return c.Done == 1, err
		})
		return done, index, err
	})
}

// eachAck acks each receipt with ack, all at once: a forwarded part's
// answer is a count, so each receipt is its own call.
func eachAck(rs []model.Receipt, ack func(model.Receipt) (bool, error)) ([]bool, error) {
	done := make([]bool, len(rs))
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, rc := range rs {
		wg.Go(func() { done[i], errs[i] = ack(rc) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("receipts[%d]: %w", i, err)
		}
	}
	return done, nil
}

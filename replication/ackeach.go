package replication

import (
	"context"
	"fmt"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// AckEach finishes reserved messages as one log entry that holds one ack
// per receipt, and tells of each whether it took effect (false: the
// receipt no longer holds its message). A front end that gathers the acks
// of many clients answers each by its own part of the one entry.
func (n *Node) AckEach(ctx context.Context, rs []model.Receipt) ([]bool, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	now := n.clock.Now().UnixMilli()
	cmds := make([]command.Command, len(rs))
	for i := range rs {
		cmds[i] = command.Ack{NowMs: now, Receipts: rs[i : i+1]}
	}
	res, err := n.settle(ctx, rs, cmds...)
	if err != nil {
		return nil, err
	}
	if len(res) != len(rs) {
		return nil, fmt.Errorf("%w: %d results for %d acks", model.ErrUnavailable, len(res), len(rs))
	}
	done := make([]bool, len(rs))
	for i, r := range res {
		c, ok := r.Value.(command.Counted)
		if !ok {
			return nil, fmt.Errorf("%w: ack %d answered %T", model.ErrUnavailable, i, r.Value)
		}
		done[i] = c.Done == 1
	}
	return done, nil
}

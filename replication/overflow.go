package replication

import (
	"context"

	"github.com/delaywheel/delaywheel/wheel"
)

// Overflow counts the local overflow by due time (GET /v1/wheel/overflow).
func (n *Node) Overflow(ctx context.Context, bucketMs int64, limit int) (wheel.OverflowHistogram, error) {
	if err := n.caughtUp(ctx); err != nil {
		return wheel.OverflowHistogram{}, err
	}
	return n.store().OverflowHistogram(bucketMs, limit)
}

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

// GetByKey returns the pending message of topic that holds key
// (GET /v1/topics/{topic}/keys/{key}).
func (n *Node) GetByKey(ctx context.Context, topic, key string) (wheel.View, error) {
	if err := n.readable(ctx); err != nil {
		return wheel.View{}, err
	}
	id, err := n.store().KeyID(topic, key)
	if err != nil {
		return wheel.View{}, err
	}
	return n.Get(ctx, id)
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// Ways a delaywheel consumer takes its messages (--consume).
const (
	ConsumeReserve = "reserve" // long-poll reserves, acks in the background
	ConsumeStream  = "stream"  // a stream per consumer, acking each delivery as it arrives
	// ConsumeReserveInline reserves, then acks the batch and waits for the
	// ack before the next reserve, as a plain consumer loop does.
	ConsumeReserveInline = "reserve-inline"
)

// subscription is a stream of the Go client, over HTTP or gRPC.
type subscription interface {
	Deliveries() <-chan api.Delivery
	Ack(d api.Delivery)
	Err() error
	Close(ctx context.Context) error
}

// streamMaxBatch bounds the deliveries one Next returns.
const streamMaxBatch = 1000

// dwStreamConsumer reads a stream (client.Subscription) of the node
// believed to lead and acks each delivery as it arrives; the
// subscription sends the acks in batches in the background. When the
// node keeps failing, it moves to another.
type dwStreamConsumer struct {
	t       *dwTarget
	topic   string          // the one it streams
	ctx     context.Context // the consumer's life
	sub     subscription
	node    int32
	errs    atomic.Int64          // errors the open subscription recovered from
	lastErr atomic.Pointer[error] // the latest of them, reported by Next
	seqOf   seqFunc
}

func newDWStreamConsumer(ctx context.Context, t *dwTarget) *dwStreamConsumer {
	return &dwStreamConsumer{t: t, topic: t.nextTopic(), ctx: context.WithoutCancel(ctx)}
}

func (c *dwStreamConsumer) open() {
	c.node = c.t.nodeFor(c.topic)
	c.errs.Store(0)
	opt := client.SubscribeOptions{OnError: func(err error) {
		c.errs.Add(1)
		c.lastErr.Store(&err)
	}}
	opt.MaxInflight = c.t.maxInflight
	if c.t.ttrMs != nil {
		opt.TTRMs = *c.t.ttrMs
	}
	if c.t.grpcs != nil {
		c.sub = c.t.grpcs[c.node].Subscribe(c.ctx, c.topic, opt)
		return
	}
	c.sub = c.t.clients[c.node].Subscribe(c.ctx, c.topic, opt)
}

// reopen closes the subscription; the next Next opens one on the node
// believed to lead, another one when moveOn.
func (c *dwStreamConsumer) reopen(ctx context.Context, moveOn bool) {
	c.closeSub()
	if moveOn {
		c.t.failover(ctx, c.node)
	}
}

func (c *dwStreamConsumer) closeSub() error {
	if c.sub == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	err := c.sub.Close(ctx)
	c.sub = nil
	return err
}

func (c *dwStreamConsumer) Next(ctx context.Context) (batch, error) {
	if c.sub == nil {
		c.open()
	}
	var b batch
	take := func(d api.Delivery) {
		b.Seqs = append(b.Seqs, c.seqOf.of(d))
		c.sub.Ack(d)
	}
	timer := time.NewTimer(time.Duration(c.t.waitMs) * time.Millisecond)
	defer timer.Stop()
	select {
	case d, ok := <-c.sub.Deliveries():
		if !ok {
			err := c.sub.Err()
			c.reopen(ctx, true)
			return batch{}, fmt.Errorf("stream ended: %w", errors.Join(err, errors.New("reopening")))
		}
		take(d)
	case <-ctx.Done():
		return batch{}, nil
	case <-timer.C:
	}
drain:
	for len(b.Seqs) > 0 && len(b.Seqs) < streamMaxBatch {
		select {
		case d, ok := <-c.sub.Deliveries():
			if !ok {
				break drain
			}
			take(d)
		default:
			break drain
		}
	}
	b.At = time.Now()
	if c.errs.Load() > 3 {
		// The node keeps failing (down, or cut off): try another.
		c.reopen(ctx, true)
	}
	if p := c.lastErr.Swap(nil); p != nil {
		return b, *p
	}
	return b, nil
}

// Close sends the acks still queued and ends the stream.
func (c *dwStreamConsumer) Close() error { return c.closeSub() }

package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// The delaywheel target's consumer: it reserves (or streams) a topic's
// deliveries and acks them in the background.

// dwConsumer long-polls the leader and acknowledges each batch in the
// background, as a consumer that acks after processing does: the next
// long-poll is not held up by the previous batch's ack. Receipts that pile
// up while an ack is in flight go out together in the next. With
// ConsumeReserveInline it acks each batch itself and waits for the answer
// before its next reserve, as the plain consumer loop does.
type dwConsumer struct {
	t      *dwTarget
	topic  string // the one it reserves from
	acks   chan []string
	done   chan struct{}
	ackErr atomic.Pointer[error] // the latest failed ack, reported by Next
	seqOf  seqFunc
}

// seqFunc, when set, names a delivery's sequence number instead of its
// body (decodeSeq).
type seqFunc func(api.Delivery) int

// of returns the sequence number of d.
func (f seqFunc) of(d api.Delivery) int {
	if f != nil {
		return f(d)
	}
	return decodeSeq(bodyOf(d))
}

func newDWConsumer(ctx context.Context, t *dwTarget) *dwConsumer {
	c := &dwConsumer{t: t, topic: t.nextTopic(), acks: make(chan []string, 1024), done: make(chan struct{})}
	go c.ackLoop(context.WithoutCancel(ctx))
	return c
}

func (c *dwConsumer) ackLoop(ctx context.Context) {
	defer close(c.done)
	for receipts := range c.acks {
	more:
		for len(receipts) < 10_000 {
			select {
			case r, ok := <-c.acks:
				if !ok {
					break more
				}
				receipts = append(receipts, r...)
			default:
				break more
			}
		}
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.t.callTopic(actx, c.topic, func(cl *client.Client) error {
			_, err := cl.Ack(actx, receipts)
			return err
		})
		cancel()
		if err != nil {
			err = fmt.Errorf("ack %d receipts: %w", len(receipts), err)
			c.ackErr.Store(&err)
		}
	}
}

func (c *dwConsumer) Next(ctx context.Context) (batch, error) {
	t := c.t
	i := t.nodeFor(c.topic)
	req := api.ReserveRequest{Max: &t.reserveMax, WaitMs: t.waitMs, TTRMs: t.ttrMs}
	rctx, cancel := context.WithTimeout(ctx, time.Duration(t.waitMs)*time.Millisecond+10*time.Second)
	ds, err := t.clients[i].Reserve(rctx, c.topic, req)
	cancel()
	at := time.Now()
	if err != nil {
		if ctx.Err() == nil {
			t.failover(ctx, i)
		}
		return batch{}, fmt.Errorf("reserve: %w", err)
	}
	b := batch{At: at, Seqs: make([]int, len(ds))}
	receipts := make([]string, len(ds))
	for k, d := range ds {
		b.Seqs[k] = c.seqOf.of(d)
		receipts[k] = d.Receipt
	}
	if len(receipts) > 0 && t.consume == ConsumeReserveInline {
		err := t.callTopic(ctx, c.topic, func(cl *client.Client) error {
			_, err := cl.Ack(ctx, receipts)
			return err
		})
		if err != nil {
			return b, fmt.Errorf("ack %d receipts: %w", len(receipts), err)
		}
	} else if len(receipts) > 0 {
		c.acks <- receipts
	}
	if p := c.ackErr.Swap(nil); p != nil {
		return b, *p
	}
	return b, nil
}

// Close sends the acks still queued and waits for them.
func (c *dwConsumer) Close() error {
	close(c.acks)
	<-c.done
	if p := c.ackErr.Swap(nil); p != nil {
		return *p
	}
	return nil
}

package replication

import (
	"context"
	"fmt"
	"time"

	"github.com/delaywheel/delaywheel/replication/dispatch"
	"github.com/delaywheel/delaywheel/replication/webhook"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// The methods below serve the webhooks of the HTTP API: the replicated
// per-topic config, and the sender the leader runs (package webhook).

// SetWebhook sets or replaces a topic's webhook.
func (n *Node) SetWebhook(ctx context.Context, w command.Webhook) error {
	return n.changeWebhook(ctx, command.SetWebhook{Webhook: w})
}

// DeleteWebhook removes a topic's webhook.
func (n *Node) DeleteWebhook(ctx context.Context, topic string) error {
	return n.changeWebhook(ctx, command.DeleteWebhook{Topic: topic})
}

// changeWebhook proposes a change of the webhooks and makes the leader's
// sender follow it once Raft settles the entry, even when ctx ends first:
// an entry that still applies would otherwise change nothing until the
// next change or leader.
func (n *Node) changeWebhook(ctx context.Context, cmd command.Command) error {
	p, err := n.submit(ctx, false, cmd)
	if err != nil {
		return err
	}
	select {
	case o := <-p.settled(n.reconcileWebhooks):
		if o.err != nil {
			return o.err
		}
		return o.res[0].Err
	case <-ctx.Done():
		return outcomeUnknown(ctx)
	}
}

// Webhook returns a topic's webhook from local state.
func (n *Node) Webhook(ctx context.Context, topic string) (command.Webhook, error) {
	if err := n.readable(ctx); err != nil {
		return command.Webhook{}, err
	}
	w, ok := n.store().Webhook(topic)
	if !ok {
		return command.Webhook{}, fmt.Errorf("%w: topic %s has no webhook", model.ErrNotFound, topic)
	}
	return w, nil
}

// hasWebhook reports whether topic's messages go to a webhook: consumers
// then get none of them.
func (n *Node) hasWebhook(topic string) bool {
	_, ok := n.store().Webhook(topic)
	return ok
}

// idleReserve answers a reserve of a webhook topic: empty, after its wait.
func (n *Node) idleReserve(ctx context.Context, wait time.Duration) []model.Delivery {
	if wait > 0 {
		select {
		case <-ctx.Done():
		case <-n.clock.After(wait):
		}
	}
	return []model.Delivery{}
}

// startWebhooks starts the leader's sender on d with the webhooks current
// returns. It publishes the sender before its first reconcile, so a
// webhook set or removed meanwhile is seen by that reconcile or by its own.
func (n *Node) startWebhooks(d *dispatch.Dispatcher, current func() []command.Webhook) {
	s := webhook.New(hookQueue{n: n, d: d}, webhook.Config{
		Clock: n.clock, Logger: n.log, Allow: n.cfg.WebhookAllow,
		Observe: func(topic, outcome string, late float64) {
			n.met.webhookAttempts.WithLabelValues(outcome).Inc()
			n.met.webhookLateness.Observe(late)
		},
	})
	n.mu.Lock()
	n.hooks = s
	n.mu.Unlock()
	s.Reconcile(current)
	n.sealWebhookTopics()
}

// reconcileWebhooks makes the leader's sender follow the stored webhooks.
func (n *Node) reconcileWebhooks() {
	if s := n.sender(); s != nil {
		s.Reconcile(n.storedWebhooks)
		n.sealWebhookTopics()
	}
}

// sealWebhookTopics ends the consumers' streams and waiting reserves of
// every topic with a webhook: its messages go to the webhook alone.
func (n *Node) sealWebhookTopics() {
	d := n.dispatcher()
	if d == nil {
		return
	}
	for _, h := range n.storedWebhooks() {
		d.Seal(h.Topic, webhookConflict(h.Topic))
	}
}

// webhookConflict is the error of a consumer of a topic with a webhook.
func webhookConflict(topic string) error {
	return fmt.Errorf("%w: topic %s has a webhook: its messages go there, not to consumers", model.ErrConflict, topic)
}

// sender returns the leader's webhook sender, nil when not leading.
func (n *Node) sender() *webhook.Sender {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hooks
}

// storedWebhooks returns the webhooks of the current store.
func (n *Node) storedWebhooks() []command.Webhook { return n.store().Webhooks() }

// hookQueue is the leader as its webhook sender sees it (webhook.Queue).
type hookQueue struct {
	n *Node
	d *dispatch.Dispatcher
}

var _ webhook.Queue = hookQueue{}

func (h hookQueue) Stream(topic string, opt model.ConsumerOptions) (model.Consumer, error) {
	return h.d.SenderStream(topic, opt)
}

func (h hookQueue) Ack(ctx context.Context, rs []model.Receipt) (command.Counted, error) {
	return h.n.Ack(ctx, rs)
}

func (h hookQueue) Nack(ctx context.Context, rs []model.Receipt, delayMs int64) (command.Counted, error) {
	return h.n.Nack(ctx, rs, delayMs)
}

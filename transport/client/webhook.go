package client

import (
	"context"
	"net/http"

	"github.com/delaywheel/delaywheel/transport/api"
)

// SetWebhook sets or replaces topic's webhook and returns it as stored.
func (c *Client) SetWebhook(ctx context.Context, topic string, req api.WebhookRequest) (api.Webhook, error) {
	return call[api.Webhook](ctx, c, http.MethodPut, topicPath(topic, "webhook"), req)
}

// Webhook returns topic's webhook (the secret is never shown).
func (c *Client) Webhook(ctx context.Context, topic string) (api.Webhook, error) {
	return call[api.Webhook](ctx, c, http.MethodGet, topicPath(topic, "webhook"), nil)
}

// DeleteWebhook removes topic's webhook.
func (c *Client) DeleteWebhook(ctx context.Context, topic string) (api.WebhookDeleted, error) {
	return call[api.WebhookDeleted](ctx, c, http.MethodDelete, topicPath(topic, "webhook"), nil)
}

package api

// WebhookRequest is the body of PUT /v1/topics/{topic}/webhook. Unset
// limits take their defaults (timeout 10 s, 100 in flight, no rate limit).
type WebhookRequest struct {
	URL            string `json:"url"`
	TimeoutMs      *int64 `json:"timeout_ms,omitempty"`
	MaxConcurrency *int64 `json:"max_concurrency,omitempty"`
	RatePerS       *int64 `json:"rate_per_s,omitempty"`
	Secret         string `json:"secret,omitempty"`
}

// Webhook is a topic's stored webhook as the API shows it: the secret is
// never shown, only whether one is set.
type Webhook struct {
	Topic          string `json:"topic"`
	URL            string `json:"url"`
	TimeoutMs      int64  `json:"timeout_ms"`
	MaxConcurrency int64  `json:"max_concurrency"`
	RatePerS       int64  `json:"rate_per_s"`
	HasSecret      bool   `json:"has_secret"`
}

// WebhookDeleted answers DELETE /v1/topics/{topic}/webhook.
type WebhookDeleted struct {
	Topic   string `json:"topic"`
	Deleted bool   `json:"deleted"`
}

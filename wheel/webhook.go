package wheel

import (
	"crypto/sha256"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// Webhook is a topic's push endpoint: while a topic has one, the leader
// POSTs its due messages to URL instead of handing them to consumers.
// It is replicated state (SetWebhook, DeleteWebhook).
type Webhook struct {
	Topic          string
	URL            string
	Secret         string // signs each request; never shown back
	TimeoutMs      int64  // per request
	MaxConcurrency int64  // requests in flight at once
	RatePerS       int64  // requests started per second; 0: no limit
}

// SetWebhook sets or replaces a topic's webhook.
type SetWebhook struct{ Webhook Webhook }

// DeleteWebhook removes a topic's webhook; ErrNotFound when it has none.
type DeleteWebhook struct{ Topic string }

// Kind implements Command.
func (SetWebhook) Kind() CommandKind { return KindSetWebhook }

// Kind implements Command.
func (DeleteWebhook) Kind() CommandKind { return KindDeleteWebhook }

// webhookKey is where a topic's webhook is stored.
func webhookKey(topic string) []byte { return append([]byte{pWebhook}, topic...) }

func (e *encoder) webhook(w Webhook) {
	e.str(w.Topic)
	e.str(w.URL)
	e.str(w.Secret)
	e.varint(w.TimeoutMs)
	e.varint(w.MaxConcurrency)
	e.varint(w.RatePerS)
}

func (d *decoder) webhook() Webhook {
	return Webhook{Topic: d.str(), URL: d.str(), Secret: d.str(), TimeoutMs: d.varint(), MaxConcurrency: d.varint(), RatePerS: d.varint()}
}

func encodeWebhook(w Webhook) []byte {
	e := &encoder{}
	e.webhook(w)
	return e.b
}

func decodeWebhook(b []byte) (Webhook, error) {
	d := &decoder{b: b}
	w := d.webhook()
	return w, d.err
}

// setWebhook applies SetWebhook.
func (t *tx) setWebhook(w Webhook) Result {
	t.set(webhookKey(w.Topic), encodeWebhook(w))
	t.newWebhooks[w.Topic] = &w
	return Result{}
}

// deleteWebhook applies DeleteWebhook.
func (t *tx) deleteWebhook(topic string) Result {
	w, ok := t.newWebhooks[topic]
	if !ok {
		_, ok = t.s.webhooks[topic]
	} else {
		ok = w != nil
	}
	if !ok {
		return Result{Err: fmt.Errorf("%w: topic %s has no webhook", model.ErrNotFound, topic)}
	}
	t.del(webhookKey(topic))
	t.newWebhooks[topic] = nil
	return Result{}
}

// commitWebhooks publishes a batch's webhook changes; s.mu is held.
func (s *Store) commitWebhooks(changed map[string]*Webhook) {
	if len(changed) == 0 {
		return
	}
	for topic, w := range changed {
		if w == nil {
			delete(s.webhooks, topic)
		} else {
			s.webhooks[topic] = *w
		}
	}
	s.publishWebhooksLocked()
}

// publishWebhooksLocked makes the webhooks visible to lock-free readers.
func (s *Store) publishWebhooksLocked() {
	m := maps.Clone(s.webhooks)
	s.hooks.Store(&m)
}

// publishedWebhooks returns the webhooks as last committed (nil: none).
func (s *Store) publishedWebhooks() map[string]Webhook {
	if p := s.hooks.Load(); p != nil {
		return *p
	}
	return nil
}

// loadWebhooks reads the webhooks into memory; s.mu is held.
func (s *Store) loadWebhooks() error {
	err := s.scan([]byte{pWebhook}, func(_, v []byte) error {
		w, err := decodeWebhook(v)
		if err != nil {
			return fmt.Errorf("%w: webhook: %w", ErrCorruptCommand, err)
		}
		s.webhooks[w.Topic] = w
		return nil
	})
	s.publishWebhooksLocked()
	return err
}

// Webhook returns topic's webhook, if it has one. It does not wait for
// an apply in progress.
func (s *Store) Webhook(topic string) (Webhook, bool) {
	w, ok := s.publishedWebhooks()[topic]
	return w, ok
}

// Webhooks returns every webhook, sorted by topic.
func (s *Store) Webhooks() []Webhook {
	hooks := s.publishedWebhooks()
	out := make([]Webhook, 0, len(hooks))
	for _, topic := range slices.Sorted(maps.Keys(hooks)) {
		out = append(out, hooks[topic])
	}
	return out
}

// dumpWebhooks writes the webhooks for Dump, the secret as its hash; s.mu
// is held.
func (s *Store) dumpWebhooks(w io.Writer) {
	for _, topic := range slices.Sorted(maps.Keys(s.webhooks)) {
		h := s.webhooks[topic]
		fmt.Fprintf(w, "webhook %q url %q secret %x timeout %d concurrency %d rate %d\n",
			h.Topic, h.URL, sha256.Sum256([]byte(h.Secret)), h.TimeoutMs, h.MaxConcurrency, h.RatePerS)
	}
}

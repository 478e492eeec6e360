package wheel

import (
	"crypto/sha256"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// webhookKey is where a topic's webhook is stored.
func webhookKey(topic string) []byte { return append([]byte{pWebhook}, topic...) }

func encodeWebhook(w command.Webhook) []byte {
	e := &command.Encoder{}
	e.Webhook(w)
	return e.B
}

func decodeWebhook(b []byte) (command.Webhook, error) {
	d := &command.Decoder{B: b}
	w := d.Webhook()
	return w, d.Err
}

// setWebhook applies SetWebhook.
func (t *tx) setWebhook(w command.Webhook) command.Result {
	t.set(webhookKey(w.Topic), encodeWebhook(w))
	setIn(&t.newWebhooks, w.Topic, &w)
	return command.Result{}
}

// deleteWebhook applies DeleteWebhook.
func (t *tx) deleteWebhook(topic string) command.Result {
	w, ok := t.newWebhooks[topic]
	if !ok {
		_, ok = t.s.webhooks[topic]
	} else {
		ok = w != nil
	}
	if !ok {
		return command.Result{Err: fmt.Errorf("%w: topic %s has no webhook", model.ErrNotFound, topic)}
	}
	t.del(webhookKey(topic))
	setIn(&t.newWebhooks, topic, nil)
	return command.Result{}
}

// commitWebhooks publishes a batch's webhook changes; s.mu is held.
func (s *Store) commitWebhooks(changed map[string]*command.Webhook) {
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
func (s *Store) publishedWebhooks() map[string]command.Webhook {
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
			return fmt.Errorf("%w: webhook: %w", command.ErrCorruptCommand, err)
		}
		s.webhooks[w.Topic] = w
		return nil
	})
	s.publishWebhooksLocked()
	return err
}

// Webhook returns topic's webhook, if it has one. It does not wait for
// an apply in progress.
func (s *Store) Webhook(topic string) (command.Webhook, bool) {
	w, ok := s.publishedWebhooks()[topic]
	return w, ok
}

// Webhooks returns every webhook, sorted by topic.
func (s *Store) Webhooks() []command.Webhook {
	hooks := s.publishedWebhooks()
	out := make([]command.Webhook, 0, len(hooks))
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

package transport

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel/command"
)

// Webhook limits.
const (
	defaultWebhookTimeoutMs   = 10_000
	maxWebhookTimeoutMs       = 300_000
	defaultWebhookConcurrency = 100
	maxWebhookConcurrency     = 10_000
	maxWebhookRate            = 1_000_000
	maxWebhookURLLen          = 2048
	maxWebhookSecretLen       = 1024
)

// putWebhook sets a topic's webhook, in the topic's group: the body goes
// on as it came to a leader elsewhere, which validates it (its own
// --webhook-allow).
func (s *Server) putWebhook(r *http.Request) (any, error) {
	topic, err := s.pathTopic(r)
	if err != nil {
		return nil, err
	}
	data, err := readBody(r)
	if err != nil {
		return nil, err
	}
	return inGroup(r.Context(), s, groupOf(r), func(b Backend) (api.Webhook, error) {
		var req api.WebhookRequest
		if err := decodeData(data, &req, true); err != nil {
			return api.Webhook{}, err
		}
		w, err := s.validateWebhook(topic, req)
		if err != nil {
			return api.Webhook{}, err
		}
		return webhookView(w), b.SetWebhook(r.Context(), w)
	}, r.Method, r.URL.EscapedPath(), jsonWire(data))
}

func (s *Server) getWebhook(r *http.Request) (any, error) {
	topic, err := s.pathTopic(r)
	if err != nil {
		return nil, err
	}
	w, err := s.be(r).Webhook(r.Context(), topic)
	return webhookView(w), err
}

func (s *Server) deleteWebhook(r *http.Request) (any, error) {
	topic, err := s.pathTopic(r)
	if err != nil {
		return nil, err
	}
	return inGroup(r.Context(), s, groupOf(r), func(b Backend) (api.WebhookDeleted, error) {
		return api.WebhookDeleted{Topic: topic, Deleted: true}, b.DeleteWebhook(r.Context(), topic)
	}, r.Method, r.URL.EscapedPath(), nil)
}

func webhookView(w command.Webhook) api.Webhook {
	return api.Webhook{Topic: w.Topic, URL: w.URL, TimeoutMs: w.TimeoutMs, MaxConcurrency: w.MaxConcurrency,
		RatePerS: w.RatePerS, HasSecret: w.Secret != ""}
}

// validateWebhook checks a webhook request and fills its defaults.
func (s *Server) validateWebhook(topic string, req api.WebhookRequest) (command.Webhook, error) {
	w := command.Webhook{Topic: topic, URL: req.URL, Secret: req.Secret,
		TimeoutMs: defaultWebhookTimeoutMs, MaxConcurrency: defaultWebhookConcurrency}
	if req.URL == "" {
		return w, invalid("url: required (an http or https URL)")
	}
	if len(req.URL) > maxWebhookURLLen {
		return w, invalid("url: at most %d bytes, got %d", maxWebhookURLLen, len(req.URL))
	}
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return w, invalid("url: must be an absolute http or https URL with a host, got %s", service.QuoteShort(req.URL))
	}
	if err := s.allowHost(u.Hostname()); err != nil {
		return w, err
	}
	if len(req.Secret) > maxWebhookSecretLen {
		return w, invalid("secret: at most %d bytes, got %d", maxWebhookSecretLen, len(req.Secret))
	}
	if req.TimeoutMs != nil {
		if err := service.InRange("timeout_ms", *req.TimeoutMs, 1, maxWebhookTimeoutMs, ""); err != nil {
			return w, err
		}
		w.TimeoutMs = *req.TimeoutMs
	}
	if req.MaxConcurrency != nil {
		if err := service.InRange("max_concurrency", *req.MaxConcurrency, 1, maxWebhookConcurrency, ""); err != nil {
			return w, err
		}
		w.MaxConcurrency = *req.MaxConcurrency
	}
	if req.RatePerS != nil {
		if err := service.InRange("rate_per_s", *req.RatePerS, 0, maxWebhookRate, "0: no limit"); err != nil {
			return w, err
		}
		w.RatePerS = *req.RatePerS
	}
	return w, nil
}

// allowHost checks a webhook's host against Config.WebhookAllow.
func (s *Server) allowHost(host string) error { return WebhookHostAllowed(s.cfg.WebhookAllow, host) }

// WebhookHostAllowed checks a webhook's host against an allow list
// (--webhook-allow): a host name listed as it is, or an IP address inside
// a listed CIDR or equal to a listed address. An empty list allows every
// host. The error is a 400 naming the host.
func WebhookHostAllowed(allow []string, host string) error {
	if len(allow) == 0 {
		return nil
	}
	ip, ipErr := netip.ParseAddr(host)
	for _, a := range allow {
		a = strings.TrimSpace(a)
		if strings.EqualFold(a, host) {
			return nil
		}
		if ipErr != nil {
			continue
		}
		if p, err := netip.ParsePrefix(a); err == nil && p.Contains(ip.Unmap()) {
			return nil
		}
		if x, err := netip.ParseAddr(a); err == nil && x == ip.Unmap() {
			return nil
		}
	}
	return invalid("url: host %s is not allowed by --webhook-allow (%s)", service.QuoteShort(host), strings.Join(allow, ","))
}

// ParseWebhookAllow checks a --webhook-allow list: host names, IP
// addresses and CIDRs.
func ParseWebhookAllow(list []string) error {
	for _, a := range list {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, err := netip.ParsePrefix(a); err == nil || strings.Contains(a, "/") {
			if err != nil {
				return fmt.Errorf("--webhook-allow: %q is not a CIDR: %w", a, err)
			}
			continue
		}
		if _, _, err := net.SplitHostPort(a); err == nil {
			return fmt.Errorf("--webhook-allow: %q: name a host without a port", a)
		}
	}
	return nil
}

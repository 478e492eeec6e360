package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/transport/api"
)

// webhookCommand is `delaywheel webhook set|get|rm TOPIC`.
func (a *admin) webhookCommand() *cli.Command {
	return &cli.Command{
		Name: "webhook", Usage: "set, show or remove a topic's webhook (its due messages are POSTed there)",
		Subcommands: []*cli.Command{
			withHTTPFlags(&cli.Command{
				Name: "set", Usage: "set or replace a topic's webhook", ArgsUsage: "TOPIC",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "url", Usage: "the http or https `URL` to POST each message to", Required: true},
					&cli.DurationFlag{Name: "timeout", Usage: "per request `D`", DefaultText: "10s"},
					&cli.Int64Flag{Name: "max-concurrency", Usage: "at most `N` requests in flight", DefaultText: "100"},
					&cli.Int64Flag{Name: "rate", Usage: "at most `N` requests started per second (0: no limit)", DefaultText: "0"},
					&cli.StringFlag{Name: "secret-file", Usage: "`FILE` holding the secret that signs each request"},
				},
				Action: a.webhookSet,
			}),
			withHTTPFlags(&cli.Command{Name: "get", Usage: "show a topic's webhook", ArgsUsage: "TOPIC", Action: a.webhookGet}),
			withHTTPFlags(&cli.Command{Name: "rm", Usage: "remove a topic's webhook", ArgsUsage: "TOPIC", Action: a.webhookRm}),
		},
	}
}

func webhookTable(w io.Writer, h api.Webhook) {
	row(w, "TOPIC", "URL", "TIMEOUT_MS", "MAX_CONCURRENCY", "RATE_PER_S", "SECRET")
	secret := "no"
	if h.HasSecret {
		secret = "set"
	}
	row(w, h.Topic, h.URL, h.TimeoutMs, h.MaxConcurrency, h.RatePerS, secret)
}

func (a *admin) webhookSet(c *cli.Context) error {
	return show(c, 1, 1, func(s *session) (api.Webhook, error) {
		req := api.WebhookRequest{URL: c.String("url")}
		if c.IsSet("timeout") {
			req.TimeoutMs = api.Ptr(c.Duration("timeout").Milliseconds())
		}
		if c.IsSet("max-concurrency") {
			req.MaxConcurrency = api.Ptr(c.Int64("max-concurrency"))
		}
		if c.IsSet("rate") {
			req.RatePerS = api.Ptr(c.Int64("rate"))
		}
		if path := c.String("secret-file"); path != "" {
			b, err := os.ReadFile(path)
			if err != nil {
				return api.Webhook{}, fmt.Errorf("--secret-file: %w", err)
			}
			req.Secret = strings.TrimSpace(string(b))
		}
		return s.cl.SetWebhook(c.Context, c.Args().Get(0), req)
	}, webhookTable)
}

func (a *admin) webhookGet(c *cli.Context) error {
	return show(c, 1, 1, func(s *session) (api.Webhook, error) {
		return s.cl.Webhook(c.Context, c.Args().Get(0))
	}, webhookTable)
}

func (a *admin) webhookRm(c *cli.Context) error {
	return show(c, 1, 1, func(s *session) (api.WebhookDeleted, error) {
		return s.cl.DeleteWebhook(c.Context, c.Args().Get(0))
	}, func(w io.Writer, r api.WebhookDeleted) { row(w, "removed:", r.Topic) })
}

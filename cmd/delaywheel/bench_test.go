package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/bench"
)

// TestBenchWebhookDefaults: `bench webhook` is the fire workload through a
// webhook, against delaywheel alone on a spawned 3-node cluster at 5,000
// msg/s, unless the flags say otherwise.
func TestBenchWebhookDefaults(t *testing.T) {
	parse := func(args ...string) (bench.Config, error) {
		var cfg bench.Config
		app := &cli.App{Commands: []*cli.Command{{Name: "webhook", Flags: benchFlags(), Action: func(c *cli.Context) error {
			cfg = bench.Config{Workload: webhookWorkload, Consume: c.String("consume"), Rate: c.Int("rate"),
				Spawn: c.Int("spawn"), Targets: c.StringSlice("targets"), Addrs: c.StringSlice("addr")}
			return webhookDefaults(c, &cfg)
		}}}}
		err := app.Run(append([]string{"delaywheel", "webhook"}, args...))
		return cfg, err
	}
	cfg, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Workload != bench.WorkloadFire || cfg.Consume != bench.ConsumeWebhook || cfg.Rate != 5000 || cfg.Spawn != 3 ||
		!slices.Equal(cfg.Targets, []string{bench.TargetDelaywheel}) {
		t.Fatalf("defaults: %+v", cfg)
	}
	cfg, err = parse("--rate", "200", "--spawn", "1")
	if err != nil || cfg.Rate != 200 || cfg.Spawn != 1 {
		t.Fatalf("flags: %+v, %v", cfg, err)
	}
	if cfg, err = parse("--addr", "127.0.0.1:7070"); err != nil || cfg.Spawn != 0 {
		t.Fatalf("with --addr nothing is spawned: %+v, %v", cfg, err)
	}
	if _, err = parse("--consume", "stream"); err == nil || !strings.Contains(err.Error(), "--consume stream is for bench fire") {
		t.Fatalf("--consume stream: %v", err)
	}
}

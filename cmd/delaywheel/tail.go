package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// subscription is a stream of deliveries over HTTP or gRPC.
type subscription interface {
	Deliveries() <-chan api.Delivery
	Ack(d api.Delivery)
	Close(ctx context.Context) error
	Err() error
}

// tailCommand is `delaywheel tail TOPIC`: it streams a topic's deliveries
// as they come due, one line each, until interrupted.
func (a *admin) tailCommand() *cli.Command {
	return withCommonFlags(&cli.Command{
		Name: "tail", Usage: "print a topic's deliveries as they come due (a streaming consumer)", ArgsUsage: "TOPIC",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "ack", Usage: "ack each delivery once printed (otherwise each is released when tail ends)"},
			&cli.IntFlag{Name: "max-inflight", Value: 1000, Usage: "at most `N` deliveries unacked"},
			&cli.DurationFlag{Name: "ttr", Usage: "lease length `D`", DefaultText: "each message's own"},
		},
		Action: a.tail,
	})
}

func (a *admin) tail(c *cli.Context) error {
	// A subscription retries its node until it answers: one that never
	// does is refused here, naming it, rather than retried forever.
	s, err := openSession(c, 1, 1, true)
	if err != nil {
		return err
	}
	if n := c.Int("max-inflight"); n < 1 {
		return fmt.Errorf("--max-inflight %d: want at least 1", n)
	}
	topic := c.Args().Get(0)
	// A subscription acks from several goroutines at once, and tail prints
	// no raw answer: its client records none (the session's records each
	// answer in the session, for commands that make one call at a time).
	opt := client.SubscribeOptions{
		MaxInflight: c.Int("max-inflight"), TTRMs: c.Duration("ttr").Milliseconds(),
		OnError: func(err error) { fmt.Fprintln(c.App.ErrWriter, cleanError(err)) },
	}
	// The subscription outlives the command's context: when that ends
	// (an interrupt), Close below sends the acks still queued and ends
	// the stream so that the server settles them before it releases the
	// deliveries left.
	subCtx := context.WithoutCancel(c.Context)
	var sub subscription
	if client.IsGRPC(s.addr) {
		g, err := client.NewGRPC(s.addr, client.WithGRPCToken(s.token))
		if err != nil {
			return fmt.Errorf("--addr: %w", err)
		}
		defer g.Close()
		sub = g.Subscribe(subCtx, topic, opt)
	} else {
		sub = client.New(s.addr, client.WithToken(s.token)).Subscribe(subCtx, topic, opt)
	}
	out := c.App.Writer
read:
	for {
		var d api.Delivery
		select {
		case <-c.Context.Done():
			break read
		case next, ok := <-sub.Deliveries():
			if !ok {
				break read
			}
			d = next
		}
		if c.Bool("json") {
			b, err := json.Marshal(d)
			if err != nil {
				return fmt.Errorf("encoding a delivery: %w", err)
			}
			fmt.Fprintf(out, "%s\n", b)
		} else {
			fmt.Fprintf(out, "%s  attempt %d  due %s  receipt %s  %s\n", d.ID, d.Attempt, instant(d.DeliverAtMs), d.Receipt, bodyText(d.Payload))
		}
		if c.Bool("ack") {
			sub.Ack(d)
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Context), 5*time.Second)
	defer cancel()
	if err := sub.Close(ctx); err != nil {
		return err
	}
	return sub.Err()
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// What every command that calls a node shares: its session (the client of
// --addr, the token) and how it prints an answer.

// session is one command's connection and output.
type session struct {
	c   *cli.Context
	cl  *client.Client // the HTTP API, for the calls only it has
	api nodeAPI        // cl, or the gRPC client for an --addr of grpc://
	raw []byte         // the last JSON answer
	// addr is what the session calls: of --addr's list, the first HTTP
	// address that answered, or the gRPC list from the first that did.
	addr string
	// token is the bearer token of --token-file ("" without one).
	token string
}

// nodeAPI is what most commands call: the HTTP client, or the gRPC one for
// an --addr of grpc://.
type nodeAPI interface {
	Enqueue(ctx context.Context, msgs []api.Message) ([]api.Result, error)
	Get(ctx context.Context, id string) (api.MessageView, error)
	Cancel(ctx context.Context, id string) (api.Cancelled, error)
	CancelKey(ctx context.Context, topic, key string) (api.Cancelled, error)
	Reschedule(ctx context.Context, id string, req api.RescheduleRequest) (api.Rescheduled, error)
	Reserve(ctx context.Context, topic string, req api.ReserveRequest) ([]api.Delivery, error)
	Ack(ctx context.Context, receipts []string) (api.AckResponse, error)
	Nack(ctx context.Context, receipts []string, delayMs int64) (api.NackResponse, error)
	Touch(ctx context.Context, receipts []string) (api.TouchResponse, error)
	Bury(ctx context.Context, receipts []string) (api.BuryResponse, error)
	Topics(ctx context.Context) ([]api.TopicCounts, error)
	Dead(ctx context.Context, topic string, limit int) ([]api.MessageView, error)
	Redrive(ctx context.Context, topic string, ids []string) (int, error)
	GroupWheel(ctx context.Context, g int) (api.Wheel, error)
	GroupSlot(ctx context.Context, g, slot int, records bool) (api.Slot, error)
	Cluster(ctx context.Context) (api.Cluster, error)
}

// newSession checks the number of arguments and builds the client.
func newSession(c *cli.Context, minArgs, maxArgs int) (*session, error) {
	return openSession(c, minArgs, maxArgs, false)
}

// openSession is newSession; probe makes it ask a single address
// whether it answers, as a list's are asked (pickHTTP, pickGRPC).
func openSession(c *cli.Context, minArgs, maxArgs int, probe bool) (*session, error) {
	if n := c.NArg(); n < minArgs || (maxArgs >= 0 && n > maxArgs) {
		return nil, fmt.Errorf("usage: %s %s [flags] %s (see %s %s --help)", c.App.Name, c.Command.Name, c.Command.ArgsUsage, c.App.Name, c.Command.Name)
	}
	s := &session{c: c}
	token := ""
	if path := c.String("token-file"); path != "" {
		tok, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading the token file: %w", err)
		}
		token = strings.TrimSpace(string(tok))
		s.token = token
	}
	if addr := c.String("addr"); client.IsGRPC(addr) {
		addr, err := pickGRPC(c.Context, addr, token, probe)
		if err != nil {
			return nil, err
		}
		s.addr = addr
		g, err := client.NewGRPC(addr, client.WithGRPCToken(token), client.WithGRPCRawResponse(func(b []byte) { s.raw = b }))
		if err != nil {
			return nil, fmt.Errorf("--addr: %w", err)
		}
		s.api = g // its connections end with the command
	}
	if s.api == nil {
		addr, err := pickHTTP(c.Context, c.String("addr"), probe)
		if err != nil {
			return nil, err
		}
		s.addr = addr
		s.cl = client.New(addr, client.WithRawResponse(func(b []byte) { s.raw = b }), client.WithToken(token))
		s.api = s.cl
	}
	return s, nil
}

// print writes the last answer: its raw JSON, indented, with --json, or else
// the table that table writes.
func (s *session) print(table func(w io.Writer)) error {
	out := s.c.App.Writer
	if s.c.Bool("json") {
		var buf bytes.Buffer
		if err := json.Indent(&buf, bytes.TrimSpace(s.raw), "", "  "); err != nil {
			return fmt.Errorf("indenting the answer: %w", err)
		}
		buf.WriteByte('\n')
		_, err := buf.WriteTo(out)
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// show runs a command that makes one call: it checks the arguments, gets
// the answer with fetch and prints it (as JSON with --json, else with table).
func show[T any](c *cli.Context, minArgs, maxArgs int, fetch func(*session) (T, error), table func(io.Writer, T)) error {
	s, err := newSession(c, minArgs, maxArgs)
	if err != nil {
		return err
	}
	v, err := fetch(s)
	if err != nil {
		return err
	}
	return s.print(func(w io.Writer) { table(w, v) })
}

// row writes one tab-separated table row.
func row(w io.Writer, cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		fmt.Fprint(w, c)
	}
	fmt.Fprintln(w)
}

// instant renders Unix milliseconds as UTC RFC 3339 with milliseconds, and
// 0 (no instant, as in a tombstone) as "-".
func instant(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// bodyText renders a body for a table: text cut to a line, or base64.
func bodyText(p api.Payload) string {
	const maxLen = 60
	s := ""
	switch {
	case p.Body != nil:
		s = strconv.Quote(*p.Body)
	case p.BodyBase64 != nil:
		s = "base64:" + *p.BodyBase64
	}
	if len(s) > maxLen {
		s = s[:maxLen] + "…"
	}
	return s
}

// nonEmpty is &s, or nil for "".
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// orDash is *p, or "-" for a value the cluster view does not know.
func orDash[T any](p *T) any {
	if p == nil {
		return "-"
	}
	return *p
}

package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// admin holds what the admin commands share.
type admin struct {
	openOffline openOfflineFunc
}

// adminCommands returns the commands that talk to a node over HTTP (or, for
// wheel and slot with --data-dir, read a stopped node's directory through
// openOffline, which may be nil).
func adminCommands(openOffline openOfflineFunc) []*cli.Command {
	a := &admin{openOffline: openOffline}
	dataDir := func() cli.Flag {
		return &cli.StringFlag{Name: "data-dir", Usage: "read this stopped node's data directory instead of calling --addr"}
	}
	group := func() cli.Flag { return groupFlag("read") }
	return []*cli.Command{
		withCommonFlags(&cli.Command{
			Name: "push", Usage: "enqueue one message", ArgsUsage: "TOPIC BODY (BODY - reads stdin)",
			Flags: append(append(whenFlags("deliver"),
				&cli.StringFlag{Name: "key", Usage: "dedupe and cancel key"}), messageFlags()...),
			Action: a.push,
		}),
		withCommonFlags(&cli.Command{
			Name: "reserve", Usage: "take due messages of a topic", ArgsUsage: "TOPIC",
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "max", Value: 1, Usage: "at most this many messages"},
				&cli.DurationFlag{Name: "wait", Usage: "long-poll up to `D` for the first message"},
				&cli.DurationFlag{Name: "ttr", Usage: "lease length `D`", DefaultText: "each message's own"},
				&cli.BoolFlag{Name: "ack", Usage: "ack the messages right away"},
			},
			Action: a.reserve,
		}),
		a.tailCommand(),
		a.webhookCommand(),
		withCommonFlags(&cli.Command{Name: "topics", Usage: "list topics and their counts by state", Action: a.topics}),
		withCommonFlags(&cli.Command{Name: "message", Usage: "show a pending message", ArgsUsage: "ID", Action: a.message}),
		withCommonFlags(&cli.Command{
			Name: "cancel", Usage: "cancel a delayed or ready message by id, or by --topic and --key", ArgsUsage: "[ID]",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "topic", Usage: "with --key: cancel by key on this topic"},
				&cli.StringFlag{Name: "key", Usage: "with --topic: the key to cancel"},
			},
			Action: a.cancel,
		}),
		withCommonFlags(&cli.Command{
			Name: "wheel", Usage: "describe the timing wheel (of one group, --group, on a node of --groups N)",
			Flags: []cli.Flag{dataDir(), group()}, Action: a.wheel,
		}),
		withCommonFlags(&cli.Command{
			Name: "slot", Usage: "describe one slot of the wheel (of one group, --group, on a node of --groups N)", ArgsUsage: "N (0-7199)",
			Flags:  []cli.Flag{dataDir(), group(), &cli.BoolFlag{Name: "records", Usage: "list the slot file's records"}},
			Action: a.slot,
		}),
		withCommonFlags(&cli.Command{Name: "cluster", Usage: "show the cluster's members", Action: a.cluster}),
		withCommonFlags(&cli.Command{
			Name: "dead", Usage: "list a topic's dead letters", ArgsUsage: "TOPIC",
			Flags:  []cli.Flag{&cli.IntFlag{Name: "limit", Usage: "at most this many", DefaultText: "100, set by the server"}},
			Action: a.dead,
		}),
		withCommonFlags(&cli.Command{Name: "redrive", Usage: "move dead letters back to ready", ArgsUsage: "TOPIC [ID...] (no ids: all)", Action: a.redrive}),
		withCommonFlags(&cli.Command{Name: "ack", Usage: "finish reserved messages", ArgsUsage: "RECEIPT...", Action: a.ack}),
		withCommonFlags(&cli.Command{
			Name: "nack", Usage: "give reserved messages back, due again after --delay", ArgsUsage: "RECEIPT...",
			Flags:  []cli.Flag{&cli.DurationFlag{Name: "delay", Usage: "due again after `D` (e.g. 30s, 1500ms)"}},
			Action: a.nack,
		}),
		withCommonFlags(&cli.Command{Name: "touch", Usage: "extend the leases of reserved messages by their ttr", ArgsUsage: "RECEIPT...", Action: a.touch}),
		withCommonFlags(&cli.Command{
			Name: "bury", Usage: "move reserved messages to their topics' dead letters at once (redrive makes them ready again)",
			ArgsUsage: "RECEIPT...", Action: a.bury,
		}),
		withCommonFlags(&cli.Command{
			Name: "reschedule", Usage: "move a delayed or ready message to a new due time", ArgsUsage: "ID (--delay D | --deliver-at T)",
			Flags:  whenFlags("due"),
			Action: a.reschedule,
		}),
	}
}

// messageFlags are the flags of a message's priority, lease, attempts and
// headers (messageOf reads them).
func messageFlags() []cli.Flag {
	return []cli.Flag{
		&cli.Int64Flag{Name: "priority", Usage: "higher first among messages due the same millisecond"},
		&cli.DurationFlag{Name: "ttr", Usage: "lease length `D` once reserved", DefaultText: "30s, set by the server"},
		&cli.IntFlag{Name: "max-attempts", Usage: "deliveries before it goes dead", DefaultText: "10, set by the server"},
		&cli.StringSliceFlag{Name: "header", Usage: "header `k=v` (repeat the flag for more)"},
	}
}

// whenFlags are --delay and --deliver-at, saying when a message is due.
func whenFlags(verb string) []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "delay", Usage: verb + " after `D` (e.g. 30m, 1500ms)"},
		&cli.StringFlag{Name: "deliver-at", Usage: verb + " at instant `T`: RFC 3339 or Unix milliseconds"},
	}
}

// when reads --delay and --deliver-at: nil for a flag not given.
func when(c *cli.Context) (delayMs, deliverAtMs *int64, err error) {
	if c.IsSet("delay") {
		delayMs = api.Ptr(c.Duration("delay").Milliseconds())
	}
	if c.IsSet("deliver-at") {
		at, err := parseInstant(c.String("deliver-at"))
		if err != nil {
			return nil, nil, err
		}
		deliverAtMs = &at
	}
	return delayMs, deliverAtMs, nil
}

// withCommonFlags adds --addr, --token-file and --json to cmd.
func withCommonFlags(cmd *cli.Command) *cli.Command {
	cmd.Flags = append(cmd.Flags,
		&cli.StringFlag{Name: "addr", Value: "http://127.0.0.1:7070", EnvVars: []string{"DELAYWHEEL_ADDR"}, Usage: "address of any node: its HTTP API, or its gRPC API as grpc://host:port; several, comma-separated (http://n1:7070,n2:7070: the first whose node answers; grpc://n1:7072,n2:7072)"},
		&cli.StringFlag{Name: "token-file", EnvVars: []string{"DELAYWHEEL_TOKEN_FILE"}, Usage: "file holding the bearer token"},
		&cli.BoolFlag{Name: "json", Usage: "print the raw JSON answer, indented"},
	)
	return cmd
}

// withHTTPFlags is withCommonFlags for a command the gRPC API does not
// serve: its --addr is a node's HTTP address, and one of grpc:// is
// refused before anything is sent.
func withHTTPFlags(cmd *cli.Command) *cli.Command {
	withCommonFlags(cmd)
	for i, f := range cmd.Flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == "addr" {
			http := *sf
			http.Usage = "HTTP address of any node, or several, comma-separated: the first whose node answers (this command is served over HTTP only)"
			cmd.Flags[i] = &http
		}
	}
	cmd.Before = func(c *cli.Context) error { return httpOnly(c.String("addr"), c.Command.HelpName) }
	return cmd
}

// httpOnly refuses an --addr of grpc:// for command, which the gRPC API
// does not serve.
func httpOnly(addr, command string) error {
	if client.IsGRPC(addr) {
		return fmt.Errorf("--addr %s: %s is served over HTTP only; give a node's HTTP address (http://host:7070)", addr, command)
	}
	return nil
}

func (a *admin) push(c *cli.Context) error {
	return show(c, 2, 2, func(s *session) ([]api.Result, error) {
		m, err := messageOf(c)
		if err != nil {
			return nil, err
		}
		return s.api.Enqueue(c.Context, []api.Message{m})
	}, func(w io.Writer, res []api.Result) {
		row(w, "ID", "DELIVER_AT", "DUPLICATE")
		for _, r := range res {
			row(w, r.ID, instant(r.DeliverAtMs), r.Duplicate)
		}
	})
}

// messageOf builds the message of a push from its arguments and flags.
func messageOf(c *cli.Context) (api.Message, error) {
	m := api.Message{Topic: c.Args().Get(0), Key: c.String("key"), Priority: c.Int64("priority")}
	body := []byte(c.Args().Get(1))
	if c.Args().Get(1) == "-" {
		var err error
		if body, err = io.ReadAll(c.App.Reader); err != nil {
			return m, fmt.Errorf("reading the body from stdin: %w", err)
		}
	}
	m.Payload = api.PayloadOf(body)
	var err error
	if m.DelayMs, m.DeliverAtMs, err = when(c); err != nil {
		return m, err
	}
	if c.IsSet("ttr") {
		m.TTRMs = api.Ptr(c.Duration("ttr").Milliseconds())
	}
	if c.IsSet("max-attempts") {
		m.MaxAttempts = api.Ptr(int32(c.Int("max-attempts")))
	}
	for _, h := range c.StringSlice("header") {
		k, v, ok := strings.Cut(h, "=")
		if !ok {
			return m, fmt.Errorf("--header %q: want k=v", h)
		}
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		// As the API refuses a header name given twice, rather than
		// keeping the last value of a repeated --header.
		if _, dup := m.Headers[k]; dup {
			return m, fmt.Errorf("--header %q: given more than once", k)
		}
		m.Headers[k] = v
	}
	return m, nil
}

// parseInstant parses RFC 3339 or Unix milliseconds.
func parseInstant(s string) (int64, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ms, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("--deliver-at %q: want RFC 3339 (2025-01-02T15:04:05Z) or Unix milliseconds", s)
	}
	return t.UnixMilli(), nil
}

func (a *admin) topics(c *cli.Context) error {
	return show(c, 0, 0, func(s *session) ([]api.TopicCounts, error) {
		return s.api.Topics(c.Context)
	}, func(w io.Writer, ts []api.TopicCounts) {
		row(w, "TOPIC", "DELAYED", "READY", "RESERVED", "DEAD")
		for _, t := range ts {
			row(w, t.Topic, t.Delayed, t.Ready, t.Reserved, t.Dead)
		}
	})
}

func (a *admin) message(c *cli.Context) error {
	return show(c, 1, 1, func(s *session) (api.MessageView, error) {
		return s.api.Get(c.Context, c.Args().Get(0))
	}, func(w io.Writer, m api.MessageView) {
		row(w, "id:", m.ID)
		row(w, "topic:", m.Topic)
		row(w, "state:", m.State)
		if m.State == api.StateDead {
			row(w, "deliver_at:", "- (dead)")
		} else {
			row(w, "deliver_at:", instant(m.DeliverAtMs))
		}
		row(w, "enqueued_at:", instant(m.EnqueuedMs))
		row(w, "attempts:", m.Attempts)
		row(w, "key:", m.Key)
		row(w, "priority:", m.Priority)
		for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
			row(w, "header:", k+"="+m.Headers[k])
		}
		row(w, "body:", bodyText(m.Payload))
	})
}

func (a *admin) cancel(c *cli.Context) error {
	byKey := c.IsSet("topic") || c.IsSet("key")
	nargs := 1
	if byKey {
		nargs = 0
	}
	return show(c, nargs, nargs, func(s *session) (api.Cancelled, error) {
		switch {
		case byKey && (c.String("topic") == "" || c.String("key") == ""):
			return api.Cancelled{}, errors.New("cancel by key needs both --topic and --key")
		case byKey:
			return s.api.CancelKey(c.Context, c.String("topic"), c.String("key"))
		default:
			return s.api.Cancel(c.Context, c.Args().Get(0))
		}
	}, func(w io.Writer, got api.Cancelled) {
		row(w, "ID", "STATE")
		row(w, got.ID, got.State)
	})
}

func (a *admin) cluster(c *cli.Context) error {
	return show(c, 0, 0, func(s *session) (api.Cluster, error) {
		return s.api.Cluster(c.Context)
	}, func(w io.Writer, cl api.Cluster) {
		row(w, "leader:", cl.Leader)
		row(w, "term:", cl.Term)
		row(w, "answered by:", cl.Self, "view of:", cl.ViewOf)
		row(w)
		row(w, "ID", "RAFT_ADDR", "HTTP_ADDR", "SUFFRAGE", "STATE", "REACHABLE", "LAST_CONTACT_MS", "APPLIED", "COMMIT", "LAG")
		for _, n := range cl.Nodes {
			row(w, n.ID, n.RaftAddr, n.HTTPAddr, n.Suffrage, n.State, orDash(n.Reachable), orDash(n.LastContactMs), n.AppliedIndex, n.CommitIndex, orDash(n.Lag))
		}
		if len(cl.Groups) > 1 {
			// Leader and term above are group 0's; the members' indexes
			// too. Each group's own, with the answering node's lag:
			row(w)
			row(w, "GROUP", "LEADER", "TERM", "COMMIT", "LAG")
			for _, g := range cl.Groups {
				row(w, g.Group, orDash(nonEmpty(g.Leader)), g.Term, g.CommitIndex, orDash(g.Lag))
			}
		}
	})
}

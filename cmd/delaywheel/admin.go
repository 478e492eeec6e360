package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// offlineReader reads the wheel of a stopped node's data directory.
type offlineReader interface {
	Wheel() (wheel.WheelInfo, error)
	Slot(slot int, records bool) (wheel.SlotInfo, error)
	Close() error
}

// openOfflineFunc opens a data directory for offlineReader; nil when the
// binary has no offline mode.
type openOfflineFunc func(dataDir string) (offlineReader, error)

// errNoOffline answers --data-dir when there is no offline reader.
var errNoOffline = errors.New("offline mode not available: --data-dir cannot be read by this build; use --addr")

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

// readOffline reads a data directory with read, and keeps the answer's JSON
// for --json as if a node had sent it.
func readOffline[T any](a *admin, s *session, read func(offlineReader) (T, error)) (T, error) {
	var zero T
	if a.openOffline == nil {
		return zero, errNoOffline
	}
	dir, err := groupDataDir(s.c)
	if err != nil {
		return zero, err
	}
	r, err := a.openOffline(dir)
	if err != nil {
		return zero, fmt.Errorf("opening %s: %w", s.c.String("data-dir"), err)
	}
	v, err := read(r)
	if cerr := r.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing %s: %w", s.c.String("data-dir"), cerr)
	}
	if err != nil {
		return zero, err
	}
	s.raw, err = json.Marshal(v)
	return v, err
}

func (a *admin) wheel(c *cli.Context) error {
	return show(c, 0, 0, func(s *session) (api.Wheel, error) {
		if !c.IsSet("data-dir") {
			return online(s, s.api.GroupWheel)
		}
		return readOffline(a, s, func(r offlineReader) (api.Wheel, error) {
			info, err := r.Wheel()
			return transport.WheelView(info), err
		})
	}, func(tw io.Writer, w api.Wheel) {
		row(tw, "cursor:", instant(w.CursorMs))
		row(tw, "horizon:", instant(w.HorizonMs))
		row(tw, "slots:", fmt.Sprintf("%d of %d ms", w.Slots, w.TickMs))
		row(tw, "open segments:", w.OpenSegments)
		row(tw, "overflow messages:", w.OverflowMessages)
		row(tw)
		row(tw, "SLOT", "SECOND", "DUE", "MESSAGES", "BYTES")
		for _, n := range w.NonEmpty {
			row(tw, n.Slot, n.Second, instant(n.Second*w.TickMs), n.Messages, n.Bytes)
		}
	})
}

func (a *admin) slot(c *cli.Context) error {
	records := c.Bool("records")
	return show(c, 1, 1, func(s *session) (api.Slot, error) {
		n, err := strconv.Atoi(c.Args().Get(0))
		if err != nil || n < 0 || n >= wheel.Slots {
			return api.Slot{}, fmt.Errorf("slot %q: want a number from 0 to %d", c.Args().Get(0), wheel.Slots-1)
		}
		if !c.IsSet("data-dir") {
			return online(s, func(ctx context.Context, g int) (api.Slot, error) { return s.api.GroupSlot(ctx, g, n, records) })
		}
		return readOffline(a, s, func(r offlineReader) (api.Slot, error) {
			info, err := r.Slot(n, records)
			return transport.SlotView(info, records), err
		})
	}, func(w io.Writer, sl api.Slot) {
		row(w, "slot:", sl.Slot)
		row(w, "second:", fmt.Sprintf("%d (%s)", sl.Second, instant(sl.Second*wheel.TickMs)))
		row(w, "file:", sl.File)
		row(w, "messages:", sl.Messages)
		row(w, "bytes:", sl.Bytes)
		if !records {
			return
		}
		row(w)
		row(w, "OFFSET", "TYPE", "INDEX", "ID", "TOPIC", "DUE", "ATTEMPTS", "BYTES", "LIVE")
		for _, r := range sl.Records {
			row(w, r.Offset, r.Type, r.Index, r.ID, r.Topic, instant(r.DueMs), r.Attempts, r.Bytes, r.Live)
		}
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

// groupFlag is --group, the group whose data a command reads (what: the
// verb of its usage).
func groupFlag(what string) cli.Flag {
	return &cli.IntFlag{Name: "group", Usage: what + " Raft group `G` of a node of --groups N (0 to N-1)", DefaultText: "0"}
}

// online asks the node for group --group's answer.
func online[T any](s *session, ofGroup func(context.Context, int) (T, error)) (T, error) {
	g := s.c.Int("group")
	if g < 0 {
		var zero T
		return zero, fmt.Errorf("--group %d: want a group from 0 to N-1 of a node of --groups N", g)
	}
	v, err := ofGroup(s.c.Context, g)
	if g != 0 && client.HasCode(err, api.CodeInvalidArgument) {
		err = fmt.Errorf("--group %d: %w", g, err)
	}
	return v, err
}

// groupDataDir is where group --group keeps its data in --data-dir.
func groupDataDir(c *cli.Context) (string, error) {
	dir, err := replication.GroupDataDir(c.String("data-dir"), c.Int("group"))
	if errors.Is(err, model.ErrInvalid) {
		err = fmt.Errorf("--group: %w", err)
	}
	return dir, err
}

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/transporttest"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// startMs is where the node's clock starts; it moves only when a test
// advances it.
const startMs = transporttest.StartMs

// node is a real one-node cluster behind its HTTP server.
type node struct {
	*transporttest.Node
	addr string
}

func newNode(t *testing.T, token string) *node {
	t.Helper()
	n := transporttest.Start(t, transporttest.Options{Server: func(c *transport.Config) { c.AuthToken = token }})
	return &node{Node: n, addr: n.URL}
}

// run runs the app built by newApp with args (after the program name) and
// returns what it wrote to stdout.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runApp(t, newApp(), "", args...)
}

func runApp(t *testing.T, app *cli.App, stdin string, args ...string) (string, error) {
	t.Helper()
	out, _, err := runStderr(t, app, stdin, args...)
	return out, err
}

// runStderr runs app and returns what it wrote to stdout and to stderr.
func runStderr(t *testing.T, app *cli.App, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter, app.Reader = &out, &errOut, strings.NewReader(stdin)
	err = runCLI(t.Context(), app, append([]string{"delaywheel"}, args...))
	return out.String(), errOut.String(), err
}

// mustRun runs the app and fails on error.
func (n *node) mustRun(t *testing.T, cmd string, args ...string) string {
	t.Helper()
	out, err := run(t, append([]string{cmd, "--addr", n.addr}, args...)...)
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", cmd, args, err, out)
	}
	return out
}

// decodeJSON checks that out is indented JSON and decodes it into v.
func decodeJSON(t *testing.T, out string, v any) {
	t.Helper()
	if !strings.Contains(out, "\n  \"") || !strings.HasSuffix(out, "}\n") {
		t.Fatalf("not indented JSON:\n%s", out)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
}

// contains fails unless out holds every want.
func contains(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// hasRow fails unless a line of out has exactly these cells.
func hasRow(t *testing.T, out string, cells ...string) {
	t.Helper()
	want := strings.Join(cells, " ")
	for _, r := range fields(out) {
		if strings.Join(r, " ") == want {
			return
		}
	}
	t.Errorf("no row %q in:\n%s", want, out)
}

// fields returns the whitespace-separated cells of each line.
func fields(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

func TestPushMessageAndCancel(t *testing.T) {
	n := newNode(t, "")
	out := n.mustRun(t, "push", "--delay", "30s", "--key", "order-42", "--priority", "7", "--ttr", "10s",
		"--max-attempts", "3", "--header", "tenant=a", "--header", "trace=x=y", "orders.close", "close order 42")
	rows := fields(out)
	if len(rows) != 2 || strings.Join(rows[0], " ") != "ID DELIVER_AT DUPLICATE" {
		t.Fatalf("push table:\n%s", out)
	}
	id := rows[1][0]
	if rows[1][1] != "2024-11-22T03:20:30.000Z" || rows[1][2] != "false" {
		t.Fatalf("push row %v", rows[1])
	}

	var res api.EnqueueResponse
	decodeJSON(t, n.mustRun(t, "push", "--json", "--key", "order-42", "orders.close", "again"), &res)
	if len(res.Results) != 1 || res.Results[0].ID != id || !res.Results[0].Duplicate {
		t.Fatalf("duplicate push: %+v", res)
	}

	out = n.mustRun(t, "message", id)
	contains(t, out, "state:", "delayed", "key:", "order-42", "priority:", "7", "header:", "tenant=a", "trace=x=y", `"close order 42"`)
	var v api.MessageView
	decodeJSON(t, n.mustRun(t, "message", "--json", id), &v)
	if v.ID != id || v.Topic != "orders.close" || v.DeliverAtMs != startMs+30000 || *v.Body != "close order 42" || v.Headers["trace"] != "x=y" {
		t.Fatalf("message JSON: %+v", v)
	}

	out = n.mustRun(t, "cancel", "--topic", "orders.close", "--key", "order-42")
	contains(t, out, id, "cancelled")
	_, err := run(t, "message", "--addr", n.addr, id)
	if err == nil || err.Error() != "not found: message "+id {
		t.Fatalf("message after cancel: %v", err)
	}

	out = n.mustRun(t, "push", "--deliver-at", "2024-11-22T03:21:00.5Z", "t", "-")
	contains(t, out, "2024-11-22T03:21:00.500Z")
	id = fields(out)[1][0]
	var c api.Cancelled
	decodeJSON(t, n.mustRun(t, "cancel", "--json", id), &c)
	if c.ID != id || c.State != "cancelled" {
		t.Fatalf("cancel JSON: %+v", c)
	}
}

func TestPushFromStdinAndBadInput(t *testing.T) {
	n := newNode(t, "")
	out, err := runApp(t, newApp(), "from\nstdin", "push", "--addr", n.addr, "--deliver-at", "1732245601000", "t", "-")
	if err != nil {
		t.Fatal(err)
	}
	id := fields(out)[1][0]
	contains(t, n.mustRun(t, "message", id), `"from\nstdin"`, "2024-11-22T03:20:01.000Z")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"push", "--addr", n.addr, "t"}, "usage: delaywheel push [flags] TOPIC BODY"},
		{[]string{"push", "--addr", n.addr, "--header", "novalue", "t", "b"}, `--header "novalue": want k=v`},
		{[]string{"push", "--addr", n.addr, "--header", "X-A=1", "--header", "X-A=2", "t", "b"}, `--header "X-A": given more than once`},
		{[]string{"push", "--addr", n.addr, "--deliver-at", "tomorrow", "t", "b"}, "--deliver-at \"tomorrow\""},
		{[]string{"push", "--addr", n.addr, "--delay", "-1s", "t", "b"}, "invalid argument: messages[0].delay_ms: must be between 0 and 315360000000 (10 years)"},
		{[]string{"slot", "--addr", n.addr, "7200"}, "want a number from 0 to 7199"},
		{[]string{"cancel", "--addr", n.addr, "--topic", "t"}, "needs both --topic and --key"},
		{[]string{"wheel", "--data-dir", t.TempDir()}, "holds no delaywheel store"},
		{[]string{"slot", "--data-dir", t.TempDir(), "5"}, "holds no delaywheel store"},
	} {
		_, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
	topics, err := n.Client.Topics(t.Context())
	if err != nil || len(topics) != 1 || topics[0].Delayed+topics[0].Ready != 1 {
		t.Fatalf("bad input reached the node: topics %+v (error %v), want the one message", topics, err)
	}
}

func TestReserveTopicsDeadRedrive(t *testing.T) {
	n := newNode(t, "")
	n.mustRun(t, "push", "a", "one")
	n.mustRun(t, "push", "--priority", "9", "a", "two")
	n.mustRun(t, "push", "--max-attempts", "1", "--ttr", "1ms", "b", "doomed")
	// Messages due now read ready at once, and move to their ready queues
	// (where priority orders them) once their second has expired.
	n.AdvanceUntil(t, 100*time.Millisecond, "the due messages' slot to expire", func() bool {
		w, err := n.Client.Wheel(t.Context())
		tr, terr := n.Client.Topics(t.Context())
		return err == nil && terr == nil && w.CursorMs > startMs && len(tr) == 2 && tr[0].Ready == 2 && tr[1].Ready == 1
	})
	n.mustRun(t, "push", "--delay", "1h", "a", "later")

	out := n.mustRun(t, "topics")
	rows := fields(out)
	if strings.Join(rows[0], " ") != "TOPIC DELAYED READY RESERVED DEAD" || strings.Join(rows[1], " ") != "a 1 2 0 0" || strings.Join(rows[2], " ") != "b 0 1 0 0" {
		t.Fatalf("topics:\n%s", out)
	}

	out = n.mustRun(t, "reserve", "--max", "5", "--ack", "a")
	rows = fields(out)
	if len(rows) != 4 || rows[0][0] != "ID" || rows[1][5] != `"two"` || rows[2][5] != `"one"` || rows[1][1] != "1" {
		t.Fatalf("reserve:\n%s", out)
	}
	contains(t, out, "acked 2, stale 0")

	var rr api.ReserveResponse
	now := n.Clock.Now().UnixMilli()
	decodeJSON(t, n.mustRun(t, "reserve", "--json", "--ttr", "5s", "b"), &rr)
	if len(rr.Messages) != 1 || rr.Messages[0].LeaseExpiresMs != now+5000 {
		t.Fatalf("reserve JSON: %+v", rr)
	}
	var tr api.TopicsResponse
	n.Eventually(t, "the lease to be counted", func() bool {
		decodeJSON(t, n.mustRun(t, "topics", "--json"), &tr)
		return len(tr.Topics) == 2 && tr.Topics[1].Reserved == 1
	})
	if tr.Topics[0] != (api.TopicCounts{Topic: "a", Delayed: 1}) {
		t.Fatalf("topics JSON: %+v", tr)
	}

	// Expire b's lease: with max_attempts 1 it goes dead.
	n.AdvanceUntil(t, 100*time.Millisecond, "b's message to be dead", func() bool {
		dead, err := n.Client.Dead(t.Context(), "b", 0)
		return err == nil && len(dead) == 1
	})
	out = n.mustRun(t, "dead", "b")
	rows = fields(out)
	if len(rows) != 2 || rows[1][0] != rr.Messages[0].ID || rows[1][1] != "1" {
		t.Fatalf("dead:\n%s", out)
	}
	var dr api.DeadResponse
	decodeJSON(t, n.mustRun(t, "dead", "--json", "--limit", "5", "b"), &dr)
	if len(dr.Messages) != 1 || dr.Messages[0].State != "dead" {
		t.Fatalf("dead JSON: %+v", dr)
	}
	contains(t, n.mustRun(t, "redrive", "b", rr.Messages[0].ID), "redriven:", "1")
	// Dead again, and redriven by a redrive that names no ids: every
	// dead letter of the topic.
	decodeJSON(t, n.mustRun(t, "reserve", "--json", "--ttr", "5s", "b"), &rr)
	if len(rr.Messages) != 1 {
		t.Fatalf("reserve after the redrive: %+v", rr)
	}
	n.AdvanceUntil(t, 100*time.Millisecond, "b's message to be dead again", func() bool {
		dead, err := n.Client.Dead(t.Context(), "b", 0)
		return err == nil && len(dead) == 1
	})
	var red api.RedriveResponse
	decodeJSON(t, n.mustRun(t, "redrive", "--json", "b"), &red)
	if red.Redriven != 1 {
		t.Fatalf("redrive JSON: %+v; want the one dead letter redriven", red)
	}
}

func TestWheelSlotCluster(t *testing.T) {
	n := newNode(t, "")
	n.mustRun(t, "push", "--delay", "3s", "w", "12345")
	sec := startMs/1000 + 3
	slot := wheel.SlotOf(sec)

	out := n.mustRun(t, "wheel")
	wi, err := n.Client.Wheel(t.Context())
	if err != nil || len(wi.NonEmpty) != 1 {
		t.Fatalf("wheel %+v (error %v)", wi, err)
	}
	contains(t, out, "cursor:", instant(wi.CursorMs), "horizon:", instant(wi.HorizonMs), "slots:", "7200 of 1000 ms")
	hasRow(t, out, "SLOT", "SECOND", "DUE", "MESSAGES", "BYTES")
	hasRow(t, out, itoa(slot), itoa(int(sec)), "2024-11-22T03:20:03.000Z", "1", itoa(int(wi.NonEmpty[0].Bytes)))
	var w api.Wheel
	decodeJSON(t, n.mustRun(t, "wheel", "--json"), &w)
	if w.Slots != 7200 || w.TickMs != 1000 || len(w.NonEmpty) != 1 || w.NonEmpty[0].Slot != slot {
		t.Fatalf("wheel JSON: %+v", w)
	}

	out = n.mustRun(t, "slot", "--records", itoa(slot))
	contains(t, out, "second:", itoa(int(sec)), "file:", "001732245603.seg", "messages:", "OFFSET", "message", "w", "true")
	var s api.Slot
	decodeJSON(t, n.mustRun(t, "slot", "--json", itoa(slot)), &s)
	if s.Slot != slot || s.Messages != 1 || s.Records != nil {
		t.Fatalf("slot JSON: %+v", s)
	}

	out = n.mustRun(t, "cluster")
	cl, err := n.Client.Cluster(t.Context())
	if err != nil || len(cl.Nodes) != 1 {
		t.Fatalf("cluster %+v (error %v)", cl, err)
	}
	contains(t, out, "leader:", "n1", "term:", "ID", "RAFT_ADDR", cl.Nodes[0].RaftAddr, n.Addr, "voter", "leader")
	var c api.Cluster
	decodeJSON(t, n.mustRun(t, "cluster", "--json"), &c)
	if c.Leader != "n1" || len(c.Nodes) != 1 {
		t.Fatalf("cluster JSON: %+v", c)
	}
}

// fakeOffline is an offline reader of a made-up directory.
type fakeOffline struct{ closed *bool }

func (f fakeOffline) Wheel() (wheel.Info, error) {
	return wheel.Info{CursorMs: startMs, HorizonMs: startMs + 7200*1000, OpenSegments: 2,
		NonEmpty: []wheel.SlotSummary{{Slot: 4, Second: 1732245604, Messages: 3, Bytes: 99}}}, nil
}

func (f fakeOffline) Slot(slot int, records bool) (wheel.SlotInfo, error) {
	if slot != 4 {
		return wheel.SlotInfo{}, errors.New("empty slot")
	}
	return wheel.SlotInfo{SlotSummary: wheel.SlotSummary{Slot: 4, Second: 1732245604, Messages: 1, Bytes: 40}, File: "001732245604.seg",
		Records: []wheel.SlotRecord{{Offset: 20, Type: "message", Index: 7, ID: model.ID{Index: 7, Seq: 1}, Topic: "x", DueMs: 1732245604500, Attempts: 0, Bytes: 40, Live: true}}}, nil
}

func (f fakeOffline) Close() error { *f.closed = true; return nil }

func TestOfflineWheelAndSlot(t *testing.T) {
	dir := t.TempDir()
	closed := false
	open := func(dataDir string) (offlineReader, error) {
		if dataDir != dir {
			return nil, os.ErrNotExist
		}
		return fakeOffline{&closed}, nil
	}
	app := func() *cli.App { return &cli.App{Name: "delaywheel", Commands: adminCommands(open)} }

	out, err := runApp(t, app(), "", "wheel", "--data-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, out, "open segments:", "2", "1732245604", "99")
	if !closed {
		t.Fatal("offline reader not closed")
	}
	out, err = runApp(t, app(), "", "wheel", "--json", "--data-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	var w api.Wheel
	decodeJSON(t, out, &w)
	if w.Slots != 7200 || w.OpenSegments != 2 || len(w.NonEmpty) != 1 {
		t.Fatalf("offline wheel JSON: %+v", w)
	}
	out, err = runApp(t, app(), "", "slot", "--records", "--data-dir", dir, "4")
	if err != nil {
		t.Fatal(err)
	}
	contains(t, out, "001732245604.seg", "000000000000000700000001", "2024-11-22T03:20:04.500Z")
	_, err = runApp(t, app(), "", "slot", "--data-dir", dir, "5")
	if err == nil || !strings.Contains(err.Error(), "empty slot") {
		t.Fatalf("offline slot error: %v", err)
	}
	_, err = runApp(t, app(), "", "wheel", "--data-dir", filepath.Join(dir, "missing"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing dir: %v", err)
	}
}

func TestTokenFile(t *testing.T) {
	n := newNode(t, "s3cret")
	_, err := run(t, "topics", "--addr", n.addr)
	if err == nil || !strings.HasPrefix(err.Error(), "unauthenticated: ") {
		t.Fatalf("without token: %v", err)
	}
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n.mustRun(t, "topics", "--token-file", path)
	t.Setenv("DELAYWHEEL_TOKEN_FILE", path)
	t.Setenv("DELAYWHEEL_ADDR", n.addr)
	if _, err := run(t, "cluster"); err != nil {
		t.Fatalf("token file and addr from the environment: %v", err)
	}
	_, err = run(t, "topics", "--addr", n.addr, "--token-file", filepath.Join(t.TempDir(), "none"))
	if err == nil || !strings.Contains(err.Error(), "reading the token file") {
		t.Fatalf("missing token file: %v", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

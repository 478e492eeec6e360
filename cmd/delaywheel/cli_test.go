package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

func TestFlagsFirst(t *testing.T) {
	app := &cli.App{Name: "delaywheel", Commands: adminCommands(nil)}
	for _, tc := range []struct{ in, want string }{
		{"slot 12 --records", "slot --records 12"},
		{"push t x --delay 5s --key k", "push --delay 5s --key k t x"},
		{"push t --delay=5s x", "push --delay=5s t x"},
		{"push --json t - --header a=b", "push --json --header a=b t -"},
		{"reserve a --ack --max 3", "reserve --ack --max 3 a"},
		{"push t --key k -- --body -x", "push --key k -- t --body -x"},
		{"redrive t id1 id2 -json", "redrive -json t id1 id2"},
		{"push t x --bogus", "push --bogus t x"},
		{"topics", "topics"},
		{"nosuch a --b c", "nosuch a --b c"},
	} {
		got, err := flagsFirst(app, append([]string{"delaywheel"}, strings.Fields(tc.in)...))
		if err != nil || strings.Join(got[1:], " ") != tc.want {
			t.Errorf("%s: got %q (error %v), want %q", tc.in, got[1:], err, tc.want)
		}
	}
	_, err := flagsFirst(app, strings.Fields("delaywheel push t x --delay"))
	if err == nil || err.Error() != "delaywheel push: --delay needs a value (see delaywheel push --help)" {
		t.Fatalf("dangling flag: %v", err)
	}
}

// TestArgumentOrder runs commands with their flags after their arguments,
// as in the README, and with "--" before an argument that starts with a dash.
func TestArgumentOrder(t *testing.T) {
	n := newNode(t, "")
	out := n.mustRun(t, "push", "orders", "close 42", "--delay", "5s", "--key", "k42", "--header", "a=b")
	contains(t, out, "2024-11-22T03:20:05.000Z")
	id := fields(out)[1][0]
	contains(t, n.mustRun(t, "message", id, "--json"), `"key": "k42"`, `"a": "b"`)

	out = n.mustRun(t, "push", "dash", "--", "-starts-with-a-dash")
	contains(t, n.mustRun(t, "message", fields(out)[1][0]), `"-starts-with-a-dash"`)

	slot := itoa(int(startMs/1000+5) % 7200)
	contains(t, n.mustRun(t, "slot", slot, "--records"), "OFFSET", id)

	out = n.mustRun(t, "push", "now", "x")
	n.AdvanceUntil(t, 100*time.Millisecond, "the message to be ready", func() bool {
		v, err := n.Client.Get(t.Context(), fields(out)[1][0])
		return err == nil && v.State == api.StateReady
	})
	out = n.mustRun(t, "reserve", "now", "--max", "5", "--ack")
	contains(t, out, `"x"`, "acked 1, stale 0")

	var c api.Cancelled
	decodeJSON(t, n.mustRun(t, "cancel", id, "--json"), &c)
	if c.ID != id {
		t.Fatalf("cancel JSON: %+v", c)
	}
}

func TestUsageErrorsAreOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"push", "t", "x", "--bogus"}, "delaywheel push: unknown flag --bogus (see delaywheel push --help)"},
		{[]string{"push", "t", "x", "--delay", "5"}, `delaywheel push: --delay "5": want a duration with a unit, e.g. 5s, 1500ms, 2h30m (see delaywheel push --help)`},
		{[]string{"reserve", "t", "--max", "many"}, `delaywheel reserve: --max "many": want an integer (see delaywheel reserve --help)`},
		{[]string{"--bogus"}, "delaywheel: unknown flag --bogus (see delaywheel --help)"},
		{[]string{"pusj", "t"}, `delaywheel: unknown command "pusj" (see delaywheel --help)`},
		{[]string{"push", "t"}, "usage: delaywheel push [flags] TOPIC BODY (BODY - reads stdin) (see delaywheel push --help)"},
	} {
		out, errOut, err := runStderr(t, newApp(), "", tc.args...)
		if err == nil || err.Error() != tc.want || out != "" || errOut != "" {
			t.Errorf("%v: error %v, stdout %q, stderr %q; want only the error %q", tc.args, err, out, errOut, tc.want)
		}
	}
}

func TestHelpShowsOneDefault(t *testing.T) {
	out, err := run(t, "push", "--help")
	if err != nil {
		t.Fatal(err)
	}
	contains(t, out, "--ttr D", "lease length D once reserved (default: 30s, set by the server)",
		"--max-attempts value", "(default: 10, set by the server)", "--delay D")
	for _, l := range strings.Split(out, "\n") {
		if strings.Count(l, "default") > 1 {
			t.Errorf("help shows two defaults: %s", l)
		}
	}
}

func TestAPIErrorsAreOneLine(t *testing.T) {
	n := newNode(t, "")
	out := n.mustRun(t, "push", "t", "x")
	id := fields(out)[1][0]
	n.AdvanceUntil(t, 100*time.Millisecond, "the message to be ready", func() bool {
		v, err := n.Client.Get(t.Context(), id)
		return err == nil && v.State == api.StateReady
	})
	n.mustRun(t, "reserve", "t")
	n.Eventually(t, "the lease to be applied", func() bool {
		v, err := n.Client.Get(t.Context(), id)
		return err == nil && v.State == api.StateReserved
	})

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cancel", id}, "conflict: message " + id + " is reserved; ack or nack it instead"},
		{[]string{"message", "xyz"}, `invalid argument: id: must be a message id (24 hex digits, not all zero), got "xyz"`},
		{[]string{"cancel", "nothex"}, `invalid argument: id: must be a message id (24 hex digits, not all zero), got "nothex"`},
		{[]string{"message", "000000000000000100000009"}, "not found: message 000000000000000100000009"},
	} {
		_, err := run(t, append(tc.args, "--addr", n.addr)...)
		var ce *client.Error
		if err == nil || err.Error() != tc.want || !errors.As(err, &ce) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}

	n.CloseHTTP()
	_, err := run(t, "topics", "--addr", n.addr)
	if err == nil || !strings.HasPrefix(err.Error(), "cannot reach "+n.addr+": ") || strings.Contains(err.Error(), "/v1/") {
		t.Fatalf("node down: %v", err)
	}
}

func TestEmptyListsSayWhy(t *testing.T) {
	n := newNode(t, "")
	n.mustRun(t, "push", "known", "later", "--delay", "1h")
	run := func(args ...string) (string, string, error) {
		return runStderr(t, newApp(), "", append(args, "--addr", n.addr)...)
	}

	for _, tc := range []struct {
		args           []string
		stdout, stderr string
		err            string
	}{
		{[]string{"reserve", "nope"}, "", "topic nope does not exist\n", ""},
		{[]string{"reserve", "known"}, "", "no messages due on topic known\n", ""},
		{[]string{"reserve", "known", "--json"}, "{\n  \"messages\": []\n}\n", "no messages due on topic known\n", ""},
		{[]string{"dead", "known"}, "", "no dead letters on topic known\n", ""},
		{[]string{"dead", "nope"}, "", "", "topic nope does not exist"},
		{[]string{"redrive", "nope"}, "", "", "topic nope does not exist"},
		{[]string{"redrive", "known"}, "redriven:  0\n", "", ""},
	} {
		out, errOut, err := run(tc.args...)
		if out != tc.stdout || errOut != tc.stderr || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("%v: stdout %q, stderr %q, error %v; want %q, %q, %q", tc.args, out, errOut, err, tc.stdout, tc.stderr, tc.err)
		}
	}
}

func TestAckNackTouchReschedule(t *testing.T) {
	n := newNode(t, "")
	var ids []string
	for _, body := range []string{"a", "b", "c"} {
		ids = append(ids, fields(n.mustRun(t, "push", "q", body))[1][0])
	}
	n.AdvanceUntil(t, 100*time.Millisecond, "the messages to be ready", func() bool {
		ts, err := n.Client.Topics(t.Context())
		return err == nil && len(ts) == 1 && ts[0].Ready == 3
	})
	var rr api.ReserveResponse
	decodeJSON(t, n.mustRun(t, "reserve", "q", "--max", "3", "--json"), &rr)
	if len(rr.Messages) != 3 {
		t.Fatalf("reserve: %+v", rr)
	}
	var reserved []string
	for _, d := range rr.Messages {
		reserved = append(reserved, d.ID)
	}
	slices.Sort(ids)
	slices.Sort(reserved)
	if !slices.Equal(reserved, ids) {
		t.Fatalf("reserved %v; want the pushed %v", reserved, ids)
	}
	receipt := func(i int) string { return rr.Messages[i].Receipt }

	out := n.mustRun(t, "touch", receipt(0), receipt(1))
	hasRow(t, out, "touched:", "2")
	hasRow(t, out, "stale:", "0")
	out = n.mustRun(t, "ack", receipt(0))
	hasRow(t, out, "acked:", "1")
	var ack api.AckResponse
	decodeJSON(t, n.mustRun(t, "ack", receipt(0), "--json"), &ack)
	if ack != (api.AckResponse{Stale: 1}) {
		t.Fatalf("second ack: %+v", ack)
	}
	out = n.mustRun(t, "nack", receipt(1), receipt(2), "--delay", "1m")
	hasRow(t, out, "nacked:", "2")
	v, err := n.Client.Get(t.Context(), rr.Messages[1].ID)
	if err != nil || v.State != api.StateDelayed || v.DeliverAtMs != n.Clock.Now().UnixMilli()+60000 {
		t.Fatalf("nacked message %+v (error %v)", v, err)
	}

	id := rr.Messages[2].ID
	out = n.mustRun(t, "reschedule", id, "--deliver-at", "2024-11-22T04:00:00Z")
	hasRow(t, out, "ID", "DELIVER_AT")
	hasRow(t, out, id, "2024-11-22T04:00:00.000Z")
	var rs api.Rescheduled
	decodeJSON(t, n.mustRun(t, "reschedule", id, "--delay", "2h", "--json"), &rs)
	if rs.ID != id || rs.DeliverAtMs != n.Clock.Now().UnixMilli()+2*3600*1000 {
		t.Fatalf("reschedule JSON: %+v", rs)
	}
	for _, args := range [][]string{{"reschedule", id}, {"reschedule", id, "--delay", "1s", "--deliver-at", "0"}} {
		_, err := run(t, append(args, "--addr", n.addr)...)
		if err == nil || err.Error() != "reschedule needs one of --delay and --deliver-at" {
			t.Errorf("%v: %v", args, err)
		}
	}
	if _, err := run(t, "ack", "--addr", n.addr); err == nil || !strings.HasPrefix(err.Error(), "usage: delaywheel ack [flags] RECEIPT...") {
		t.Fatalf("ack without receipts: %v", err)
	}
}

func TestDeadLettersShowWhenEnqueued(t *testing.T) {
	n := newNode(t, "")
	id := fields(n.mustRun(t, "push", "d", "x", "--max-attempts", "1", "--ttr", "1ms"))[1][0]
	n.AdvanceUntil(t, 100*time.Millisecond, "the message to be ready", func() bool {
		v, err := n.Client.Get(t.Context(), id)
		return err == nil && v.State == api.StateReady
	})
	n.mustRun(t, "reserve", "d")
	n.AdvanceUntil(t, 100*time.Millisecond, "the message to be dead", func() bool {
		v, err := n.Client.Get(t.Context(), id)
		return err == nil && v.State == api.StateDead
	})
	out := n.mustRun(t, "dead", "d")
	hasRow(t, out, "ID", "ATTEMPTS", "ENQUEUED_AT", "KEY", "BODY")
	hasRow(t, out, id, "1", "2024-11-22T03:20:00.000Z", `"x"`)
	out = n.mustRun(t, "message", id)
	contains(t, out, "deliver_at:   - (dead)", "enqueued_at:  2024-11-22T03:20:00.000Z")
	if instant(0) != "-" {
		t.Fatalf("instant(0) = %q, want -", instant(0))
	}
}

func TestBackupToStdoutAndFile(t *testing.T) {
	n := newNode(t, "")
	n.mustRun(t, "push", "t", "x", "--delay", "1h")

	out, errOut, err := runStderr(t, newApp(), "", "backup", "--addr", n.addr, "--out", "-")
	if err != nil {
		t.Fatal(err)
	}
	contains(t, errOut, "backup written to stdout")
	if _, err := os.Stat("-"); !os.IsNotExist(err) {
		t.Fatalf("a file named - exists: %v", err)
	}

	path := filepath.Join(t.TempDir(), "b.tar")
	contains(t, n.mustRun(t, "backup", "--out", path), "backup written to "+path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const seg = "segments/001732249200.seg" // the slot of the message, due in an hour
	if !slices.Contains(tarNames(t, data), seg) || !slices.Contains(tarNames(t, []byte(out)), seg) {
		t.Fatalf("a backup lacks %s: file %v, stdout %v", seg, tarNames(t, data), tarNames(t, []byte(out)))
	}
}

// tarNames lists the names of the files in a tar archive.
func tarNames(t *testing.T, data []byte) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("reading the backup: %v", err)
		}
		names = append(names, h.Name)
	}
}

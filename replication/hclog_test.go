package replication

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// recorder is a slog.Handler that keeps every record.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) take() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.records
	r.records = nil
	return out
}

func attrsOf(rec slog.Record) map[string]string {
	m := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

// Raft's lines reach slog one record each, at their level, with their
// fields as attributes; repeated failures to reach a peer are one warning
// per window with the count of those left out; the transport's own
// shutdown is a debug line.
func TestRaftLoggerLevelsFieldsAndRepeats(t *testing.T) {
	rec := &recorder{}
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	hl := raftLogger(slog.New(rec), clock)

	hl.Info("entering leader state", "leader", "n1")
	got := rec.take()
	if len(got) != 1 || got[0].Level != slog.LevelInfo || got[0].Message != "entering leader state" || attrsOf(got[0])["leader"] != "n1" {
		t.Fatalf("info line: %+v", got)
	}

	for i := 0; i < 5; i++ {
		hl.Error("failed to heartbeat to", "peer", "10.0.0.2:7071", "error", fmt.Errorf("dial tcp: connection refused"))
	}
	got = rec.take()
	if len(got) != 1 || got[0].Level != slog.LevelWarn || attrsOf(got[0])["peer"] != "10.0.0.2:7071" {
		t.Fatalf("five failed heartbeats to one peer: %+v; want one warning", got)
	}
	hl.Error("failed to heartbeat to", "peer", "10.0.0.3:7071", "error", "refused")
	if got = rec.take(); len(got) != 1 {
		t.Fatalf("a failure to another peer: %d records, want 1", len(got))
	}
	now = now.Add(peerRepeatWindow)
	hl.Error("failed to heartbeat to", "peer", "10.0.0.2:7071", "error", "refused")
	got = rec.take()
	if len(got) != 1 || attrsOf(got[0])["repeated"] != "4" {
		t.Fatalf("after the window: %+v; want one warning with repeated=4", got)
	}

	hl.Error("failed to decode incoming command", "error", "read tcp: use of closed network connection")
	got = rec.take()
	if len(got) != 1 || got[0].Level != slog.LevelDebug {
		t.Fatalf("transport shutdown: %+v; want a debug line", got)
	}
	hl.Error("failed to append to logs", "error", "disk full")
	got = rec.take()
	if len(got) != 1 || got[0].Level != slog.LevelError {
		t.Fatalf("a real error: %+v; want an error line", got)
	}
}

// jsonKeys returns the top-level keys of one JSON object, in order, with
// repeats.
func jsonKeys(t *testing.T, line string) (keys []string, values map[string]any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("%q: not an object", line)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		keys = append(keys, tok.(string))
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
	}
	if err := json.Unmarshal([]byte(line), &values); err != nil {
		t.Fatal(err)
	}
	return keys, values
}

// Raft's lines in JSON hold each key once (its own "time" and "node"
// arguments are renamed), keys without spaces, durations in seconds.
func TestRaftLoggerJSONKeysAndDurations(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	hl := raftLogger(slog.New(slog.NewJSONHandler(&buf, nil)).With("node", "n1"), func() time.Time { return now })
	hl.Warn("failed to contact", "server-id", raft.ServerID("n2"), "time", 251*time.Millisecond)
	hl.Info("entering candidate state", "node", "Node at 127.0.0.1:1 [Candidate]", "term", 4)
	hl.Error("failed to heartbeat to", "peer", raft.ServerAddress("127.0.0.1:2"), "backoff time", 10*time.Millisecond, "error", errors.New("refused"))
	hl.Error("failed to appendEntries to", "peer", raft.Server{ID: "n3", Address: "127.0.0.1:3"}, "error", errors.New("EOF"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), buf.String())
	}
	want := []map[string]any{
		{"raft_time": 0.251, "server-id": "n2", "node": "n1"},
		{"raft_node": "Node at 127.0.0.1:1 [Candidate]", "node": "n1", "term": 4.0},
		{"backoff_time": 0.01, "peer": "127.0.0.1:2", "error": "refused"},
		{"peer": "n3@127.0.0.1:3", "error": "EOF"},
	}
	for i, line := range lines {
		keys, values := jsonKeys(t, line)
		seen := map[string]bool{}
		for _, k := range keys {
			if seen[k] || strings.Contains(k, " ") {
				t.Fatalf("key %q repeated or with a space in %s", k, line)
			}
			seen[k] = true
		}
		for k, v := range want[i] {
			if values[k] != v {
				t.Fatalf("%s: %s = %v, want %v", line, k, values[k], v)
			}
		}
	}
}

// Raft's routine messages are logged at their real level, decided by
// message; the same message about something else keeps its level.
func TestRaftLoggerRoutineLevels(t *testing.T) {
	rec := &recorder{}
	hl := raftLogger(slog.New(rec), time.Now)
	for _, c := range []struct {
		msg  string
		args []any
		want slog.Level
	}{
		{"failed to get log", []any{"index", 9, "error", errors.New("log not found")}, slog.LevelInfo},
		{"failed to get log", []any{"index", 9, "error", errors.New("input/output error")}, slog.LevelError},
		{"peer has newer term, stopping replication", []any{"peer", "n2"}, slog.LevelInfo},
		{"appendEntries rejected, sending older logs", []any{"peer", "n2", "next", 7}, slog.LevelInfo},
		{"clearing log suffix", []any{"from", 3, "to", 5}, slog.LevelInfo},
	} {
		hl.Error(c.msg, c.args...)
		got := rec.take()
		if len(got) != 1 || got[0].Level != c.want {
			t.Fatalf("%s %v: %+v; want one line at %v", c.msg, c.args, got, c.want)
		}
	}
}

// A warning about no peer is logged at most once per repeatWindow, then
// with the count of those left out.
func TestRaftLoggerWarningOncePerSecond(t *testing.T) {
	rec := &recorder{}
	now := time.Unix(1_700_000_000, 0)
	hl := raftLogger(slog.New(rec), func() time.Time { return now })
	for range 3 {
		hl.Warn("failed to contact quorum of nodes, stepping down")
	}
	if got := rec.take(); len(got) != 1 {
		t.Fatalf("three warnings within a second: %d lines, want 1", len(got))
	}
	now = now.Add(repeatWindow)
	hl.Warn("failed to contact quorum of nodes, stepping down")
	got := rec.take()
	if len(got) != 1 || attrsOf(got[0])["repeated"] != "2" {
		t.Fatalf("after a second: %+v; want one warning with repeated=2", got)
	}
}

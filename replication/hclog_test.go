package replication

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"
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
	now = now.Add(repeatWindow)
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

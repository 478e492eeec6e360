package replication

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// raftLogger returns the hclog.Logger hashicorp/raft and its transport log
// through: one slog record per line, at the line's level, with its fields
// as attributes, under component=raft.
func raftLogger(l *slog.Logger, clock func() time.Time) hclog.Logger {
	w := &hclogWriter{l: l.With("component", "raft"), now: clock, last: map[string]repeat{}}
	return hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Info, JSONFormat: true, Output: w})
}

// repeatWindow is how long a repeated warning about one peer stays quiet:
// a node cut off from a peer would otherwise log every retry.
const repeatWindow = 30 * time.Second

type repeat struct {
	at         time.Time
	suppressed int
}

// hclogWriter turns hclog's JSON lines into slog records.
//
// Raft reports each failed contact with a peer as an error, retried within
// a second, and the end of its transport at shutdown as an error too. An
// unreachable peer is the state the cluster is built to survive, so it is
// a warning, logged once per peer and message per repeatWindow with the
// count of those left out; errors caused by the transport shutting down
// are debug lines.
type hclogWriter struct {
	l   *slog.Logger
	now func() time.Time

	mu   sync.Mutex
	last map[string]repeat // message and peer → when last logged
}

func (w *hclogWriter) Write(p []byte) (int, error) {
	var fields map[string]any
	if err := json.Unmarshal(p, &fields); err != nil {
		w.l.Info(strings.TrimSpace(string(p)))
		return len(p), nil
	}
	msg, _ := fields["@message"].(string)
	levelName, _ := fields["@level"].(string)
	level := slog.LevelInfo
	switch levelName {
	case "trace", "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	var attrs []any
	peer := ""
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if strings.HasPrefix(k, "@") {
			continue
		}
		v := fields[k]
		if k == "peer" || k == "target" {
			peer = k + "=" + stringOf(v)
		}
		if closedConn(stringOf(v)) {
			level = slog.LevelDebug
		}
		attrs = append(attrs, k, v)
	}
	if level >= slog.LevelWarn && peer != "" {
		level = slog.LevelWarn
		if n, ok := w.quiet(msg + " " + peer); !ok {
			return len(p), nil
		} else if n > 0 {
			attrs = append(attrs, "repeated", n)
		}
	}
	w.l.Log(context.Background(), level, msg, attrs...)
	return len(p), nil
}

// quiet reports whether a warning keyed key may be logged now, and how
// many were left out since it last was.
func (w *hclogWriter) quiet(key string) (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	r, seen := w.last[key]
	if seen && now.Sub(r.at) < repeatWindow {
		r.suppressed++
		w.last[key] = r
		return 0, false
	}
	w.last[key] = repeat{at: now}
	return r.suppressed, true
}

// closedConn reports whether an error text tells of a connection or
// transport closed on purpose: this node or a peer shutting down.
func closedConn(s string) bool {
	return strings.Contains(s, "transport shutdown") || strings.Contains(s, "use of closed network connection") ||
		strings.Contains(s, "stream layer is closed")
}

func stringOf(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

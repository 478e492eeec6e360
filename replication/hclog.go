package replication

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/replication/logrepeat"
)

// raftLogger returns the hclog.Logger hashicorp/raft, its transport and
// raft-wal log through: one slog record per call, under component=raft,
// with its arguments as attributes (see raftLog.Log for what it changes).
func raftLogger(l *slog.Logger, clock func() time.Time) hclog.Logger {
	level := new(atomic.Int32)
	level.Store(int32(hclog.Info))
	return &raftLog{
		l:     l.With("component", "raft"),
		level: level,
		peers: logrepeat.New(peerRepeatWindow, clock),
		other: logrepeat.New(repeatWindow, clock),
	}
}

// repeatWindow is how often one of Raft's warnings or errors may be
// logged for one cause (its message and the peer it is about).
const repeatWindow = time.Second

// peerRepeatWindow is repeatWindow for failures to reach a peer: Raft
// retries a peer that is down for as long as it is, and the leader's own
// warning that a member does not answer its heartbeats says it once.
const peerRepeatWindow = 30 * time.Second

// raftLog is an hclog.Logger over slog.
type raftLog struct {
	l       *slog.Logger
	name    string // below raft: "wal" for raft-wal
	implied []any
	level   *atomic.Int32 // shared by every logger derived from one
	// peers and other rate-limit the warnings and errors (repeatWindow,
	// peerRepeatWindow), shared likewise.
	peers, other *logrepeat.Limiter
}

var _ hclog.Logger = (*raftLog)(nil)

// reservedKeys are attribute names the slog handler or this node's
// logger set on every record: Raft's arguments of those names (it passes
// "time" for durations and "node" for a peer) are renamed raft_<name>, so
// that no record holds a key twice.
func reserved(key string) bool {
	switch key {
	case slog.TimeKey, slog.LevelKey, slog.MessageKey, slog.SourceKey, "node", "component", "module", logrepeat.RepeatedKey:
		return true
	}
	return false
}

// Log turns one hclog call into one slog record:
//   - argument names are made safe for logfmt and JSON parsers (spaces
//     become underscores) and never repeat a key the record has already
//     (reserved);
//   - a time.Duration is a number of seconds, an error its text;
//   - the level is the message's real one (routineLevel), and an error
//     caused by a connection or transport closed on purpose is a debug
//     line;
//   - a warning or error is logged at most once per repeatWindow for one
//     cause (message and peer; peerRepeatWindow when it names a peer),
//     with the count of those left out.
func (r *raftLog) Log(level hclog.Level, msg string, args ...any) {
	if level < r.GetLevel() || level == hclog.Off {
		return
	}
	lv := slogLevel(level)
	all := append(append([]any{}, r.implied...), args...)
	attrs := make([]any, 0, len(all)+2)
	peer, errText := "", ""
	if r.name != "" {
		attrs = append(attrs, "module", "raft."+r.name)
	}
	for i := 0; i < len(all); i += 2 {
		key := fmt.Sprint(all[i])
		var v any = "(missing)"
		if i+1 < len(all) {
			v = all[i+1]
		}
		v = attrValue(v)
		switch key {
		case "peer", "target", "server-id":
			peer = fmt.Sprint(v)
		case "error", "err":
			errText = fmt.Sprint(v)
		}
		if s, ok := v.(string); ok && closedConn(s) {
			lv = slog.LevelDebug
		}
		key = strings.ReplaceAll(key, " ", "_")
		if reserved(key) {
			key = "raft_" + key
		}
		attrs = append(attrs, key, v)
	}
	if rl, ok := routineLevel(msg, errText); ok && lv > slog.LevelDebug {
		lv = rl
	}
	if lv < slog.LevelWarn {
		r.l.Log(context.Background(), lv, msg, attrs...)
		return
	}
	limiter := r.other
	if peer != "" {
		// An unreachable peer is the state the cluster is built to
		// survive: a warning.
		lv, limiter = slog.LevelWarn, r.peers
	}
	limiter.Log(r.l, lv, msg+"\x00"+peer, msg, attrs...)
}

// routineLevel is the level of Raft's messages that report routine events
// above their weight, decided by message (and error, for one):
//   - "failed to get log" with "log not found": the leader finds a
//     follower behind the start of its log and sends it a snapshot
//     instead (a snapshot catch-up) — info;
//   - "appendEntries rejected, sending older logs", "failed to get
//     previous log", "previous log term mis-match", "clearing log
//     suffix": a follower behind or holding a deposed leader's entries
//     after a restart or a change of leader, which the leader repairs —
//     info;
//   - "peer has newer term, stopping replication": a deposed leader
//     learns of the new term — info;
//   - "rejecting pre-vote request since we have a leader": a restarted
//     node asks before it hears from the leader — info.
func routineLevel(msg, errText string) (slog.Level, bool) {
	switch msg {
	case "failed to get log":
		if strings.Contains(errText, "log not found") {
			return slog.LevelInfo, true
		}
	case "appendEntries rejected, sending older logs", "failed to get previous log",
		"previous log term mis-match", "clearing log suffix",
		"peer has newer term, stopping replication",
		"rejecting pre-vote request since we have a leader":
		return slog.LevelInfo, true
	}
	return 0, false
}

// attrValue is how an hclog argument is logged: a duration in seconds,
// an error as its text, hclog.Fmt formatted, a peer's raft.Server as
// id@address, any other value as its %v text; numbers, strings and bools as they are.
func attrValue(v any) any {
	switch v := v.(type) {
	case time.Duration:
		return v.Seconds()
	case raft.Server:
		return fmt.Sprintf("%s@%s", v.ID, v.Address)
	case error:
		return v.Error()
	case hclog.Format:
		if len(v) == 0 {
			return ""
		}
		return fmt.Sprintf(fmt.Sprint(v[0]), v[1:]...)
	case string, bool, int, int32, int64, uint, uint32, uint64, float32, float64:
		return v
	case fmt.Stringer:
		return v.String()
	}
	return fmt.Sprintf("%+v", v)
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace, hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// closedConn reports whether an error text tells of a connection or
// transport closed on purpose: this node or a peer shutting down.
func closedConn(s string) bool {
	return strings.Contains(s, "transport shutdown") || strings.Contains(s, "use of closed network connection") ||
		strings.Contains(s, "stream layer is closed")
}

// Trace logs at trace level.
func (r *raftLog) Trace(msg string, args ...any) { r.Log(hclog.Trace, msg, args...) }

// Debug logs at debug level.
func (r *raftLog) Debug(msg string, args ...any) { r.Log(hclog.Debug, msg, args...) }

// Info logs at info level.
func (r *raftLog) Info(msg string, args ...any) { r.Log(hclog.Info, msg, args...) }

// Warn logs at warn level.
func (r *raftLog) Warn(msg string, args ...any) { r.Log(hclog.Warn, msg, args...) }

// Error logs at error level.
func (r *raftLog) Error(msg string, args ...any) { r.Log(hclog.Error, msg, args...) }

// IsTrace reports whether trace lines are logged.
func (r *raftLog) IsTrace() bool { return r.GetLevel() <= hclog.Trace }

// IsDebug reports whether debug lines are logged.
func (r *raftLog) IsDebug() bool { return r.GetLevel() <= hclog.Debug }

// IsInfo reports whether info lines are logged.
func (r *raftLog) IsInfo() bool { return r.GetLevel() <= hclog.Info }

// IsWarn reports whether warnings are logged.
func (r *raftLog) IsWarn() bool { return r.GetLevel() <= hclog.Warn }

// IsError reports whether errors are logged.
func (r *raftLog) IsError() bool { return r.GetLevel() <= hclog.Error }

// ImpliedArgs returns the arguments With added.
func (r *raftLog) ImpliedArgs() []any { return r.implied }

// With returns a logger that adds args to every line.
func (r *raftLog) With(args ...any) hclog.Logger {
	c := *r
	c.implied = append(append([]any{}, r.implied...), args...)
	return &c
}

// Name returns the logger's name below raft.
func (r *raftLog) Name() string { return r.name }

// Named returns a logger named name below this one's name.
func (r *raftLog) Named(name string) hclog.Logger {
	c := *r
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

// ResetNamed returns a logger named name.
func (r *raftLog) ResetNamed(name string) hclog.Logger {
	c := *r
	c.name = name
	return &c
}

// SetLevel sets the level of this logger and every one derived from it.
func (r *raftLog) SetLevel(l hclog.Level) { r.level.Store(int32(l)) }

// GetLevel returns the lowest level logged.
func (r *raftLog) GetLevel() hclog.Level { return hclog.Level(r.level.Load()) }

// StandardLogger returns a log.Logger whose lines go through this one.
func (r *raftLog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(r.StandardWriter(opts), "", 0)
}

// StandardWriter returns a writer whose lines go through this one, at
// info level (or opts.ForceLevel).
func (r *raftLog) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return stdWriter{r, level}
}

type stdWriter struct {
	r     *raftLog
	level hclog.Level
}

func (w stdWriter) Write(p []byte) (int, error) {
	w.r.Log(w.level, strings.TrimSpace(string(p)))
	return len(p), nil
}

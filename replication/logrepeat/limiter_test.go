package logrepeat

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A cause is logged once per window, then with the count of its repeats
// left out; other causes are not held up by it.
func TestLimiterOncePerWindowWithCount(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := New(time.Second, func() time.Time { return now })
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	for range 200 {
		l.Log(log, slog.LevelWarn, "a", "header dropped", "header", "X-A")
	}
	l.Log(log, slog.LevelWarn, "b", "header dropped", "header", "X-B")
	now = now.Add(999 * time.Millisecond)
	l.Log(log, slog.LevelWarn, "a", "header dropped", "header", "X-A")
	now = now.Add(time.Millisecond)
	l.Log(log, slog.LevelWarn, "a", "header dropped", "header", "X-A")
	want := []string{
		`level=WARN msg="header dropped" header=X-A`,
		`level=WARN msg="header dropped" header=X-B`,
		`level=WARN msg="header dropped" header=X-A repeated=200`,
	}
	if got := strings.Split(strings.TrimSpace(buf.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Past maxCauses, causes not seen within the window are forgotten, so the
// limiter's memory stays bounded.
func TestLimiterForgetsOldCauses(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := New(time.Second, func() time.Time { return now })
	for i := range maxCauses {
		l.Allow(string(rune(i)))
	}
	now = now.Add(time.Second)
	l.Allow("new")
	if len(l.last) != 1 {
		t.Fatalf("%d causes remembered, want 1", len(l.last))
	}
}

package wheel

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble"
)

// TestLogWriteStalls checks that a write stall is logged when it begins,
// with Pebble's reason, and when it ends, with its length.
func TestLogWriteStalls(t *testing.T) {
	var buf bytes.Buffer
	el := &pebble.EventListener{}
	LogWriteStalls(el, slog.New(slog.NewTextHandler(&buf, nil)))
	el.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "memtable count limit reached"})
	el.WriteStallEnd()
	out := buf.String()
	for _, want := range []string{"level=WARN", `msg="pebble stopped writes" reason="memtable count limit reached"`, `msg="pebble resumed writes" stalled=`} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}
}

package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
)

// wheel and slot read a stopped node's data directory.
func TestOfflineReadsAStoppedNode(t *testing.T) {
	dataDir := t.TempDir()
	st, err := wheel.Open(filepath.Join(dataDir, "fsm"), wheel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const now = int64(1_700_000_000_000)
	sec := wheel.SecondOf(now)
	_, err = st.Apply([]wheel.Entry{
		{Index: 1, Cmds: []command.Command{command.Expire{Before: sec}}},
		{Index: 2, Cmds: []command.Command{command.Schedule{NowMs: now, Messages: []command.NewMessage{
			{Topic: "offline", Body: []byte("b"), DeliverAtMs: now + 5000},
			{Topic: "offline", Body: []byte("c"), DeliverAtMs: now + 5500},
		}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "wheel", "--data-dir", dataDir)
	if err != nil {
		t.Fatal(err)
	}
	slot := wheel.SlotOf(sec + 5)
	if !strings.Contains(out, "overflow messages:") || !strings.Contains(out, " 2 ") {
		t.Fatalf("wheel output lacks the slot with 2 messages:\n%s", out)
	}
	out, err = run(t, "slot", "--data-dir", dataDir, "--records", strconv.Itoa(slot))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(out, "message") < 2 || !strings.Contains(out, "offline") {
		t.Fatalf("slot output lacks its two message records:\n%s", out)
	}
}

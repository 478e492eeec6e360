package main

import (
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/transport/api"
)

func TestScheduleCommands(t *testing.T) {
	n := newNode(t, "")
	sched := func(args ...string) string {
		t.Helper()
		out, err := run(t, append(append([]string{"schedule"}, args...), "--addr", n.addr)...)
		if err != nil {
			t.Fatalf("schedule %v: %v\n%s", args, err, out)
		}
		return out
	}
	// startMs is Friday 2024-11-22 03:20 UTC.
	out := sched("set", "standup", "--topic", "reminders", "--cron", "0 50 8 * * MON-FRI", "--tz", "Europe/Berlin", "stand-up in 10")
	contains(t, out, "name:", "standup", `cron "0 50 8 * * MON-FRI" Europe/Berlin`, "next:", "2024-11-22T07:50:00.000Z", "last:", "-")
	out = sched("set", "tick", "--every", "1m", "--topic", "jobs", "--header", "a=b", "x")
	contains(t, out, "every 60000ms", "2024-11-22T03:20:00.000Z", "a=b")

	out = sched("ls", "--limit", "1")
	contains(t, out, "NAME", "standup", "more: --after standup")
	if strings.Contains(out, "tick") {
		t.Fatalf("limit 1 listed two:\n%s", out)
	}
	contains(t, sched("ls", "--after", "standup"), "tick", "every 60000ms")

	var s api.Schedule
	decodeJSON(t, sched("get", "standup", "--json"), &s)
	if s.Name != "standup" || s.NextAtMs == nil || *s.NextAtMs != 1732261800000 {
		t.Fatalf("get --json: %+v", s)
	}
	contains(t, sched("rm", "standup"), "removed:", "standup")
	if _, err := run(t, "schedule", "get", "standup", "--addr", n.addr); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("get after rm: %v", err)
	}
	_, err := run(t, "schedule", "set", "bad", "--topic", "t", "--cron", "0 9 * *", "x", "--addr", n.addr)
	if err == nil || !strings.Contains(err.Error(), "cron:") {
		t.Fatalf("bad cron: %v", err)
	}
	_, err = run(t, "schedule", "set", "bad", "x", "--topic")
	if err == nil || err.Error() != "delaywheel schedule set: --topic needs a value (see delaywheel schedule set --help)" {
		t.Fatalf("dangling flag: %v", err)
	}
}

package wheel

import (
	"errors"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

func mustRecurrence(t *testing.T, sp command.ScheduleSpec) *recurrence {
	t.Helper()
	if sp.Name == "" {
		sp.Name = "s"
	}
	if sp.Topic == "" {
		sp.Topic = "t"
	}
	r, err := newRecurrence(plainZones{}, &sp, 0)
	if err != nil {
		t.Fatalf("newRecurrence(%q): %v", sp.Cron, err)
	}
	return r
}

func at(t *testing.T, zone, wall string) int64 {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := time.ParseInLocation("2006-01-02 15:04:05", wall, loc)
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMilli()
}

func utc(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000Z") }

// occurrences returns the first n occurrences after from.
func occurrences(r *recurrence, from int64, n int) []string {
	var out []string
	for range n {
		from = r.after(from)
		if from == 0 {
			out = append(out, "none")
			break
		}
		out = append(out, utc(from))
	}
	return out
}

func TestCronParsing(t *testing.T) {
	from := at(t, "UTC", "2026-11-27 10:00:00") // a Friday
	for _, tc := range []struct {
		expr string
		want []string // first occurrences after from, UTC
		err  string
	}{
		{expr: "0 9 * * MON-FRI", want: []string{"2026-11-30 09:00:00.000Z", "2026-12-01 09:00:00.000Z"}},
		{expr: "30 0 9 * * MON-FRI", want: []string{"2026-11-30 09:00:30.000Z"}},
		{expr: "*/15 * * * * *", want: []string{"2026-11-27 10:00:15.000Z", "2026-11-27 10:00:30.000Z"}},
		{expr: "0 0 1 * *", want: []string{"2026-12-01 00:00:00.000Z", "2027-01-01 00:00:00.000Z"}},
		{expr: "0 12 29 2 *", want: []string{"2028-02-29 12:00:00.000Z"}},
		{expr: "@daily", want: []string{"2026-11-28 00:00:00.000Z"}},
		{expr: "@hourly", want: []string{"2026-11-27 11:00:00.000Z"}},
		{expr: "  0 10 * * *  ", want: []string{"2026-11-28 10:00:00.000Z"}},
		{expr: "0 0 31 2 *", want: []string{"none"}}, // never: the library gives up after five years
		{expr: "* * * *", err: "expected 5 to 6 fields"},
		{expr: "0 0 0 * * * *", err: "expected 5 to 6 fields"},
		{expr: "61 * * * *", err: "above maximum"},
		{expr: "0 25 * * *", err: "above maximum"},
		{expr: "0 9 * * FUNDAY", err: "cron"},
		{expr: "@every 1m", err: "use every_ms"},
		{expr: "TZ=Europe/Berlin 0 9 * * *", err: "timezone field"},
		{expr: "CRON_TZ=UTC 0 9 * * *", err: "timezone field"},
		{expr: "@yearly-ish", err: "cron"},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			sp := command.ScheduleSpec{Name: "s", Topic: "t", Cron: tc.expr}
			r, err := newRecurrence(plainZones{}, &sp, 0)
			if tc.err != "" {
				if !errors.Is(err, model.ErrInvalid) || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(strings.TrimPrefix(err.Error(), model.ErrInvalid.Error()+": "), "cron") {
					t.Fatalf("err = %v; want ErrInvalid naming cron, containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := occurrences(r, from, len(tc.want))
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("occurrences = %v; want %v", got, tc.want)
			}
		})
	}
}

// Each descriptor the API documents is accepted as a whole cron
// expression and fires at the start of its period in the schedule's time
// zone; any other word after @ is refused naming the cron field, with the
// list of those accepted.
func TestCronDescriptors(t *testing.T) {
	from := at(t, "UTC", "2026-11-27 10:00:00") // a Friday; 11:00 in Berlin
	documented := map[string]string{            // the first occurrence after from, Europe/Berlin (UTC+1)
		"@yearly":   "2026-12-31 23:00:00.000Z",
		"@annually": "2026-12-31 23:00:00.000Z",
		"@monthly":  "2026-11-30 23:00:00.000Z",
		"@weekly":   "2026-11-28 23:00:00.000Z", // Sunday's midnight
		"@daily":    "2026-11-27 23:00:00.000Z",
		"@midnight": "2026-11-27 23:00:00.000Z",
		"@hourly":   "2026-11-27 11:00:00.000Z",
	}
	if len(documented) != len(cronDescriptors) {
		t.Fatalf("documented %d descriptors, the parser takes %v", len(documented), cronDescriptors)
	}
	for _, d := range cronDescriptors {
		want, ok := documented[d]
		if !ok {
			t.Fatalf("%s is taken but not documented", d)
		}
		t.Run(d, func(t *testing.T) {
			sp := command.ScheduleSpec{Name: "s", Topic: "t", Cron: d, Timezone: "Europe/Berlin"}
			if err := ValidateSchedule(&sp, from); err != nil {
				t.Fatalf("refused: %v", err)
			}
			if got := occurrences(mustRecurrence(t, sp), from, 1); len(got) != 1 || got[0] != want {
				t.Fatalf("first occurrence %v, want %s", got, want)
			}
		})
	}
	for _, tc := range []struct{ expr, err string }{
		{"@fortnightly", "unrecognized descriptor"},
		{"@Daily", "unrecognized descriptor"},
		{"@daily 9", "unrecognized descriptor"},
		{"@every 1h", "use every_ms"},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			sp := command.ScheduleSpec{Name: "s", Topic: "t", Cron: tc.expr}
			err := ValidateSchedule(&sp, from)
			if !errors.Is(err, model.ErrInvalid) || !strings.HasPrefix(err.Error(), model.ErrInvalid.Error()+": cron: ") || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v; want ErrInvalid naming cron, containing %q", err, tc.err)
			}
			if tc.err == "use every_ms" {
				return
			}
			for _, d := range cronDescriptors {
				if !strings.Contains(err.Error(), d) {
					t.Errorf("err = %v; it does not list %s", err, d)
				}
			}
		})
	}
}

// TestCronDaylightSaving checks both transitions in two zones: a wall-clock
// time the clocks spring over is skipped that day (the library does so),
// and one that happens twice as they fall back fires once, at its first
// instant (the library matches both; recurrence corrects it).
func TestCronDaylightSaving(t *testing.T) {
	for _, tc := range []struct {
		name, zone, expr, from string
		want                   []string // wall-clock times in zone, with offsets
		libSecond              string   // what the library alone gives after the first
	}{
		{
			name: "Berlin spring forward skips 02:30", zone: "Europe/Berlin", expr: "30 2 * * *", from: "2026-03-28 12:00:00",
			want: []string{"2026-03-30 02:30:00 +0200", "2026-03-31 02:30:00 +0200"},
		},
		{
			name: "New York spring forward skips 02:30", zone: "America/New_York", expr: "30 2 * * *", from: "2026-03-07 12:00:00",
			want: []string{"2026-03-09 02:30:00 -0400", "2026-03-10 02:30:00 -0400"},
		},
		{
			name: "Berlin spring forward every minute goes on", zone: "Europe/Berlin", expr: "* * * * *", from: "2026-03-29 01:58:00",
			want: []string{"2026-03-29 01:59:00 +0100", "2026-03-29 03:00:00 +0200", "2026-03-29 03:01:00 +0200"},
		},
		{
			name: "Berlin fall back fires 02:30 once", zone: "Europe/Berlin", expr: "30 2 * * *", from: "2026-10-24 12:00:00",
			want:      []string{"2026-10-25 02:30:00 +0200", "2026-10-26 02:30:00 +0100"},
			libSecond: "2026-10-25 02:30:00 +0100",
		},
		{
			name: "New York fall back fires 01:30 once", zone: "America/New_York", expr: "30 1 * * *", from: "2026-10-31 12:00:00",
			want:      []string{"2026-11-01 01:30:00 -0400", "2026-11-02 01:30:00 -0500"},
			libSecond: "2026-11-01 01:30:00 -0500",
		},
		{
			name: "Berlin fall back hourly passes the repeated hour", zone: "Europe/Berlin", expr: "0 * * * *", from: "2026-10-25 01:30:00",
			want:      []string{"2026-10-25 02:00:00 +0200", "2026-10-25 03:00:00 +0100"},
			libSecond: "2026-10-25 02:00:00 +0100",
		},
		{
			name: "Berlin fall back every second skips the repeated hour", zone: "Europe/Berlin", expr: "* * * * * *", from: "2026-10-25 00:59:58Z", // 02:59:58 +0200
			want:      []string{"2026-10-25 02:59:59 +0200", "2026-10-25 03:00:00 +0100", "2026-10-25 03:00:01 +0100"},
			libSecond: "2026-10-25 02:00:00 +0100",
		},
		{
			name: "Lord Howe fall back by half an hour", zone: "Australia/Lord_Howe", expr: "45 1 * * *", from: "2026-04-04 12:00:00",
			want:      []string{"2026-04-05 01:45:00 +1100", "2026-04-06 01:45:00 +1030"},
			libSecond: "2026-04-05 01:45:00 +1030",
		},
		{
			name: "Lord Howe spring forward by half an hour", zone: "Australia/Lord_Howe", expr: "45 1 * * *", from: "2026-10-03 12:00:00",
			want:      []string{"2026-10-04 01:45:00 +1030", "2026-10-05 01:45:00 +1100"},
			libSecond: "2026-10-04 02:45:00 +1100", // the library's hour is wrong
		},
		{
			name: "New York fall back with seconds", zone: "America/New_York", expr: "15 45 1 * * *", from: "2026-10-31 12:00:00",
			want:      []string{"2026-11-01 01:45:15 -0400", "2026-11-02 01:45:15 -0500"},
			libSecond: "2026-11-01 01:45:15 -0500",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loc, _ := time.LoadLocation(tc.zone)
			r := mustRecurrence(t, command.ScheduleSpec{Cron: tc.expr, Timezone: tc.zone})
			var ms int64
			if wall, ok := strings.CutSuffix(tc.from, "Z"); ok {
				ms = at(t, "UTC", wall)
			} else {
				ms = at(t, tc.zone, tc.from)
			}
			for i, w := range tc.want {
				ms = r.after(ms)
				if got := time.UnixMilli(ms).In(loc).Format("2006-01-02 15:04:05 -0700"); got != w {
					t.Fatalf("occurrence %d = %s; want %s", i, got, w)
				}
				if i == 0 && tc.libSecond != "" {
					lib := r.spec.Next(time.UnixMilli(ms).In(loc)).In(loc).Format("2006-01-02 15:04:05 -0700")
					if lib != tc.libSecond {
						t.Errorf("the library's next = %s; this test documents %s", lib, tc.libSecond)
					}
				}
			}
		})
	}
}

// TestEveryDriftFree: occurrence k is at start + k·every_ms exactly, over
// 10,000 occurrences, whatever instant each is computed from.
func TestEveryDriftFree(t *testing.T) {
	const start, every = int64(1_700_000_000_123), int64(1_001)
	r := mustRecurrence(t, command.ScheduleSpec{EveryMs: every, StartAtMs: start})
	if got := r.after(0); got != start {
		t.Fatalf("first occurrence = %d; want the start %d", got, start)
	}
	ms := start
	for k := int64(1); k <= 10_000; k++ {
		ms = r.after(ms)
		if ms != start+k*every {
			t.Fatalf("occurrence %d = %d; want %d", k, ms, start+k*every)
		}
		// From any instant within the interval, the same occurrence follows.
		if mid := r.after(ms - every/2); mid != ms {
			t.Fatalf("after(%d) = %d; want %d", ms-every/2, mid, ms)
		}
	}
}

func TestEndAt(t *testing.T) {
	r := mustRecurrence(t, command.ScheduleSpec{EveryMs: 1000, StartAtMs: 10_000, EndAtMs: 12_000})
	if got := occurrences(r, 9_999, 4); strings.Join(got, ",") != utc(10_000)+","+utc(11_000)+","+utc(12_000)+",none" {
		t.Errorf("occurrences = %v", got)
	}
}

func TestValidateSchedule(t *testing.T) {
	good := command.ScheduleSpec{Name: "a-b_c.1", Topic: "t", Cron: "0 9 * * *", Timezone: "Europe/Berlin"}
	now := at(t, "UTC", "2026-01-01 00:00:00")
	if err := ValidateSchedule(&good, now); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	for _, tc := range []struct {
		field string
		edit  func(*command.ScheduleSpec)
	}{
		{"timezone", func(s *command.ScheduleSpec) { s.Timezone = "Mars/Olympus_Mons" }},
		{"timezone", func(s *command.ScheduleSpec) { s.Timezone = "Local" }},
		{"cron", func(s *command.ScheduleSpec) { s.Cron = "0 9 * *" }},
		{"cron, every_ms", func(s *command.ScheduleSpec) { s.EveryMs = 60_000 }},
		{"cron, every_ms", func(s *command.ScheduleSpec) { s.Cron = "" }},
		{"every_ms", func(s *command.ScheduleSpec) { s.Cron, s.Timezone, s.EveryMs = "", "", 999 }},
		{"timezone", func(s *command.ScheduleSpec) { s.Cron, s.EveryMs = "", 1000 }},
		{"end_at_ms", func(s *command.ScheduleSpec) { s.StartAtMs, s.EndAtMs = 2000, 1000 }},
		{"start_at_ms", func(s *command.ScheduleSpec) { s.StartAtMs = -1 }},
		{"name", func(s *command.ScheduleSpec) { s.Name = "" }},
		{"name", func(s *command.ScheduleSpec) { s.Name = "a/b" }},
		{"name", func(s *command.ScheduleSpec) { s.Name = strings.Repeat("x", MaxScheduleName+1) }},
		{"topic", func(s *command.ScheduleSpec) { s.Topic = "" }},
		// Schedules that would never fire.
		{"cron", func(s *command.ScheduleSpec) { s.Cron = "0 0 30 2 *" }},
		{"end_at_ms", func(s *command.ScheduleSpec) { s.Cron, s.Timezone, s.EveryMs, s.EndAtMs = "", "", 1000, now-1 }},
		{"end_at_ms", func(s *command.ScheduleSpec) { s.StartAtMs, s.EndAtMs = now, now+1000 }},
	} {
		sp := good
		tc.edit(&sp)
		err := ValidateSchedule(&sp, now)
		if !errors.Is(err, model.ErrInvalid) || !strings.HasPrefix(err.Error(), model.ErrInvalid.Error()+": "+tc.field+":") {
			t.Errorf("%+v: err = %v; want ErrInvalid naming %s", sp, err, tc.field)
		}
	}
}

// TestCronProperties walks random expressions in zones with daylight
// saving through two years: every occurrence is later than the one
// before, matches the expression's wall clock, is what the search from
// just before it finds, and no wall-clock time occurs twice.
func TestCronProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	exprs := []string{"*/7 * * * *", "30 2 * * *", "0 1-3 * * *", "15 */2 * * SUN", "0 0 29 2 *", "45 1 * * *", "*/20 59 1 * * *"}
	zones := []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Sao_Paulo", "UTC"}
	for range 40 {
		expr, zone := exprs[rng.Intn(len(exprs))], zones[rng.Intn(len(zones))]
		r := mustRecurrence(t, command.ScheduleSpec{Cron: expr, Timezone: zone})
		ms := at(t, "UTC", "2025-01-01 00:00:00") + rng.Int63n(2*365*86_400_000)
		seen := map[string]bool{}
		for range 500 {
			next := r.after(ms)
			if next == 0 {
				break
			}
			if next <= ms {
				t.Fatalf("%s in %s: after(%d) = %d, not later", expr, zone, ms, next)
			}
			if again := r.after(next - 1); again != next {
				t.Fatalf("%s in %s: after(%d) = %d; want %d", expr, zone, next-1, again, next)
			}
			tm := time.UnixMilli(next).In(r.loc)
			wall := tm.Format("2006-01-02 15:04:05")
			if seen[wall] {
				t.Fatalf("%s in %s: wall-clock time %s occurs twice", expr, zone, wall)
			}
			seen[wall] = true
			ms = next
		}
	}
}

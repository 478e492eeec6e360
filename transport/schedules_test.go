package transport_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
	"github.com/delaywheel/delaywheel/wheel"
)

func TestSchedulesRoundTrip(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	// startMs is Friday 2024-11-22 03:20 UTC, 04:20 in Berlin.
	s, err := e.c.SetSchedule(ctx, "standup", api.ScheduleRequest{Topic: "reminders", Cron: "0 50 8 * * MON-FRI",
		Timezone: "Europe/Berlin", Payload: api.TextBody("stand-up in 10 minutes")})
	check(t, "set", err)
	want := time.Date(2024, 11, 22, 7, 50, 0, 0, time.UTC).UnixMilli()
	if s.NextAtMs == nil || *s.NextAtMs != want || s.LastAtMs != nil || s.CreatedMs != e.now() {
		t.Fatalf("set: %+v; want next %d", s, want)
	}
	equal(t, "ttr default", s.TTRMs, int64(30_000))
	got, err := e.c.GetSchedule(ctx, "standup")
	check(t, "get", err)
	if got.Cron != s.Cron || *got.NextAtMs != want || string(*got.Body) != "stand-up in 10 minutes" {
		t.Fatalf("get: %+v", got)
	}
	for _, name := range []string{"b", "a", "c"} {
		_, err := e.c.SetSchedule(ctx, name, api.ScheduleRequest{Topic: "t", EveryMs: 60_000})
		check(t, "set "+name, err)
	}
	page, err := e.c.Schedules(ctx, "", 2)
	check(t, "list", err)
	if len(page.Schedules) != 2 || page.Schedules[0].Name != "a" || page.Schedules[1].Name != "b" || page.Next != "b" {
		t.Fatalf("first page: %+v", page)
	}
	page, err = e.c.Schedules(ctx, page.Next, 2)
	check(t, "list", err)
	if len(page.Schedules) != 2 || page.Schedules[0].Name != "c" || page.Schedules[1].Name != "standup" || page.Next != "" {
		t.Fatalf("second page: %+v", page)
	}
	if a := page.Schedules[0]; a.NextAtMs == nil || *a.NextAtMs != e.now() || a.StartAtMs != e.now() {
		t.Fatalf("every_ms without a start starts now: %+v", a)
	}
	check(t, "delete", e.c.DeleteSchedule(ctx, "standup"))
	var ce *client.Error
	if _, err := e.c.GetSchedule(ctx, "standup"); !asClientError(err, &ce) || ce.Status != http.StatusNotFound {
		t.Fatalf("get after delete: %v", err)
	}
	if err := e.c.DeleteSchedule(ctx, "standup"); !asClientError(err, &ce) || ce.Status != http.StatusNotFound {
		t.Fatalf("second delete: %v", err)
	}
}

// Each occurrence reaches a consumer as a message due at the occurrence's
// millisecond, keyed by it.
func TestScheduleOccurrenceDelivered(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	start := e.now() + 5000
	_, err := e.c.SetSchedule(ctx, "tick", api.ScheduleRequest{Topic: "jobs", EveryMs: 1000, StartAtMs: start, Payload: api.TextBody("x")})
	check(t, "set", err)
	var got []api.Delivery
	e.AdvanceUntil(t, 50*time.Millisecond, "two occurrences delivered", func() bool {
		ds, err := e.c.Reserve(ctx, "jobs", api.ReserveRequest{Max: api.Ptr(10)})
		check(t, "reserve", err)
		got = append(got, ds...)
		return len(got) >= 2
	})
	for k, d := range got[:2] {
		occ := start + int64(k)*1000
		if d.DeliverAtMs != occ || d.Key != wheel.OccurrenceKey("tick", occ) {
			t.Fatalf("delivery %d: due %d key %q; want %d", k, d.DeliverAtMs, d.Key, occ)
		}
	}
	s, err := e.c.GetSchedule(ctx, "tick")
	check(t, "get", err)
	if s.LastAtMs == nil || *s.LastAtMs < start+1000 || s.Fired < 2 {
		t.Fatalf("after two occurrences: %+v", s)
	}
}

// Each cron descriptor API.md and the OpenAPI document name is accepted
// and fires at the start of its period; another is a 400 naming cron.
func TestScheduleCronDescriptors(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	// The clock reads Friday 2024-11-22 03:20 UTC.
	day := func(y int, m time.Month, d, h int) int64 { return time.Date(y, m, d, h, 0, 0, 0, time.UTC).UnixMilli() }
	for _, tc := range []struct {
		cron string
		next int64
	}{
		{"@yearly", day(2025, 1, 1, 0)},
		{"@annually", day(2025, 1, 1, 0)},
		{"@monthly", day(2024, 12, 1, 0)},
		{"@weekly", day(2024, 11, 24, 0)}, // Sunday
		{"@daily", day(2024, 11, 23, 0)},
		{"@midnight", day(2024, 11, 23, 0)},
		{"@hourly", day(2024, 11, 22, 4)},
	} {
		t.Run(tc.cron, func(t *testing.T) {
			s, err := e.c.SetSchedule(ctx, "d", api.ScheduleRequest{Topic: "t", Cron: tc.cron})
			check(t, "set", err)
			if s.Cron != tc.cron || s.NextAtMs == nil || *s.NextAtMs != tc.next {
				t.Fatalf("set: %+v; want next %d", s, tc.next)
			}
		})
	}
	for _, bad := range []string{"@fortnightly", "@every 1h"} {
		t.Run(bad, func(t *testing.T) {
			a := e.do(http.MethodPut, "/v1/schedules/d", `{"topic":"t","cron":"`+bad+`"}`, "Content-Type", "application/json")
			if a.status != http.StatusBadRequest {
				t.Fatalf("status %d: %s", a.status, a.body)
			}
			if msg := a.errBody(t).Message; !strings.HasPrefix(msg, "cron: ") {
				t.Fatalf("message %q does not name cron", msg)
			}
		})
	}
}

// Bad input is answered 400 naming the field, and nothing is stored.
func TestScheduleBadInput(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name, path, body, field string
	}{
		{"unknown zone", "/v1/schedules/a", `{"topic":"t","cron":"0 9 * * *","timezone":"Europe/Atlantis"}`, "timezone:"},
		{"malformed cron", "/v1/schedules/a", `{"topic":"t","cron":"0 9 * *"}`, "cron:"},
		{"seconds out of range", "/v1/schedules/a", `{"topic":"t","cron":"61 0 9 * * *"}`, "cron:"},
		{"both", "/v1/schedules/a", `{"topic":"t","cron":"0 9 * * *","every_ms":60000}`, "cron, every_ms:"},
		{"neither", "/v1/schedules/a", `{"topic":"t"}`, "cron, every_ms:"},
		{"every_ms too short", "/v1/schedules/a", `{"topic":"t","every_ms":999}`, "every_ms:"},
		{"end before start", "/v1/schedules/a", `{"topic":"t","every_ms":1000,"start_at_ms":2000,"end_at_ms":1000}`, "end_at_ms:"},
		{"never matches", "/v1/schedules/a", `{"topic":"t","cron":"0 0 30 2 *"}`, "cron:"},
		{"ended already", "/v1/schedules/a", `{"topic":"t","every_ms":1000,"end_at_ms":1}`, "end_at_ms: 1 is already past"},
		{"every_ms zero", "/v1/schedules/a", `{"topic":"t","every_ms":0}`, "every_ms at least 1000"},
		{"bad name", "/v1/schedules/a%20b", `{"topic":"t","every_ms":1000}`, "name:"},
		{"long name", "/v1/schedules/" + strings.Repeat("n", wheel.MaxScheduleName+1), `{"topic":"t","every_ms":1000}`, "name:"},
		{"no topic", "/v1/schedules/a", `{"every_ms":1000}`, "topic:"},
		{"bad ttr", "/v1/schedules/a", `{"topic":"t","every_ms":1000,"ttr_ms":-1}`, "ttr_ms:"},
		{"bad max_attempts", "/v1/schedules/a", `{"topic":"t","every_ms":1000,"max_attempts":0}`, "max_attempts:"},
		{"unknown field", "/v1/schedules/a", `{"topic":"t","every_ms":1000,"colour":"red"}`, `unknown field "colour"`},
		{"field twice", "/v1/schedules/a", `{"topic":"t","every_ms":1000,"topic":"u"}`, "topic: given more than once"},
		{"field in another case", "/v1/schedules/a", `{"topic":"t","every_ms":1000,"Every_ms":5000}`, `request body: unknown field "Every_ms"`},
		{"header twice", "/v1/schedules/a", `{"topic":"t","every_ms":1000,"headers":{"X-A":"1","X-A":"2"}}`, `headers["X-A"]: given more than once`},
		{"body not UTF-8", "/v1/schedules/a", `{"topic":"t","every_ms":1000,"body":"` + "\xff" + `"}`, `body: must be valid UTF-8; send other bytes as "body_base64"`},
		{"header name not a token", "/v1/schedules/a", `{"topic":"t","every_ms":1000,"headers":{"X A":"v"}}`, `headers["X A"]: name is not an HTTP token`},
		{"header value with CR LF", "/v1/schedules/a", `{"topic":"t","every_ms":1000,"headers":{"X-A":"a\r\nb"}}`, `headers["X-A"]: value holds`},
		{"header Host", "/v1/schedules/a", `{"topic":"t","every_ms":1000,"headers":{"Host":"h"}}`, `headers["Host"]: name is reserved`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := e.do(http.MethodPut, tc.path, tc.body, "Content-Type", "application/json")
			if a.status != http.StatusBadRequest {
				t.Fatalf("status %d: %s", a.status, a.body)
			}
			if msg := a.errBody(t).Message; !strings.Contains(msg, tc.field) {
				t.Fatalf("message %q does not name %q", msg, tc.field)
			}
		})
	}
	list, err := e.c.Schedules(t.Context(), "", 0)
	check(t, "list", err)
	if len(list.Schedules) != 0 || e.topicCount() != 0 {
		t.Fatalf("refused requests stored something: %+v, %d topics", list, e.topicCount())
	}
	if a := e.do(http.MethodGet, "/v1/schedules?limit=0", ""); a.status != http.StatusBadRequest || !strings.Contains(a.errBody(t).Message, "limit") {
		t.Fatalf("limit=0: %d %s", a.status, a.body)
	}
}

// GET /v1/schedules?topic= lists only that topic's schedules, paged in
// name order like the whole list; a malformed topic is refused.
func TestSchedulesOfOneTopic(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	for name, topic := range map[string]string{"a": "orders", "b": "email", "c": "orders", "d": "email", "e": "orders"} {
		_, err := e.c.SetSchedule(ctx, name, api.ScheduleRequest{Topic: topic, EveryMs: 60_000})
		check(t, "set "+name, err)
	}
	names := func(l api.ScheduleList) string {
		var out []string
		for _, s := range l.Schedules {
			out = append(out, s.Name+":"+s.Topic)
		}
		return strings.Join(out, ",")
	}
	page, err := e.c.TopicSchedules(ctx, "orders", "", 2)
	check(t, "first page", err)
	equal(t, "first page", names(page), "a:orders,c:orders")
	equal(t, "first page's next", page.Next, "c")
	page, err = e.c.TopicSchedules(ctx, "orders", page.Next, 2)
	check(t, "second page", err)
	equal(t, "second page", names(page), "e:orders")
	equal(t, "second page's next", page.Next, "")
	page, err = e.c.TopicSchedules(ctx, "email", "", 0)
	check(t, "email", err)
	equal(t, "email", names(page), "b:email,d:email")
	page, err = e.c.TopicSchedules(ctx, "nobody", "", 0)
	check(t, "a topic without schedules", err)
	if page.Schedules == nil || len(page.Schedules) != 0 || page.Next != "" {
		t.Fatalf("a topic without schedules: %+v", page)
	}
	if a := e.do(http.MethodGet, "/v1/schedules?topic=a%20b", ""); a.status != http.StatusBadRequest || !strings.Contains(a.errBody(t).Message, "topic") {
		t.Fatalf("a malformed topic: %d %s", a.status, a.body)
	}
	if a := e.do(http.MethodGet, "/v1/schedules?topic=", ""); a.status != http.StatusBadRequest || !strings.Contains(a.errBody(t).Message, "topic") {
		t.Fatalf("an empty topic: %d %s", a.status, a.body)
	}
}

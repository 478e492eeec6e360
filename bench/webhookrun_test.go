package bench

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestAccountWebhook(t *testing.T) {
	//                 0     1     2     3      4     5
	sent := []bool{true, true, true, true, false, true}
	answered := []bool{true, false, true, false, false, false}
	for _, tc := range []struct {
		name   string
		dead   int64
		listed []deadLetter
		want   WebhookAccount
	}{
		{"nothing dead: the unanswered are lost", 0, nil,
			WebhookAccount{Sent: 5, Answered: 2, Lost: 3}},
		{"every unanswered one dead after max_attempts", 3, []deadLetter{{1, 10}, {3, 10}, {5, 10}},
			WebhookAccount{Sent: 5, Answered: 2, Dead: 3, DeadListed: 3}},
		{"one dead too early, one lost", 2, []deadLetter{{1, 10}, {3, 9}},
			WebhookAccount{Sent: 5, Answered: 2, Dead: 2, Lost: 1, DeadListed: 2, AttemptViolations: 1}},
		{"a dead letter answered 2xx counts once", 3, []deadLetter{{0, 10}, {1, 10}, {3, 10}},
			WebhookAccount{Sent: 5, Answered: 2, Dead: 3, Lost: 1, DeadListed: 3, AnsweredAndDead: 1}},
		{"dead letters of no message sent count for none", 3, []deadLetter{{1, 10}, {4, 10}, {-1, 10}},
			WebhookAccount{Sent: 5, Answered: 2, Dead: 3, Lost: 2, DeadListed: 3, ForeignDead: 2}},
		{"a listing cut short: counted from the topic's dead count", 3, []deadLetter{{1, 10}},
			WebhookAccount{Sent: 5, Answered: 2, Dead: 3, DeadListed: 1}},
	} {
		if got := accountWebhook(sent, answered, tc.dead, tc.listed, 10); got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func TestWebhookDrain(t *testing.T) {
	for _, tc := range []struct {
		attempts int
		want     time.Duration
	}{
		{1, 30 * time.Second},                  // no retry
		{2, 31 * time.Second},                  // 1 s
		{4, 37 * time.Second},                  // 1 + 2 + 4 s
		{10, 511*time.Second + 30*time.Second}, // 1 + … + 256 s
		{maxMaxAttempts, time.Hour + 30*time.Second},
	} {
		if got := webhookDrain(tc.attempts); got != tc.want {
			t.Errorf("webhookDrain(%d) = %s, want %s", tc.attempts, got, tc.want)
		}
	}
}

func TestSummarizeHold(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	samples := []holdSample{
		{at(0), 0, []int64{10, 20}}, // before the window
		{at(1), 100, []int64{11, -1}},
		{at(2), -1, []int64{15, 21}}, // the scrape failed
		{at(3), 97, []int64{14, 22}},
		{at(4), 100, []int64{12, 23}},
	}
	got := summarizeHold(samples, at(1), []string{"n1", "n2"})
	want := WebhookHold{InflightMetric: webhookInflightMetric, InflightMin: 97, InflightMax: 100, InflightSamples: 3, RSS: []NodeRSS{
		{Node: "n1", StartBytes: 11, MiddleBytes: 14, EndBytes: 12, MaxBytes: 15},
		{Node: "n2", StartBytes: 21, MiddleBytes: 22, EndBytes: 23, MaxBytes: 23},
	}}
	if got.InflightMin != want.InflightMin || got.InflightMax != want.InflightMax || got.InflightSamples != want.InflightSamples ||
		len(got.RSS) != 2 || got.RSS[0] != want.RSS[0] || got.RSS[1] != want.RSS[1] {
		t.Fatalf("summarizeHold:\n got %+v\nwant %+v", got, want)
	}
	empty := summarizeHold(nil, at(1), []string{"n1"})
	if empty.InflightSamples != 0 || empty.InflightMin != -1 || empty.InflightMax != -1 || empty.RSS[0].StartBytes != -1 {
		t.Fatalf("summarizeHold of no sample: %+v", empty)
	}
}

// TestReceiverHangs: a hanging receiver holds a request until it closes,
// then answers it with a failure, never a 2xx that would ack it.
func TestReceiverHangs(t *testing.T) {
	r, err := startReceiver(0, true)
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan int, 1)
	go func() {
		resp, err := http.Post(r.url, "text/plain", strings.NewReader("7|x"))
		if err != nil {
			answered <- -1
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	for r.requests.Load() == 0 {
		select {
		case code := <-answered:
			t.Fatalf("answered %d before the receiver closed", code)
		case <-time.After(time.Millisecond):
		}
	}
	if err := r.close(); err != nil {
		t.Fatal(err)
	}
	if code := <-answered; code != http.StatusServiceUnavailable {
		t.Fatalf("hung request answered %d, want 503", code)
	}
	if r.ok.Load() != 0 {
		t.Fatalf("%d requests counted answered 2xx", r.ok.Load())
	}
}

func TestWriteWebhook(t *testing.T) {
	var b strings.Builder
	writeWebhook(&b, "dw", &WebhookResult{MaxConcurrency: 100, MaxAttempts: 10, FailRate: 0.2, Requests: 12, Answered2xx: 10, Answered500: 2,
		Account: &WebhookAccount{Sent: 10, Answered: 9, Dead: 1, DeadListed: 1}, DrainS: 3, DrainLimitS: 541})
	for _, want := range []string{"sent 10 = answered 2xx 9 + dead 1 + lost 0", "attempts ≠ max_attempts 0", "accounted for 3.0 s after"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("fail-rate summary lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	writeWebhook(&b, "dw", &WebhookResult{MaxConcurrency: 100, MaxAttempts: 10, FailRate: 0.2, DrainS: 541, DrainLimitS: 541, DrainTimedOut: true,
		Account: &WebhookAccount{Sent: 10, Answered: 8, Lost: 2, Delayed: 2}})
	if want := "still pending 2 (delayed for a retry 2"; !strings.Contains(b.String(), want) {
		t.Errorf("timed-out summary lacks %q:\n%s", want, b.String())
	}
	b.Reset()
	writeWebhook(&b, "dw", &WebhookResult{MaxConcurrency: 100, Hang: true, NotApplicable: "lateness and lost do not apply",
		Hold: &WebhookHold{InflightMetric: webhookInflightMetric, InflightMin: 100, InflightMax: 100, InflightSamples: 50,
			RSS: []NodeRSS{{Node: "n1", Leader: true, StartBytes: 1 << 20, MiddleBytes: 1 << 20, EndBytes: 1 << 20, MaxBytes: 1 << 20}}}})
	for _, want := range []string{"min 100, max 100 (max_concurrency 100)", "n1 (leader)", "1.0 MiB", "lateness and lost do not apply"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("hang summary lacks %q:\n%s", want, b.String())
		}
	}
}

package console_test

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

var screenshots = flag.String("screenshots", "", "write the console's screenshots (PNG) to this directory; default: a temporary one")

// screenshotMessagesEnv sizes the backlog of TestConsoleScreenshots,
// defaultScreenshotMessages unless set.
const (
	screenshotMessagesEnv     = "DELAYWHEEL_SCREENSHOT_MESSAGES"
	defaultScreenshotMessages = 4000
)

// TestConsoleScreenshots takes a PNG of each view of the console (wheel,
// message, topics, topic, cluster) on a three-node cluster holding a
// backlog over many slots and topics: 60% of it within the two-hour
// wheel in bursts, 35% in the overflow over the week beyond it with a
// daily rhythm, 5% up to a year ahead; plus dead letters, a webhook and
// two schedules on one topic (payments.webhook), so that every view is
// populated.
//
// The backlog is 4,000 messages unless DELAYWHEEL_SCREENSHOT_MESSAGES
// says otherwise, so that the package's tests stay fast. The PNGs go to
// the directory given by -screenshots (created if need be), or to a
// temporary one removed after the test; the test logs which. With a
// realistic backlog of a million messages:
//
//	DELAYWHEEL_SCREENSHOT_MESSAGES=1000000 go test ./transport/console \
//		-run TestConsoleScreenshots -count=1 -timeout 30m -v -args -screenshots=$PWD/screenshots
//
// (-args must come last: what follows it goes to the test binary, and a
// relative directory would be taken from the package's directory.)
func TestConsoleScreenshots(t *testing.T) {
	chromium(t)
	total := defaultScreenshotMessages
	if v := os.Getenv(screenshotMessagesEnv); v != "" {
		var err error
		if total, err = strconv.Atoi(v); err != nil || total < 100 {
			t.Fatalf("%s=%q: want a number of messages of at least 100", screenshotMessagesEnv, v)
		}
	}
	dir := *screenshots
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	// Writing the backlog on a busy machine may hold up heartbeats past
	// the default timeouts, and the leader would step down meanwhile.
	opts := transporttest.Options{Server: func(cfg *transport.Config) { cfg.Gatherer = reg },
		Replication: func(cfg *replication.Config) {
			cfg.HeartbeatTimeout, cfg.ElectionTimeout = 2*time.Second, 2*time.Second
		}}
	c := transporttest.StartCluster(t, 3, opts)
	n := c.Leader()
	reg.MustRegister(n.Node.Collector())
	tctx := t.Context()
	enqueue := func(msgs []api.Message) []api.Result {
		t.Helper()
		res, err := n.Client.Enqueue(tctx, msgs)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	// The backlog: 40 topics, most messages within the two-hour wheel in
	// bursts, the rest beyond it: the next week with a daily rhythm, and a
	// few up to a year ahead. Enqueued in batches of the API's largest.
	rng := rand.New(rand.NewPCG(1, 2))
	var topics []string
	for _, a := range []string{"orders", "billing", "email", "reports", "search", "carts", "invoices", "sms"} {
		for _, b := range []string{"close", "retry", "reminder", "expire", "sync"} {
			topics = append(topics, a+"."+b)
		}
	}
	const batch = 2000
	var res []api.Result // of the first batch
	start := time.Now()
	for done := 0; done < total; {
		var msgs []api.Message
		for i := done; i < min(total, done+batch); i++ {
			var delay int64
			switch {
			case i%20 < 12: // the wheel: bursts around a few minutes of the two hours
				burst := int64(rng.IntN(12)) * 600_000
				delay = 5_000 + burst + int64(math.Abs(rng.NormFloat64())*120_000)
			case i%20 < 19: // the overflow: the week ahead, busier in the day
				day := int64(rng.IntN(7)) * 86_400_000
				delay = 2*3_600_000 + day + int64(rng.NormFloat64()*3*3_600_000+10*3_600_000)
			default: // months ahead
				delay = 8*86_400_000 + rng.Int64N(357*86_400_000)
			}
			delay = max(delay, 1000)
			msgs = append(msgs, api.Message{Topic: topics[rng.IntN(len(topics))], Payload: api.TextBody(fmt.Sprintf(`{"order":%d}`, i)),
				DelayMs: api.Ptr(delay), Key: fmt.Sprintf("k-%d", i)})
		}
		r := enqueue(msgs)
		if res == nil {
			res = r
		}
		done += len(msgs)
	}
	t.Logf("backlog of %d messages enqueued in %v", total, time.Since(start).Round(time.Millisecond))
	// The browser's time runs from here: a large backlog takes a while.
	ctx := browser(t)

	shot := func(name string) {
		t.Helper()
		png := value(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
		if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The wheel, with the busiest slot opened.
	w, err := n.Client.Wheel(tctx)
	if err != nil {
		t.Fatal(err)
	}
	top := w.NonEmpty[0]
	for _, s := range w.NonEmpty {
		if s.Messages > top.Messages {
			top = s
		}
	}
	run(t, ctx, "open the wheel",
		chromedp.Navigate(n.URL+"/ui/#wheel"),
		waitJS(textHas("#overflow-info", "beyond the horizon")),
		waitJS(textHas("#node", "node "+n.ID)),
		clickSlot(top.Slot),
		waitJS(textHas("#slot-panel", fmt.Sprintf("Slot %d", top.Slot))),
	)
	shot("wheel")

	run(t, ctx, "open a message",
		chromedp.Navigate(n.URL+"/ui/#message/"+res[7].ID),
		waitJS(textHas("#message-fields", res[7].ID)),
	)
	shot("message")

	// Dead letters: payments whose consumer never acked them.
	var dead []api.Message
	for i := range 25 {
		dead = append(dead, api.Message{Topic: "payments.webhook", Payload: api.TextBody(fmt.Sprintf(`{"payment":%d,"status":"captured"}`, i)),
			MaxAttempts: api.Ptr(int32(1)), TTRMs: api.Ptr(int64(1)), Key: fmt.Sprintf("pay-%d", i)})
	}
	enqueue(dead)
	if _, err := n.Client.Reserve(tctx, "payments.webhook", api.ReserveRequest{Max: api.Ptr(25)}); err != nil {
		t.Fatal(err)
	}
	n.AdvanceUntil(t, 100*time.Millisecond, "the payments to go dead", func() bool {
		d, err := n.Client.Dead(tctx, "payments.webhook", 0)
		return err == nil && len(d) == 25
	})

	// Then the topic gets a webhook, which answers, and two schedules: one
	// that fires at once (its occurrence goes to the webhook) and one
	// nightly.
	var hooked atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hooked.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	if _, err := n.Client.SetWebhook(tctx, "payments.webhook", api.WebhookRequest{URL: hook.URL + "/hooks/payments",
		TimeoutMs: api.Ptr(int64(5_000)), MaxConcurrency: api.Ptr(int64(32)), RatePerS: api.Ptr(int64(200)), Secret: "whsec"}); err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]api.ScheduleRequest{
		"payments-settle-nightly": {Topic: "payments.webhook", Cron: "0 30 2 * * *", Timezone: "Europe/Berlin", Payload: api.TextBody(`{"settle":true}`)},
		"payments-reconcile":      {Topic: "payments.webhook", EveryMs: 15 * 60_000, Payload: api.TextBody(`{"reconcile":true}`)},
	} {
		if _, err := n.Client.SetSchedule(tctx, name, req); err != nil {
			t.Fatal(err)
		}
	}
	n.AdvanceUntil(t, 100*time.Millisecond, "the first reconcile to reach the webhook", func() bool {
		s, err := n.Client.GetSchedule(tctx, "payments-reconcile")
		if err != nil || s.Fired == 0 || hooked.Load() == 0 {
			return false
		}
		ts, err := n.Client.Topics(tctx)
		for _, c := range ts {
			if c.Topic == "payments.webhook" {
				return err == nil && c.Ready == 0 && c.Reserved == 0
			}
		}
		return false
	})

	// Topics: traffic on a few topics, one poll of the page per round, so
	// that the sparklines have points and the lateness has deliveries.
	run(t, ctx, "open the topics",
		chromedp.Navigate(n.URL+"/ui/#topics"),
		waitJS(`document.querySelectorAll('#topic-table tbody tr').length > 0`),
		chromedp.SetValue(chromedp.ID("topic-sort"), "rate"),
	)
	busy := []string{"orders.close", "email.reminder", "billing.retry", "sms.sync"}
	for round := range 10 {
		var now []api.Message
		for i, topic := range busy {
			for j := range 20 * (i + 1) * (1 + round%3) {
				now = append(now, api.Message{Topic: topic, Payload: api.TextBody(fmt.Sprintf("tick %d/%d", round, j))})
			}
		}
		enqueue(now)
		n.Clock.Advance(time.Duration(50+rng.IntN(400)) * time.Millisecond)
		for _, topic := range busy[:3] {
			ds, err := n.Client.Reserve(tctx, topic, api.ReserveRequest{Max: api.Ptr(40 + 30*round%90)})
			if err != nil {
				t.Fatal(err)
			}
			var rs []string
			for _, d := range ds {
				rs = append(rs, d.Receipt)
			}
			if len(rs) > 0 {
				if _, err := n.Client.Ack(tctx, rs); err != nil {
					t.Fatal(err)
				}
			}
		}
		run(t, ctx, "a poll of the topics",
			waitJS(fmt.Sprintf(`(document.querySelector('#topic-table polyline')?.getAttribute('points') || '').split(' ').length >= %d`, round+1)))
	}
	shot("topics")

	run(t, ctx, "open the topic",
		chromedp.SetValue(chromedp.ID("topic-filter"), "payments"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('topic-filter').dispatchEvent(new Event('input'))`),
		chromedp.Click(chromedp.CSS(`tr[data-topic="payments.webhook"] .topic-open`)),
		waitJS(`document.querySelectorAll('#dead-table .dead-pick').length === 25`),
		waitJS(textHas("#topic-webhook", "/hooks/payments")),
		waitJS(`document.querySelectorAll('#schedule-table tr[data-schedule]').length === 2`),
		chromedp.Click(chromedp.CSS(`#dead-table tbody tr:nth-child(2) .dead-pick`)),
		chromedp.Click(chromedp.CSS(`#dead-table tbody tr:nth-child(5) .dead-pick`)),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('topic-panel').scrollIntoView()`),
	)
	shot("topic")

	run(t, ctx, "open the cluster",
		chromedp.Navigate(n.URL+"/ui/#cluster"),
		waitJS(`document.querySelectorAll('#cluster-table tbody tr').length === 3`),
		// The leader may have changed under the load: any will do.
		waitJS(`/^n\d$/.test(document.querySelector('#group-table tr[data-group="0"] [data-field="leader"]')?.textContent)`),
		waitJS(textHas("#node", "node "+n.ID)),
	)
	shot("cluster")
	t.Logf("screenshots in %s", dir)
}

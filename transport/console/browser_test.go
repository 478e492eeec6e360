package console_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/transporttest"
	"github.com/delaywheel/delaywheel/wheel"
)

// chromium returns the path of Chromium, or skips the test when the
// machine has none.
func chromium(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium not found: install Debian's chromium package to run the console's browser tests")
	}
	return path
}

// browser starts headless Chromium for one test, or skips the test when
// the machine has none. Its actions must be done within 90 s.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1440, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	return ctx
}

// run runs browser actions, failing the test on an error.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// value runs one browser action that returns a value.
func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// waitJS waits until the JavaScript expression is true.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond))
}

// textHas is a JavaScript test that the element sel holds s.
func textHas(sel, s string) string {
	return fmt.Sprintf(`(document.querySelector(%q)?.textContent || '').includes(%q)`, sel, s)
}

// clickSlot clicks the cell of slot on the wheel's canvas.
func clickSlot(slot int) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		type rect struct{ X, Y, W, H float64 }
		r, err := chromedp.Evaluate[rect](`(() => { const r = document.getElementById('wheel-canvas').getBoundingClientRect();
			return {X: r.left, Y: r.top, W: r.width, H: r.height}; })()`)(ctx, t)
		if err != nil {
			return err
		}
		x := r.X + (float64(slot%120)+0.5)*r.W/120
		y := r.Y + (float64(slot/120)+0.5)*r.H/60
		_, err = chromedp.MouseClickXY(x, y)(ctx, t)
		return err
	})
}

// slotPainted is a JavaScript test that the canvas cell of slot is not
// the colour of an empty slot.
func slotPainted(slot int) string {
	return fmt.Sprintf(`(() => { const c = document.getElementById('wheel-canvas');
		const w = c.width / 120, h = c.height / 60;
		const p = c.getContext('2d').getImageData(Math.floor((%d %% 120) * w + w / 2), Math.floor(Math.floor(%d / 120) * h + h / 2), 1, 1).data;
		return !(p[0] === 0x1a && p[1] === 0x22 && p[2] === 0x2c); })()`, slot, slot)
}

func TestConsoleWheelShowsSlotAfterPush(t *testing.T) {
	ctx := browser(t)
	n := transporttest.Start(t, transporttest.Options{})
	res, err := n.Client.Enqueue(t.Context(), []api.Message{{Topic: "w", Payload: api.TextBody("hello"), DelayMs: api.Ptr(int64(90_000))}})
	if err != nil {
		t.Fatal(err)
	}
	slot := wheel.SlotOf(res[0].DeliverAtMs / 1000)
	run(t, ctx, "open the wheel",
		chromedp.Navigate(n.URL+"/ui/#wheel"),
		waitJS(textHas("#wheel-stats", "slots holding files")),
		waitJS(slotPainted(slot)),
	)
	stats := value(t, ctx, "read the stats", chromedp.TextContent(chromedp.ID("wheel-stats")))
	if !strings.Contains(stats, "1slots holding files") || !strings.Contains(stats, "1messages in the wheel") {
		t.Fatalf("wheel stats %q: want one slot holding one message", stats)
	}
	run(t, ctx, "click the slot",
		clickSlot(slot),
		waitJS(textHas("#slot-records", res[0].ID)),
		waitJS(textHas("#slot-panel", fmt.Sprintf("Slot %d", slot))),
		waitJS(textHas("#slot-records", strconv.FormatInt(res[0].DeliverAtMs, 10))),
	)
}

func TestConsoleRedriveDeadLetters(t *testing.T) {
	ctx := browser(t)
	n := transporttest.Start(t, transporttest.Options{})
	tctx := t.Context()
	dead := func(topic string, count int) []api.Result {
		t.Helper()
		var msgs []api.Message
		for i := range count {
			msgs = append(msgs, api.Message{Topic: topic, Payload: api.TextBody(fmt.Sprintf("m%d", i)),
				MaxAttempts: api.Ptr(int32(1)), TTRMs: api.Ptr(int64(1))})
		}
		res, err := n.Client.Enqueue(tctx, msgs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.Client.Reserve(tctx, topic, api.ReserveRequest{Max: api.Ptr(count)}); err != nil {
			t.Fatal(err)
		}
		n.AdvanceUntil(t, 100*time.Millisecond, "the messages to go dead", func() bool {
			d, err := n.Client.Dead(tctx, topic, 0)
			return err == nil && len(d) == count
		})
		return res
	}
	res := dead("orders.close", 3)
	counts := func() api.TopicCounts {
		t.Helper()
		ts, err := n.Client.Topics(tctx)
		if err != nil || len(ts) != 1 {
			t.Fatalf("topics %+v, %v", ts, err)
		}
		return ts[0]
	}

	row := `tr[data-topic="orders.close"]`
	run(t, ctx, "open the dead letters",
		chromedp.Navigate(n.URL+"/ui/#topics"),
		chromedp.WaitVisible(chromedp.CSS(row+" .topic-open")),
		chromedp.Click(chromedp.CSS(row+" .topic-open")),
		waitJS(`document.querySelectorAll('#dead-table .dead-pick').length === 3`),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`.dead-pick[data-id=%q]`, res[1].ID))),
		chromedp.Click(chromedp.CSS("#redrive-selected")),
		waitJS(textHas("#dead-result", "redriven 1")),
		waitJS(`document.querySelectorAll('#dead-table .dead-pick').length === 2`),
	)
	if c := counts(); c.Dead != 2 || c.Ready != 1 {
		t.Fatalf("after redriving one: %+v, want 2 dead and 1 ready", c)
	}
	if v, err := n.Client.Get(tctx, res[1].ID); err != nil || v.State != api.StateReady {
		t.Fatalf("the redriven message: %+v, %v", v, err)
	}
	run(t, ctx, "redrive all",
		chromedp.Click(chromedp.CSS("#redrive-all")),
		waitJS(textHas("#dead-result", "redriven 2")),
		waitJS(`document.querySelectorAll('#dead-table .dead-pick').length === 0`),
	)
	if c := counts(); c.Dead != 0 || c.Ready != 3 {
		t.Fatalf("after redriving all: %+v, want 3 ready", c)
	}
}

func TestConsoleTokenPrompt(t *testing.T) {
	ctx := browser(t)
	const token = "console-test-token"
	n := transporttest.Start(t, transporttest.Options{Server: func(c *transport.Config) { c.AuthToken = token }})
	run(t, ctx, "open the console",
		chromedp.Navigate(n.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.ID("#token-dialog")),
	)
	run(t, ctx, "a wrong token is asked again",
		chromedp.SendKeys(chromedp.ID("token-input"), "wrong"),
		chromedp.Click(chromedp.ID("#token-submit")),
		waitJS(textHas("#token-error", "refused")),
	)
	run(t, ctx, "enter the token",
		chromedp.SendKeys(chromedp.ID("token-input"), token),
		chromedp.Click(chromedp.ID("#token-submit")),
		waitJS(`!document.getElementById('token-dialog').open`),
		waitJS(textHas("#wheel-stats", "cursor")),
		waitJS(textHas("#node", "node n1")),
	)
	stored := value(t, ctx, "the stored token", chromedp.Evaluate[string](`sessionStorage.getItem('delaywheel.token')`))
	local := value(t, ctx, "the local storage", chromedp.Evaluate[string](`JSON.stringify(localStorage)`))
	if stored != token || strings.Contains(local, token) {
		t.Fatalf("token in sessionStorage %q, localStorage %s: want it in the session only", stored, local)
	}
}

func TestConsoleMessageLookupRescheduleCancel(t *testing.T) {
	ctx := browser(t)
	n := transporttest.Start(t, transporttest.Options{})
	tctx := t.Context()
	res, err := n.Client.Enqueue(tctx, []api.Message{{Topic: "orders.close", Payload: api.TextBody("order 42"), Key: "order-42", DelayMs: api.Ptr(int64(60_000))}})
	if err != nil {
		t.Fatal(err)
	}
	id := res[0].ID
	run(t, ctx, "look the message up by topic and key",
		chromedp.Navigate(n.URL+"/ui/#message"),
		chromedp.SendKeys(chromedp.ID("key-topic"), "orders.close"),
		chromedp.SendKeys(chromedp.ID("key-key"), "order-42"),
		chromedp.Click(chromedp.ID("key-lookup")),
		waitJS(textHas("#message-fields", id)),
		waitJS(textHas("#message-fields", "delayed")),
	)
	run(t, ctx, "reschedule it",
		chromedp.SendKeys(chromedp.ID("resched-delay"), "3600"),
		chromedp.Click(chromedp.ID("resched-button")),
		waitJS(textHas("#message-result", "rescheduled to")),
	)
	v, err := n.Client.Get(tctx, id)
	if want := n.Clock.Now().UnixMilli() + 3_600_000; err != nil || v.DeliverAtMs != want {
		t.Fatalf("after the reschedule: %+v, %v; want due at %d", v, err, want)
	}
	run(t, ctx, "cancel it",
		waitJS(textHas("#message-fields", strconv.FormatInt(v.DeliverAtMs, 10))),
		chromedp.Click(chromedp.ID("cancel-message")),
		waitJS(textHas("#message-detail", "No pending message has this id")),
	)
	if _, err := n.Client.Get(tctx, id); err == nil {
		t.Fatal("the cancelled message is still pending")
	}
}

func TestConsoleTenThousandTopics(t *testing.T) {
	ctx := browser(t)
	n := transporttest.Start(t, transporttest.Options{})
	var msgs []api.Message
	for i := range 10_000 {
		msgs = append(msgs, api.Message{Topic: fmt.Sprintf("tenant-%05d.jobs", i), Payload: api.TextBody("x"), DelayMs: api.Ptr(int64(i%7200) * 1000)})
	}
	if _, err := n.Client.Enqueue(t.Context(), msgs); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "page and filter the topics",
		chromedp.Navigate(n.URL+"/ui/#topics"),
		waitJS(textHas("#topic-count", "10,000 of 10,000 topics")),
		waitJS(textHas("#topic-page", "page 1 of 200")),
		waitJS(`document.querySelectorAll('#topic-table tbody tr').length === 50`),
		chromedp.Click(chromedp.ID("topic-next")),
		waitJS(textHas("#topic-page", "page 2 of 200")),
		waitJS(`document.querySelector('#topic-table tbody tr').dataset.topic === 'tenant-00050.jobs'`),
		chromedp.SendKeys(chromedp.ID("topic-filter"), "tenant-0420"),
		waitJS(textHas("#topic-count", "10 of 10,000 topics")),
		waitJS(`document.querySelectorAll('#topic-table tbody tr').length === 10`),
	)
	// Every second within the horizon holds a file (the last one may still
	// be beyond it while the cursor is a second behind, in its grace).
	w, err := n.Client.Wheel(t.Context())
	if err != nil || len(w.NonEmpty) < 7199 {
		t.Fatalf("wheel: %d slots holding files, %v", len(w.NonEmpty), err)
	}
	last := w.NonEmpty[len(w.NonEmpty)-1]
	run(t, ctx, "the wheel draws every slot from one request",
		chromedp.Navigate(n.URL+"/ui/#wheel"),
		waitJS(textHas("#wheel-stats", fmt.Sprintf("%d,%03dslots holding files", len(w.NonEmpty)/1000, len(w.NonEmpty)%1000))),
		waitJS(slotPainted(last.Slot)),
	)
}

// The topic view shows the open topic's webhook (never its secret) and
// the schedules that enqueue to it, not another topic's, as set through
// the API while the panel is open; it deletes a schedule and removes the
// webhook; a link to #topics/{topic} opens that topic's panel.
func TestConsoleTopicWebhookAndSchedules(t *testing.T) {
	ctx := browser(t)
	n := transporttest.Start(t, transporttest.Options{})
	tctx := t.Context()
	// Due in an hour of the node's clock, which stays still: the webhook is
	// never called.
	if _, err := n.Client.Enqueue(tctx, []api.Message{
		{Topic: "orders.close", Payload: api.TextBody("order 42"), DelayMs: api.Ptr(int64(3_600_000))},
		{Topic: "email.send", Payload: api.TextBody("hi"), DelayMs: api.Ptr(int64(3_600_000))},
	}); err != nil {
		t.Fatal(err)
	}
	row := `tr[data-topic="orders.close"]`
	run(t, ctx, "open the topic without webhook or schedules",
		chromedp.Navigate(n.URL+"/ui/#topics"),
		chromedp.WaitVisible(chromedp.CSS(row+" .topic-open")),
		chromedp.Click(chromedp.CSS(row+" .topic-open")),
		waitJS(textHas("#topic-name", "orders.close")),
		waitJS(textHas("#topic-webhook", "none")),
		waitJS(textHas("#schedule-table", "no schedule")),
	)

	const url, secret = "http://127.0.0.1:9/hooks/orders", "do-not-show-me"
	if _, err := n.Client.SetWebhook(tctx, "orders.close", api.WebhookRequest{URL: url, TimeoutMs: api.Ptr(int64(5_000)),
		MaxConcurrency: api.Ptr(int64(7)), RatePerS: api.Ptr(int64(3)), Secret: secret}); err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]api.ScheduleRequest{
		"orders-nightly-close": {Topic: "orders.close", Cron: "0 2 * * *", Timezone: "Europe/Berlin"},
		"orders-sweep":         {Topic: "orders.close", EveryMs: 60_000},
		"email-digest":         {Topic: "email.send", Cron: "0 8 * * MON"},
	} {
		if _, err := n.Client.SetSchedule(tctx, name, req); err != nil {
			t.Fatal(err)
		}
	}
	run(t, ctx, "the panel shows them at its next poll",
		waitJS(textHas("#topic-webhook", url)),
		waitJS(textHas(`#webhook-fields [data-field="max concurrency"]`, "7")),
		waitJS(textHas(`#webhook-fields [data-field="rate"]`, "3/s")),
		waitJS(textHas(`#webhook-fields [data-field="timeout"]`, "5s")),
		waitJS(textHas("#schedule-table", "orders-nightly-close")),
		waitJS(textHas(`tr[data-schedule="orders-nightly-close"]`, "Europe/Berlin")),
		waitJS(textHas(`tr[data-schedule="orders-sweep"]`, "every 1m")),
		waitJS(textHas("#schedule-count", "(2)")),
	)
	page := value(t, ctx, "the page's text", chromedp.Evaluate[string](`document.body.textContent`))
	if strings.Contains(page, "email-digest") || strings.Contains(page, secret) {
		t.Fatal("the topic view shows another topic's schedule or the webhook's secret")
	}

	run(t, ctx, "delete a schedule",
		chromedp.Click(chromedp.CSS(`.schedule-delete[data-name="orders-sweep"]`)),
		waitJS(textHas("#schedule-result", "orders-sweep deleted")),
		waitJS(`!document.querySelector('tr[data-schedule="orders-sweep"]')`),
		waitJS(textHas("#schedule-count", "(1)")),
	)
	if _, err := n.Client.GetSchedule(tctx, "orders-sweep"); err == nil {
		t.Fatal("the deleted schedule is still stored")
	}
	run(t, ctx, "remove the webhook",
		chromedp.Click(chromedp.ID("webhook-remove")),
		waitJS(textHas("#webhook-result", "webhook removed")),
		waitJS(textHas("#topic-webhook", "none")),
	)
	if _, err := n.Client.Webhook(tctx, "orders.close"); err == nil {
		t.Fatal("the removed webhook is still stored")
	}

	run(t, ctx, "a link opens another topic",
		chromedp.Navigate(n.URL+"/ui/#topics/email.send"),
		waitJS(textHas("#topic-name", "email.send")),
		waitJS(textHas("#schedule-table", "email-digest")),
		waitJS(`!document.querySelector('tr[data-schedule="orders-nightly-close"]')`),
	)
}

// The cluster view lists each Raft group with its leader, indexes and the
// lag of the node answering.
func TestConsoleClusterGroups(t *testing.T) {
	ctx := browser(t)
	n := transporttest.Start(t, transporttest.Options{})
	if _, err := n.Client.Enqueue(t.Context(), []api.Message{{Topic: "t", Payload: api.TextBody("x")}}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "open the cluster",
		chromedp.Navigate(n.URL+"/ui/#cluster"),
		waitJS(textHas(`#group-table tr[data-group="0"] [data-field="leader"]`, n.ID)),
		waitJS(textHas(`#group-table tr[data-group="0"] [data-field="lag"]`, "0")),
		waitJS(textHas("#groups", "node "+n.ID)),
	)
}

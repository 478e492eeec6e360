package console_test

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/transporttest"
)

var screenshots = flag.String("screenshots", "", "write the console's screenshots (PNG) to this directory; default: a temporary one")

// TestConsoleScreenshots takes a PNG of each view of the console on a
// three-node cluster holding a backlog of a few thousand messages over
// many slots and topics, a week of overflow and some dead letters.
func TestConsoleScreenshots(t *testing.T) {
	ctx := browser(t)
	dir := *screenshots
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	c := transporttest.StartCluster(t, 3, transporttest.Options{Server: func(cfg *transport.Config) { cfg.Gatherer = reg }})
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
	// bursts, the rest spread over the next week with a daily rhythm.
	rng := rand.New(rand.NewPCG(1, 2))
	var topics []string
	for _, a := range []string{"orders", "billing", "email", "reports", "search", "carts", "invoices", "sms"} {
		for _, b := range []string{"close", "retry", "reminder", "expire", "sync"} {
			topics = append(topics, a+"."+b)
		}
	}
	var msgs []api.Message
	for i := range 4000 {
		var delay int64
		switch {
		case i%10 < 6: // the wheel: bursts around a few minutes of the two hours
			burst := int64(rng.IntN(12)) * 600_000
			delay = 5_000 + burst + int64(math.Abs(rng.NormFloat64())*120_000)
		default: // the overflow: the week ahead, busier in the day
			day := int64(rng.IntN(7)) * 86_400_000
			delay = 2*3_600_000 + day + int64(rng.NormFloat64()*3*3_600_000+10*3_600_000)
		}
		delay = max(delay, 1000)
		msgs = append(msgs, api.Message{Topic: topics[rng.IntN(len(topics))], Payload: api.TextBody(fmt.Sprintf(`{"order":%d}`, i)),
			DelayMs: api.Ptr(delay), Key: fmt.Sprintf("k-%d", i)})
	}
	res := enqueue(msgs[:2000])
	enqueue(msgs[2000:])

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

	// Dead letters: webhooks that never answered.
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

	run(t, ctx, "open the dead letters",
		chromedp.SetValue(chromedp.ID("topic-filter"), "payments"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('topic-filter').dispatchEvent(new Event('input'))`),
		chromedp.Click(chromedp.CSS(`tr[data-topic="payments.webhook"] .dead-open`)),
		waitJS(`document.querySelectorAll('#dead-table .dead-pick').length === 25`),
		chromedp.Click(chromedp.CSS(`#dead-table tbody tr:nth-child(2) .dead-pick`)),
		chromedp.Click(chromedp.CSS(`#dead-table tbody tr:nth-child(5) .dead-pick`)),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('dead-panel').scrollIntoView()`),
	)
	shot("dead-letters")

	run(t, ctx, "open the cluster",
		chromedp.Navigate(n.URL+"/ui/#cluster"),
		waitJS(`document.querySelectorAll('#cluster-table tbody tr').length === 3`),
		waitJS(textHas("#node", "node "+n.ID)),
	)
	shot("cluster")
	t.Logf("screenshots in %s", dir)
}

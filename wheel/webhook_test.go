package wheel

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

func TestWebhooksReplicated(t *testing.T) {
	k := newStoreKit(t, Options{})
	a := command.Webhook{Topic: "a", URL: "https://a.example/hook", Secret: "s", TimeoutMs: 10000, MaxConcurrency: 100}
	b := command.Webhook{Topic: "b", URL: "http://b.example/", TimeoutMs: 500, MaxConcurrency: 1, RatePerS: 3}
	k.apply(command.SetWebhook{Webhook: b}, command.SetWebhook{Webhook: a})
	a.URL = "https://a.example/v2"
	k.apply(command.SetWebhook{Webhook: a})
	k.reopen()
	if got := k.s.Webhooks(); !reflect.DeepEqual(got, []command.Webhook{a, b}) {
		t.Fatalf("webhooks after reopen %+v", got)
	}
	var dump bytes.Buffer
	if err := k.s.Dump(&dump); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dump.String(), `webhook "a" url "https://a.example/v2"`) || strings.Contains(dump.String(), `"s"`) {
		t.Fatalf("dump lacks the webhook or shows its secret:\n%s", dump.String())
	}
	res := k.apply(command.DeleteWebhook{Topic: "b"}, command.DeleteWebhook{Topic: "b"}, command.DeleteWebhook{Topic: "none"})
	if res[0].Err != nil || !errors.Is(res[1].Err, model.ErrNotFound) || !errors.Is(res[2].Err, model.ErrNotFound) {
		t.Fatalf("delete results %+v", res)
	}
	if _, ok := k.s.Webhook("b"); ok {
		t.Fatal("webhook b still set")
	}
	if got, ok := k.s.Webhook("a"); !ok || got != a {
		t.Fatalf("webhook a = %+v %v", got, ok)
	}
}

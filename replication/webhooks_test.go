package replication_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	. "github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// A webhook stored while the leader's sender makes its first reconcile
// (after that reconcile read the store) still gets its sender.
func TestWebhookSetDuringFirstReconcileIsSent(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	n := c.Leader().Node
	d, old := n.TakeWebhooks()
	old.Stop()
	if open, _ := d.StreamStats(); open != 0 {
		t.Fatalf("%d streams open before the webhook", open)
	}
	hook := command.Webhook{Topic: "t", URL: "http://127.0.0.1:1", TimeoutMs: 1000, MaxConcurrency: 1}
	reconciled := make(chan struct{})
	first := true
	n.StartWebhooks(d, func() []command.Webhook {
		if !first {
			return n.StoredWebhooks()
		}
		first = false
		// The store is read (empty), then the webhook is stored and
		// reconciled as SetWebhook does, while this reconcile runs.
		if _, err := n.Result(t.Context(), command.SetWebhook{Webhook: hook}); err != nil {
			t.Error(err)
		}
		// SetWebhook's reconcile finds the sender now and waits for
		// this one to end.
		s := n.Sender()
		go func() {
			if s != nil {
				s.Reconcile(n.StoredWebhooks)
			}
			close(reconciled)
		}()
		return nil
	})
	<-reconciled
	if open, _ := d.StreamStats(); open != 1 {
		t.Fatalf("%d streams open after the webhook was stored and reconciled, want its sender's", open)
	}
}

// Setting a webhook ends the consumer streams open on its topic with a
// conflict; a new stream of the topic is refused the same way.
func TestSetWebhookEndsConsumerStreams(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	n := c.Leader().Node
	st, err := n.Stream(t.Context(), "t", model.ConsumerOptions{MaxInflight: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := n.SetWebhook(t.Context(), command.Webhook{Topic: "t", URL: "http://127.0.0.1:1", TimeoutMs: 1000, MaxConcurrency: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := st.Next(ctx); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("open stream's next: %v, want a conflict", err)
	}
	if _, err := n.Stream(t.Context(), "t", model.ConsumerOptions{MaxInflight: 1}); !errors.Is(err, model.ErrConflict) {
		t.Fatalf("new stream: %v, want a conflict", err)
	}
}

// A webhook whose SetWebhook gave up waiting (its context ended before the
// entry applied) still gets its sender once the entry applies: the topic's
// messages go to it, not nowhere.
func TestWebhookSetAfterItsCallerGaveUpIsSent(t *testing.T) {
	hold := &applyHold{}
	c := repltest.NewCluster(t, 1, func(cfg *Config) { SetBeforeApply(cfg, hold.wait) })
	n := c.Leader().Node
	got := make(chan string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Delaywheel-Topic")
	}))
	defer srv.Close()
	nettest.WaitFor(t, nettest.Patience, "the node's address to be recorded", n.HasSelf)

	release := hold.after(n.Raft().LastIndex())
	defer release()
	gaveUp, cancel := context.WithCancel(t.Context())
	cancel()
	hook := command.Webhook{Topic: "t", URL: srv.URL, TimeoutMs: 1000, MaxConcurrency: 1}
	if err := n.SetWebhook(gaveUp, hook); !errors.Is(err, model.ErrUnavailable) {
		t.Fatalf("SetWebhook with its context ended: %v, want the outcome unknown", err)
	}
	release()
	nettest.WaitFor(t, nettest.Patience, "the webhook to be stored", func() bool { return len(n.StoredWebhooks()) == 1 })

	enqueue(t, n, msg("t", "m", 0))
	select {
	case topic := <-got:
		if topic != "t" {
			t.Fatalf("request for topic %q", topic)
		}
	case <-time.After(nettest.Patience):
		t.Fatal("the webhook got no request: its sender never started")
	}
}

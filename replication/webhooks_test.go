package replication

import (
	"testing"

	"github.com/delaywheel/delaywheel/wheel"
)

// A webhook stored while the leader's sender makes its first reconcile
// (after that reconcile read the store) still gets its sender.
func TestWebhookSetDuringFirstReconcileIsSent(t *testing.T) {
	c := NewTestCluster(t, 1, nil)
	n := c.Leader().Node
	n.mu.Lock()
	d, old := n.disp, n.hooks
	n.hooks = nil
	n.mu.Unlock()
	old.Stop()
	if open, _ := d.StreamStats(); open != 0 {
		t.Fatalf("%d streams open before the webhook", open)
	}
	hook := wheel.Webhook{Topic: "t", URL: "http://127.0.0.1:1", TimeoutMs: 1000, MaxConcurrency: 1}
	reconciled := make(chan struct{})
	first := true
	n.startWebhooks(d, func() []wheel.Webhook {
		if !first {
			return n.storedWebhooks()
		}
		first = false
		// The store is read (empty), then the webhook is stored and
		// reconciled as SetWebhook does, while this reconcile runs.
		if _, err := n.result(t.Context(), wheel.SetWebhook{Webhook: hook}); err != nil {
			t.Error(err)
		}
		// SetWebhook's reconcile finds the sender now and waits for
		// this one to end.
		s := n.sender()
		go func() {
			if s != nil {
				s.Reconcile(n.storedWebhooks)
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

package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
)

// The end of a subscription's context, without Close, stops its ackers
// once the queued acks are sent; an Ack after that is dropped.
func TestSubscriptionEndedByContextStopsAckers(t *testing.T) {
	var mu sync.Mutex
	var acked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/ack":
			var req api.ReceiptsRequest
			_ = json.NewDecoder(r.Body).Decode(&req)
			mu.Lock()
			acked = append(acked, req.Receipts...)
			mu.Unlock()
			_ = json.NewEncoder(w).Encode(api.AckResponse{})
		default: // the stream: one delivery, then open until the client leaves
			_ = json.NewEncoder(w).Encode(api.Delivery{Receipt: "r1"})
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	sub := New(srv.URL).Subscribe(ctx, "t", SubscribeOptions{})
	d := <-sub.Deliveries()
	sub.Ack(d)
	cancel()
	stopped := make(chan struct{})
	go func() { sub.ackers.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("the ackers still run after the subscription's context ended")
	}
	for range sub.Deliveries() {
	}
	sub.Ack(d) // dropped: neither blocks nor panics
	mu.Lock()
	defer mu.Unlock()
	if len(acked) != 1 || acked[0] != "r1" {
		t.Fatalf("acked %v, want [r1]", acked)
	}
}

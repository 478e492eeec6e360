package transport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel"
)

// instantBackend leads and enqueues at once, so that a benchmark measures
// the server's own work: reading, decoding, validating and answering.
type instantBackend struct{ transport.Backend }

func (instantBackend) LeaderHTTP() (string, bool, bool) { return "", true, true }
func (instantBackend) Removed() error                   { return nil }

func (instantBackend) Enqueue(_ context.Context, msgs []wheel.NewMessage) ([]wheel.Enqueued, error) {
	out := make([]wheel.Enqueued, len(msgs))
	for i, m := range msgs {
		out[i] = wheel.Enqueued{ID: wheel.ID{Index: 7, Seq: uint32(i + 1)}, DeliverAtMs: m.DeliverAtMs}
	}
	return out, nil
}

// BenchmarkEnqueueJSON is the bench's enqueue call in JSON, end to end
// through the server's handler: 100 messages of 100-byte bodies, each with
// an absolute due time.
func BenchmarkEnqueueJSON(b *testing.B) {
	due := startMs + 1_800_000
	req := api.EnqueueRequest{Messages: make([]api.Message, 100)}
	for i := range req.Messages {
		req.Messages[i] = api.Message{Topic: "bench", Payload: api.TextBody(strings.Repeat("x", 100)), DeliverAtMs: &due}
	}
	body, err := json.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	clock := func() time.Time { return time.UnixMilli(startMs) }
	h := transport.NewServer(transport.Config{Clock: clock}, instantBackend{}).Handler()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/messages", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkEnqueueProto is the same call in protobuf, as the Go client
// sends it, answered in protobuf.
func BenchmarkEnqueueProto(b *testing.B) {
	due := startMs + 1_800_000
	req := api.EnqueueRequest{Messages: make([]api.Message, 100)}
	for i := range req.Messages {
		req.Messages[i] = api.Message{Topic: "bench", Payload: api.TextBody(strings.Repeat("x", 100)), DeliverAtMs: &due}
	}
	body, err := api.AppendEnqueueRequest(nil, req)
	if err != nil {
		b.Fatal(err)
	}
	clock := func() time.Time { return time.UnixMilli(startMs) }
	h := transport.NewServer(transport.Config{Clock: clock}, instantBackend{}).Handler()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/messages", bytes.NewReader(body))
		r.Header.Set("Content-Type", api.ContentTypeProto)
		r.Header.Set("Accept", api.ContentTypeProto)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport"
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// instantBackend leads and enqueues at once, so that a benchmark measures
// the server's own work: reading, decoding, validating and answering.
type instantBackend struct{ transport.Backend }

func (instantBackend) LeaderHTTP() (string, bool, bool)   { return "", true, true }
func (instantBackend) Removed() error                     { return nil }
func (instantBackend) Leader() (model.Member, bool, bool) { return model.Member{}, true, true }

func (instantBackend) Enqueue(_ context.Context, msgs []command.NewMessage) ([]wheel.Enqueued, error) {
	out := make([]wheel.Enqueued, len(msgs))
	for i, m := range msgs {
		out[i] = wheel.Enqueued{ID: model.ID{Index: 7, Seq: uint32(i + 1)}, DeliverAtMs: m.DeliverAtMs}
	}
	return out, nil
}

// benchBatch is the bench's enqueue call: 100 messages of 100-byte
// bodies, each with an absolute due time.
func benchBatch() api.EnqueueRequest {
	due := startMs + 1_800_000
	req := api.EnqueueRequest{Messages: make([]api.Message, 100)}
	for i := range req.Messages {
		req.Messages[i] = api.Message{Topic: "bench", Payload: api.TextBody(strings.Repeat("x", 100)), DeliverAtMs: &due}
	}
	return req
}

// benchEnqueue posts body, end to end through the server's handler.
func benchEnqueue(b *testing.B, body []byte, header ...string) {
	clock := func() time.Time { return time.UnixMilli(startMs) }
	h := transport.NewServer(transport.Config{Clock: clock}, instantBackend{}).Handler()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/messages", bytes.NewReader(body))
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkEnqueueJSON is the bench's enqueue call in JSON.
func BenchmarkEnqueueJSON(b *testing.B) {
	body, err := json.Marshal(benchBatch())
	if err != nil {
		b.Fatal(err)
	}
	benchEnqueue(b, body, "Content-Type", "application/json")
}

// BenchmarkEnqueueProto is the same call in protobuf, as the Go client
// sends it, answered in protobuf.
func BenchmarkEnqueueProto(b *testing.B) {
	body, err := api.AppendEnqueueRequest(nil, benchBatch())
	if err != nil {
		b.Fatal(err)
	}
	benchEnqueue(b, body, "Content-Type", api.ContentTypeProto, "Accept", api.ContentTypeProto)
}

// Reserve hands out max deliveries of 100-byte bodies at once.
func (instantBackend) Reserve(_ context.Context, topic string, max int, _, _ time.Duration) ([]model.Delivery, error) {
	out := make([]model.Delivery, max)
	for i := range out {
		r := model.Receipt{ID: model.ID{Index: 7, Seq: uint32(i + 1)}, Nonce: 0x1234_5678_9abc_def0 + uint64(i)}
		m := model.Message{ID: r.ID, Topic: topic, Body: []byte(strings.Repeat("x", 100)), DeliverAtMs: startMs,
			Attempts: 1, Receipt: r.Nonce, LeaseExpiresMs: startMs + 30_000}
		out[i] = model.Delivery{Message: m, Attempt: 1, Receipt: r}
	}
	return out, nil
}

// BenchmarkReserveJSON is the bench's reserve call: 100 deliveries of
// 100-byte bodies, answered in JSON.
func BenchmarkReserveJSON(b *testing.B) {
	h := transport.NewServer(transport.Config{}, instantBackend{}).Handler()
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/topics/bench/reserve", strings.NewReader(`{"max":100}`))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// Ack settles every receipt at once.
func (instantBackend) Ack(_ context.Context, rs []model.Receipt) (command.Counted, error) {
	return command.Counted{Done: len(rs)}, nil
}

// BenchmarkAckJSON is the bench's ack call: the 100 receipts of a
// reserve, end to end through the server's handler.
func BenchmarkAckJSON(b *testing.B) {
	req := api.ReceiptsRequest{Receipts: make([]string, 100)}
	for i := range req.Receipts {
		req.Receipts[i] = model.Receipt{ID: model.ID{Index: 7, Seq: uint32(i + 1)}, Nonce: 0x1234_5678_9abc_def0 + uint64(i)}.String()
	}
	body, err := json.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	h := transport.NewServer(transport.Config{}, instantBackend{}).Handler()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/ack", strings.NewReader(string(body)))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// Stream hands out batches of ten deliveries as fast as they are read.
func (b instantBackend) Stream(ctx context.Context, topic string, _ model.ConsumerOptions) (model.Consumer, error) {
	ds, err := b.Reserve(ctx, topic, 10, 0, 0)
	return instantConsumer(ds), err
}

// instantConsumer answers every Next with the same deliveries.
type instantConsumer []model.Delivery

func (c instantConsumer) Next(ctx context.Context) ([]model.Delivery, error) { return c, ctx.Err() }
func (instantConsumer) Close()                                               {}

// BenchmarkStreamJSON reads a stream over a real connection: an op is a
// batch of ten deliveries of 100-byte bodies, written as NDJSON.
func BenchmarkStreamJSON(b *testing.B) {
	quiet := transport.Config{Logger: slog.New(slog.DiscardHandler)} // the stream cut at the end warns
	srv := httptest.NewServer(transport.NewServer(quiet, instantBackend{}).Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/v1/topics/bench/stream")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	if _, err := br.ReadSlice('\n'); err != nil { // the stream's first line
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		for range 10 {
			if _, err := br.ReadSlice('\n'); err != nil {
				b.Fatal(err)
			}
		}
	}
}

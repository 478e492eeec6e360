package transport

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// leadingBackend leads, enqueues at once and has applied everything, so
// that a benchmark measures the wire between the nodes.
type leadingBackend struct{ Backend }

func (leadingBackend) Leader() (model.Member, bool, bool)      { return model.Member{}, true, true }
func (leadingBackend) LeaderHTTP() (string, bool, bool)        { return "", true, true }
func (leadingBackend) Removed() error                          { return nil }
func (leadingBackend) Settled(context.Context) (uint64, error) { return 1, nil }
func (leadingBackend) Enqueue(_ context.Context, msgs []command.NewMessage) ([]wheel.Enqueued, error) {
	out := make([]wheel.Enqueued, len(msgs))
	for i, m := range msgs {
		out[i] = wheel.Enqueued{ID: model.ID{Index: 7, Seq: uint32(i + 1)}, DeliverAtMs: m.DeliverAtMs}
	}
	return out, nil
}

// BenchmarkForwardEnqueue is a follower's part of the bench's enqueue
// call (100 messages of 100-byte bodies) sent to its leader and answered,
// the work of both ends included: what parts.Enqueue's choice of
// protobuf over JSON is for.
func BenchmarkForwardEnqueue(b *testing.B) {
	leader := httptest.NewServer(NewServer(Config{}, leadingBackend{}).Handler())
	defer leader.Close()
	s := NewServer(Config{}, leadingBackend{})
	p := s.parts
	to := model.Member{HTTPAddr: strings.TrimPrefix(leader.URL, "http://")}
	msgs := make([]command.NewMessage, 100)
	for i := range msgs {
		msgs[i] = command.NewMessage{Topic: "bench", Body: []byte(strings.Repeat("x", 100)), DeliverAtMs: startMsBench}
	}
	b.ReportAllocs()
	for b.Loop() {
		res, _, err := p.Enqueue(b.Context(), to, msgs)
		if err != nil || len(res) != len(msgs) {
			b.Fatalf("%d results: %v", len(res), err)
		}
	}
}

const startMsBench = 1_700_000_000_000

package api

import (
	"strings"
	"testing"
)

// BenchmarkAppendEnqueueRequest encodes the bench's enqueue call: 100
// messages with 100-byte bodies and an absolute due time.
func BenchmarkAppendEnqueueRequest(b *testing.B) {
	due := int64(1_800_000_000_000)
	req := EnqueueRequest{Messages: make([]Message, 100)}
	for i := range req.Messages {
		req.Messages[i] = Message{Topic: "bench", Payload: TextBody(strings.Repeat("x", 100)), DeliverAtMs: &due}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AppendEnqueueRequest(nil, req); err != nil {
			b.Fatal(err)
		}
	}
}

package replication

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// BenchmarkEnqueueAPI measures enqueue throughput through the HTTP API on a
// single node: batches of 100 messages with 100-byte bodies from 8 producers.
func BenchmarkEnqueueAPI(b *testing.B) {
	c := NewTestCluster(b, 1, nil)
	cl := client.New(c.Leader().URL)
	body := strings.Repeat("x", 100)
	batch := make([]api.Message, 100)
	const producers = 8
	var sent atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := make([]api.Message, len(batch))
			for sent.Add(1) <= int64(b.N) {
				due := time.Now().Add(time.Hour).UnixMilli()
				for i := range msgs {
					msgs[i] = api.Message{Topic: "bench", Payload: api.TextBody(body), DeliverAtMs: &due}
				}
				if _, err := cl.Enqueue(context.Background(), msgs); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N*len(batch))/time.Since(start).Seconds(), "msgs/s")
}

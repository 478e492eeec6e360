package replication_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel/command"
)

// BenchmarkEnqueue measures enqueue throughput through the node on a
// single-node cluster: batches of 100 messages with 100-byte bodies from 8
// producers.
func BenchmarkEnqueue(b *testing.B) {
	c := repltest.NewCluster(b, 1, nil)
	n := c.Leader().Node
	body := []byte(strings.Repeat("x", 100))
	const producers, batch = 8, 100
	var sent atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := make([]command.NewMessage, batch)
			for sent.Add(1) <= int64(b.N) {
				due := time.Now().Add(time.Hour).UnixMilli()
				for i := range msgs {
					msgs[i] = command.NewMessage{Topic: "bench", Body: body, DeliverAtMs: due, TTRMs: 30_000, MaxAttempts: 10}
				}
				if _, err := n.Enqueue(context.Background(), msgs); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "msgs/s")
}

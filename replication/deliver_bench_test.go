//go:build unix

package replication_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/replication"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// deliverRate is how many messages a second come due in BenchmarkDeliver,
// the rate of `delaywheel bench fire`.
const deliverRate = 10000

// BenchmarkDeliver measures what a delivered message costs the nodes,
// without the API in front of them: b.N messages come due at 10,000 a
// second, and 4 consumers reserve up to 100 and ack them in line
// (reserve), or read 4 streams and ack what they read (stream). It reports
// the CPU time of the process (every node's, and the consumers') per
// message from the first due time to the last ack, and the lateness p99 in
// milliseconds (the hand-off's clock time minus the due time). Run it with
// a fixed count: go test ./replication -run XXX -bench Deliver -benchtime 100000x
func BenchmarkDeliver(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		for _, mode := range []string{"reserve", "stream"} {
			b.Run(fmt.Sprintf("nodes=%d/%s", nodes, mode), func(b *testing.B) { benchDeliver(b, nodes, mode) })
		}
	}
}

func benchDeliver(b *testing.B, nodes int, mode string) {
	c := repltest.NewCluster(b, nodes, nil)
	n := c.Leader().Node
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const topic, consumers, batch = "bench", 4, 100
	total := b.N
	// Enqueued ahead, as the fire bench does: due from first on, in order.
	first := time.Now().Add(2*time.Second + time.Duration(total)*20*time.Microsecond).UnixMilli()
	body := []byte(strings.Repeat("x", 100))
	msgs := make([]command.NewMessage, 0, batch)
	for i := 0; i < total; i += batch {
		msgs = msgs[:0]
		for j := i; j < min(i+batch, total); j++ {
			due := first + int64(j)*1000/deliverRate
			msgs = append(msgs, command.NewMessage{Topic: topic, Body: body, DeliverAtMs: due, TTRMs: 30_000, MaxAttempts: 10})
		}
		if _, err := n.Enqueue(ctx, msgs); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(time.Until(time.UnixMilli(first)))
	b.ResetTimer()
	cpu0 := cpuTime()

	var (
		mu   sync.Mutex
		late []int64
		seen = make(map[model.ID]bool, total)
		dup  int
	)
	got := func(ds []model.Delivery) (done bool) {
		now := time.Now().UnixMilli()
		mu.Lock()
		defer mu.Unlock()
		for _, d := range ds {
			if seen[d.ID] {
				dup++
				continue
			}
			seen[d.ID] = true
			late = append(late, now-d.DeliverAtMs)
		}
		return len(seen) >= total
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer stop()
			err := consume(rctx, n, topic, mode, got)
			switch {
			case err == nil || rctx.Err() != nil:
			case errors.Is(err, model.ErrNotLeader):
				b.Errorf("the leadership moved during the run, as on a machine too loaded for the nodes' heartbeats: %v", err)
			default:
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	cpu := cpuTime() - cpu0
	b.StopTimer()
	if ctx.Err() != nil || len(seen) < total || dup > 0 {
		b.Fatalf("%d of %d messages delivered, %d duplicated", len(seen), total, dup)
	}
	slices.Sort(late)
	b.ReportMetric(float64(cpu.Microseconds())/float64(total), "cpu-µs/msg")
	b.ReportMetric(float64(late[len(late)*99/100]), "late-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// consume takes and acks deliveries until got reports all of them seen or
// ctx ends.
func consume(ctx context.Context, n *replication.Node, topic, mode string, got func([]model.Delivery) bool) error {
	next := func() ([]model.Delivery, error) { return n.Reserve(ctx, topic, 100, 2*time.Second, 0) }
	if mode == "stream" {
		s, err := n.Stream(ctx, topic, model.ConsumerOptions{MaxInflight: 1000})
		if err != nil {
			return err
		}
		defer s.Close()
		next = func() ([]model.Delivery, error) { return s.Next(ctx) }
	}
	for ctx.Err() == nil {
		ds, err := next()
		if err != nil {
			return err
		}
		if len(ds) == 0 {
			continue
		}
		done := got(ds)
		rs := make([]model.Receipt, len(ds))
		for i, d := range ds {
			rs[i] = d.Receipt
		}
		if _, err := n.Ack(ctx, rs); err != nil {
			return err
		}
		if done {
			return nil
		}
	}
	return nil
}

// cpuTime is the user and system time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

//go:build unix

package dispatch

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// BenchmarkStreamHandoff measures the leader's path of a stream delivery
// over a node without Raft: each op, 10 messages come due in the same
// millisecond (10,000 a second), the fire loop hands them to a waiting
// stream, its reader takes them, and the ack is submitted and applied as
// the node does it (Settling, then Settled). Enqueueing them is not
// timed. Its allocations per op are the figure to read:
// go test ./replication/dispatch -run XXX -bench StreamHandoff -benchmem
func BenchmarkStreamHandoff(b *testing.B) {
	const perMs = 10
	d, n, clk := startFake(b)
	ws, err := d.Stream("t", model.ConsumerOptions{MaxInflight: 1000, TTR: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	ctx := b.Context()
	msgs := make([]command.NewMessage, perMs)
	body := make([]byte, 100)
	var cpu time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		clk.Advance(time.Millisecond)
		now := clk.Now().UnixMilli()
		for i := range msgs {
			msgs[i] = command.NewMessage{Topic: "t", Body: body, DeliverAtMs: now, MaxAttempts: 3}
		}
		if _, err := n.Propose(ctx, command.Schedule{NowMs: now, Messages: msgs}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		cpu0 := cpuTime()
		var rs []model.Receipt
		for len(rs) < perMs {
			ds, err := ws.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			for _, dl := range ds {
				rs = append(rs, dl.Receipt)
			}
		}
		settle(ctx, b, d, n, rs)
		cpu += cpuTime() - cpu0
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// cpuTime is the user and system time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// settle acks rs as the node does: submitted, the streams told it is
// settling, applied, then told it settled.
func settle(ctx context.Context, b *testing.B, d *Dispatcher, n *fakeNode, rs []model.Receipt) {
	wait, err := n.Submit(ctx, command.Ack{NowMs: d.clock.Now().UnixMilli(), Receipts: rs})
	if err != nil {
		b.Fatal(err)
	}
	d.Settling(rs)
	if _, err := wait(); err != nil {
		b.Fatal(err)
	}
	d.Settled(rs)
}

package replication_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel/command"
	"github.com/delaywheel/delaywheel/wheel/model"
)

func TestStreamMetricsAndSettle(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	l := c.Leader()
	reg := prometheus.NewRegistry()
	reg.MustRegister(l.Node.Collector())
	ctx := t.Context()
	st, err := l.Node.Stream(ctx, "s", model.ConsumerOptions{MaxInflight: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Due at once, in a topic the enqueue creates: the message goes
	// straight to the topic's ready queue, and the dispatcher, woken by
	// that, must find it there (wheel.TestObserverHearsOfPublishedState).
	if _, err := l.Node.Enqueue(ctx, []command.NewMessage{{Topic: "s", Body: []byte("a"), TTRMs: 30000, MaxAttempts: 3}}); err != nil {
		t.Fatal(err)
	}
	// Bounded so that a lost wake-up fails here rather than hang the package.
	nctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	ds, err := st.Next(nctx)
	if err != nil || len(ds) != 1 {
		t.Fatalf("next: %v %v", ds, err)
	}
	if v := metricValue(t, reg, "delaywheel_stream_deliveries_total", map[string]string{"topic": "s"}); v != 1 {
		t.Fatalf("stream_deliveries_total = %v", v)
	}
	if v := metricValue(t, reg, "delaywheel_streams_open", nil); v != 1 {
		t.Fatalf("streams_open = %v", v)
	}
	if v := metricValue(t, reg, "delaywheel_stream_inflight", nil); v != 1 {
		t.Fatalf("stream_inflight = %v", v)
	}
	if _, err := l.Node.Ack(ctx, []model.Receipt{ds[0].Receipt}); err != nil {
		t.Fatal(err)
	}
	// An answered ack has freed the stream's window.
	if v := metricValue(t, reg, "delaywheel_stream_inflight", nil); v != 0 {
		t.Fatalf("stream_inflight after the ack = %v", v)
	}
}

package replication_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/replication/repltest"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// metricValue returns the value of the metric name whose labels include want.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue next
				}
			}
			return value(m)
		}
	}
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func TestMetricsMoveWithTraffic(t *testing.T) {
	c := repltest.NewCluster(t, 1, nil)
	l := c.Leader()
	reg := prometheus.NewRegistry()
	reg.MustRegister(l.Node.Collector())
	if v := metricValue(t, reg, "delaywheel_raft_leader", nil); v != 1 {
		t.Fatalf("raft_leader = %v on the leader", v)
	}
	enqueue(t, l.Node, msg("m", "x", 50*time.Millisecond), msg("m", "y", 3*time.Hour))
	// An enqueue without keys is answered when it commits, before its
	// apply counts it.
	nettest.WaitFor(t, nettest.Patience, "the enqueue to apply", func() bool {
		return metricValue(t, reg, "delaywheel_messages_total", map[string]string{"topic": "m", "event": "enqueued"}) >= 2
	})
	if v := metricValue(t, reg, "delaywheel_messages_total", map[string]string{"topic": "m", "event": "enqueued"}); v != 2 {
		t.Fatalf("enqueued = %v, want 2", v)
	}
	if v := metricValue(t, reg, "delaywheel_overflow_messages", nil); v != 1 {
		t.Fatalf("overflow = %v, want 1", v)
	}
	got := reserve(t, l.Node, "m", 1, 5*time.Second)
	if len(got) != 1 {
		t.Fatalf("reserve: %+v", got)
	}
	if v := metricValue(t, reg, "delaywheel_delivery_lateness_seconds", nil); v != 1 {
		t.Fatalf("lateness samples = %v, want 1", v)
	}
	// The hand-off may be answered before its Lease applies.
	nettest.WaitFor(t, nettest.Patience, "the lease to apply", func() bool {
		return metricValue(t, reg, "delaywheel_pending_messages", map[string]string{"topic": "m", "state": "reserved"}) == 1
	})
	if v := metricValue(t, reg, "delaywheel_messages_total", map[string]string{"topic": "m", "event": "delivered"}); v != 1 {
		t.Fatalf("delivered = %v, want 1", v)
	}
	if _, err := l.Node.Ack(t.Context(), []model.Receipt{got[0].Receipt}); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, reg, "delaywheel_messages_total", map[string]string{"topic": "m", "event": "acked"}); v != 1 {
		t.Fatalf("acked = %v, want 1", v)
	}
	if v := metricValue(t, reg, "delaywheel_apply_seconds", nil); v < 3 {
		t.Fatalf("apply latency samples = %v, want at least 3", v)
	}
}

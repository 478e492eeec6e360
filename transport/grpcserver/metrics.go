package grpcserver

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"

	"github.com/delaywheel/delaywheel/transport"
)

// metrics are the server's call metrics. A nil *metrics records nothing.
type metrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// newMetrics registers the call metrics with reg; nil reg means none.
func newMetrics(reg prometheus.Registerer, log *slog.Logger) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "delaywheel", Subsystem: "grpc", Name: "calls_total",
			Help: "gRPC calls of the Delaywheel service answered, by method and status code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "delaywheel", Subsystem: "grpc", Name: "call_duration_seconds",
			Help:    "Time to answer a gRPC call, by method (long-polls and forwarding included).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"method"}),
	}
	m.calls = transport.RegisterCollector(reg, m.calls, log)
	m.duration = transport.RegisterCollector(reg, m.duration, log)
	return m
}

func (m *metrics) observe(method string, err error, took time.Duration) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(method, status.Code(err).String()).Inc()
	m.duration.WithLabelValues(method).Observe(took.Seconds())
}

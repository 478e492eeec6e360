package transport

import (
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics are the server's request metrics. A nil *httpMetrics records
// nothing.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// newHTTPMetrics registers the request metrics with reg (reusing ones
// already registered there); nil reg means no metrics.
func newHTTPMetrics(reg prometheus.Registerer, log *slog.Logger) *httpMetrics {
	if reg == nil {
		return nil
	}
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "delaywheel", Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests answered, by route and status.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "delaywheel", Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route (long-polls included).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"route"}),
	}
	m.requests = register(reg, m.requests, log)
	m.duration = register(reg, m.duration, log)
	return m
}

// register registers c, or returns the collector already registered under
// its name.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, log *slog.Logger) C {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
	case errors.As(err, &are):
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
		log.Warn("http metrics: collector registered with another type", "err", err)
	default:
		log.Warn("http metrics: register", "err", err)
	}
	return c
}

func (m *httpMetrics) observe(route string, status int, took time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route).Observe(took.Seconds())
}

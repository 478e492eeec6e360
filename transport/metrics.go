package transport

import (
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// CallMetrics count and time the calls an API answers. A nil *CallMetrics
// records nothing.
type CallMetrics struct {
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// CallMetricsOpts name an API's call metrics:
// delaywheel_<Subsystem>_<Calls>{<Label>,code} and
// delaywheel_<Subsystem>_<Duration>{<Label>}.
type CallMetricsOpts struct {
	Subsystem, Calls, Duration, Label string
	CallsHelp, DurationHelp           string
}

// NewCallMetrics registers an API's call metrics with reg (reusing ones
// already registered there); nil reg means no metrics.
func NewCallMetrics(reg prometheus.Registerer, log *slog.Logger, o CallMetricsOpts) *CallMetrics {
	if reg == nil {
		return nil
	}
	m := &CallMetrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "delaywheel", Subsystem: o.Subsystem, Name: o.Calls, Help: o.CallsHelp,
		}, []string{o.Label, "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "delaywheel", Subsystem: o.Subsystem, Name: o.Duration, Help: o.DurationHelp,
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{o.Label}),
	}
	m.calls = register(reg, m.calls, log)
	m.duration = register(reg, m.duration, log)
	return m
}

// newHTTPMetrics registers the HTTP server's request metrics.
func newHTTPMetrics(reg prometheus.Registerer, log *slog.Logger) *CallMetrics {
	return NewCallMetrics(reg, log, CallMetricsOpts{Subsystem: "http", Calls: "requests_total",
		Duration: "request_duration_seconds", Label: "route",
		CallsHelp:    "HTTP requests answered, by route and status.",
		DurationHelp: "Time to answer an HTTP request, by route (long-polls included)."})
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
		log.Warn("metrics: collector registered with another type", "err", err)
	default:
		log.Warn("metrics: register", "err", err)
	}
	return c
}

// Observe counts one call of what (a route, a method) answered with code
// and taking took.
func (m *CallMetrics) Observe(what, code string, took time.Duration) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(what, code).Inc()
	m.duration.WithLabelValues(what).Observe(took.Seconds())
}

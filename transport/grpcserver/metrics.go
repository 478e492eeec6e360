package grpcserver

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delaywheel/delaywheel/transport"
)

// newMetrics registers the call metrics of the gRPC API with reg; nil reg
// means none.
func newMetrics(reg prometheus.Registerer, log *slog.Logger) *transport.CallMetrics {
	return transport.NewCallMetrics(reg, log, transport.CallMetricsOpts{Subsystem: "grpc", Calls: "calls_total",
		Duration: "call_duration_seconds", Label: "method",
		CallsHelp:    "gRPC calls of the Delaywheel service answered, by method and status code.",
		DurationHelp: "Time to answer a gRPC call, by method (long-polls and forwarding included)."})
}

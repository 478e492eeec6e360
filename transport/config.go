package transport

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Server. The zero value is usable: every unset field
// takes the default named in its comment.
type Config struct {
	// Clock is the time the leader stamps: delay_ms becomes now+delay.
	// Default time.Now.
	Clock func() time.Time
	// Logger receives a Debug line per request and a Warn line per 5xx.
	// Default slog.Default().
	Logger *slog.Logger
	// AuthToken, when non-empty, is required as "Authorization: Bearer
	// <token>" on every /v1 route. /healthz, /readyz, /metrics, /ui and
	// /v1/openapi.json stay open.
	AuthToken string
	// Gatherer is served on /metrics. Default: an empty registry.
	Gatherer prometheus.Gatherer
	// Registerer, when set, receives the server's request metrics.
	Registerer prometheus.Registerer
	// LeaderScheme is the scheme used to forward to the leader. Default "http".
	LeaderScheme string
	// LeaderTransport carries forwarded requests (set it for TLS).
	// Default http.DefaultTransport.
	LeaderTransport http.RoundTripper
	// ReadHeaderTimeout bounds reading request headers. Default 10 s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds idle keep-alive connections. Default 2 min.
	IdleTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown of Serve; connections
	// still open after it are closed. Default 15 s.
	ShutdownTimeout time.Duration
	// GRPCAddr is this node's gRPC address, which GET /v1/cluster reports
	// (grpc_addr) so that followers can forward gRPC calls to it. Empty:
	// none.
	GRPCAddr string
	// Limits bound requests; zero fields take their defaults.
	Limits Limits
	// StreamKeepalive is how long a stream stays silent before it writes
	// an empty line. Default 15 s.
	StreamKeepalive time.Duration
	// WebhookAllow restricts where webhooks may point: host names, IP
	// addresses and CIDRs. Empty: anywhere.
	WebhookAllow []string
	// Slots are the long-poll and stream slots; the node's HTTP and gRPC
	// servers share one, so the limits bound the node. Default: a pool of
	// this server's own, sized by Limits.
	Slots *Slots
}

// Limits bound what a request may ask for (service.Limits).
type Limits = service.Limits

// DefaultLimits returns the default limits.
func DefaultLimits() Limits { return service.DefaultLimits() }

func orDuration(p *time.Duration, def time.Duration) {
	if *p == 0 {
		*p = def
	}
}

// WithDefaults returns c with every unset field at its default.
func (c Config) WithDefaults() Config {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Gatherer == nil {
		c.Gatherer = prometheus.NewRegistry()
	}
	if c.LeaderScheme == "" {
		c.LeaderScheme = "http"
	}
	if c.LeaderTransport == nil {
		c.LeaderTransport = http.DefaultTransport
	}
	orDuration(&c.ReadHeaderTimeout, 10*time.Second)
	orDuration(&c.IdleTimeout, 2*time.Minute)
	orDuration(&c.ShutdownTimeout, 15*time.Second)
	orDuration(&c.StreamKeepalive, 15*time.Second)
	c.Limits = c.Limits.WithDefaults()
	if c.Slots == nil {
		c.Slots = NewSlots(c.Limits)
	}
	return c
}

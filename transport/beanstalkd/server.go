package beanstalkd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config tunes a Server. Zero fields take the defaults of DefaultConfig.
type Config struct {
	Logger *slog.Logger
	// NodeID is the id stats reports.
	NodeID string
	// MaxJobSize is the largest job body in bytes: the node's body limit.
	MaxJobSize int
	// MaxConns bounds the open connections; one over it is answered
	// OUT_OF_MEMORY and closed.
	MaxConns int
	// MaxWatched bounds the tubes one connection watches; a watch over it
	// is answered OUT_OF_MEMORY.
	MaxWatched int
	// IdleTimeout closes a connection that sends no command for this long
	// (a reserve that waits is not idle).
	IdleTimeout time.Duration
	// CommandTimeout bounds the rest of a command once its first byte came
	// (its line and body), and the write of each reply, so that a slow or
	// half-open client cannot hold a connection's goroutine.
	CommandTimeout time.Duration
	// MaxDelay is the furthest a put or release may delay a job.
	MaxDelay time.Duration
	// MinTTR and MaxTTR bound a put's time-to-run; a ttr outside is
	// clamped (beanstalkd itself makes a ttr of 0 one second).
	MinTTR, MaxTTR time.Duration
	// MaxWait is the longest one Backend.Reserve waits; a longer reserve
	// asks again.
	MaxWait time.Duration
	// MaxAttempts is a put job's max attempts: beanstalkd never buries a
	// job by itself, so it is the node's largest.
	MaxAttempts int32
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// At returns a channel that receives once Now reads t or later: what
	// a waiting reserve waits on. When nil, a wall-clock timer for the
	// span from Now's reading to t.
	At func(t time.Time) <-chan time.Time
}

// DefaultConfig returns the default configuration.
func DefaultConfig() Config {
	return Config{
		Logger: slog.Default(), MaxJobSize: 1 << 20, MaxConns: 10000, MaxWatched: 100,
		IdleTimeout: time.Hour, CommandTimeout: 30 * time.Second,
		MaxDelay: 10 * 365 * 24 * time.Hour, MinTTR: time.Second, MaxTTR: 24 * time.Hour,
		MaxWait: 5 * time.Minute, MaxAttempts: 1000, Now: time.Now,
	}
}

// withDefaults fills the zero fields of c.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	if c.Now == nil {
		c.Now = d.Now
	}
	if c.At == nil {
		now := c.Now
		c.At = func(t time.Time) <-chan time.Time { return time.After(t.Sub(now())) }
	}
	for _, f := range []struct{ v, def *int }{{&c.MaxJobSize, &d.MaxJobSize}, {&c.MaxConns, &d.MaxConns}, {&c.MaxWatched, &d.MaxWatched}} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	for _, f := range []struct{ v, def *time.Duration }{{&c.IdleTimeout, &d.IdleTimeout}, {&c.CommandTimeout, &d.CommandTimeout},
		{&c.MaxDelay, &d.MaxDelay}, {&c.MinTTR, &d.MinTTR}, {&c.MaxTTR, &d.MaxTTR}, {&c.MaxWait, &d.MaxWait}} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	return c
}

// acceptPause is how long Serve waits after a failed accept.
const acceptPause = 50 * time.Millisecond

// Server serves the beanstalkd protocol over a Backend.
type Server struct {
	cfg   Config
	be    Backend
	log   *slog.Logger
	start time.Time
	slots chan struct{} // one per open connection

	draining   atomic.Bool
	totalConns atomic.Int64
	cmds       [OpQuit + 1]atomic.Int64

	mu    sync.Mutex
	live  map[*conn]struct{}
	tubes map[string]*tubeState
	waits map[string]*tubeReserves // coalesce.go
	acks  map[int]*groupAcks       // ack.go, by group
}

// tubeState is what this node knows of a tube beyond its topic's counts.
type tubeState struct {
	using, watching, waiting int
	deletes, pauses          int64
	pausedUntil              time.Time
	pauseFor                 time.Duration
}

// NewServer returns a server of be.
func NewServer(cfg Config, be Backend) *Server {
	cfg = cfg.withDefaults()
	return &Server{cfg: cfg, be: be, log: cfg.Logger, start: cfg.Now(), slots: make(chan struct{}, cfg.MaxConns),
		live: map[*conn]struct{}{}, tubes: map[string]*tubeState{}, waits: map[string]*tubeReserves{}, acks: map[int]*groupAcks{}}
}

// Serve accepts connections on ln until ctx ends. Then it drains: puts
// are answered DRAINING, waiting reserves DRAINING, every connection is
// closed once its command in progress is answered, and Serve returns nil
// when they all are.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() {
		s.drain()
		ln.Close()
	})
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		nc, err := ln.Accept()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, net.ErrClosed):
			s.drain()
			return fmt.Errorf("beanstalkd: accept: %w", err)
		default:
			// Out of file descriptors, or a connection reset before it was
			// taken: the listener stays open, so try again shortly.
			s.log.Warn("beanstalkd: accept", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(acceptPause):
			}
			continue
		}
		select {
		case s.slots <- struct{}{}:
		default:
			s.log.Warn("beanstalkd: connection refused: too many connections", "remote", nc.RemoteAddr().String(), "limit", s.cfg.MaxConns)
			nc.SetWriteDeadline(time.Now().Add(time.Second))
			nc.Write([]byte("OUT_OF_MEMORY\r\n"))
			nc.Close()
			continue
		}
		s.totalConns.Add(1)
		c := newConn(ctx, s, nc)
		if !s.track(c) {
			c.close()
			<-s.slots
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-s.slots }()
			c.serve()
		}()
	}
}

// track adds c to the live connections, unless the server drains.
func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		return false
	}
	s.live[c] = struct{}{}
	return true
}

// drain makes every live connection finish its command and close.
func (s *Server) drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.draining.Store(true)
	for c := range s.live {
		c.stop()
	}
}

// forget removes a closed connection's use of its tubes.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.live, c)
	s.tube(c.use).using--
	for _, t := range c.watched {
		s.tube(t).watching--
	}
	s.gc()
}

// tube returns the state of tube t, creating it. Callers hold s.mu.
func (s *Server) tube(t string) *tubeState {
	ts, ok := s.tubes[t]
	if !ok {
		ts = &tubeState{}
		s.tubes[t] = ts
	}
	return ts
}

// gc forgets the tubes no connection uses, watches or has paused.
// Callers hold s.mu.
func (s *Server) gc() {
	now := s.cfg.Now()
	for name, ts := range s.tubes {
		if ts.using <= 0 && ts.watching <= 0 && ts.waiting <= 0 && !now.Before(ts.pausedUntil) {
			delete(s.tubes, name)
		}
	}
}

// tubesChange applies one connection's change of use or watch list.
func (s *Server) tubesChange(fn func(tube func(string) *tubeState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s.tube)
	s.gc()
}

// knownTubes returns the tubes connections use or watch, sorted.
func (s *Server) knownTubes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.tubes))
	for t, ts := range s.tubes {
		if ts.using > 0 || ts.watching > 0 {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// pausedUntil returns when tube t's pause ends (the zero time: not paused).
func (s *Server) pausedUntil(t string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ts, ok := s.tubes[t]; ok {
		return ts.pausedUntil
	}
	return time.Time{}
}

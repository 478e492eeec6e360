package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress shows what a long run is doing: on a terminal one line rewritten
// in place (\r), elsewhere a plain line every ten seconds.
type progress struct {
	w   io.Writer
	tty bool
	mu  sync.Mutex
	n   int // width of the line on screen
}

func newProgress(w io.Writer, tty bool) *progress { return &progress{w: w, tty: tty} }

// Start shows status() until the returned function is called, which clears
// the line.
func (p *progress) Start(ctx context.Context, status func() string) (stop func()) {
	if p == nil || p.w == nil {
		return func() {}
	}
	every := 10 * time.Second
	if p.tty {
		every = 250 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tickUntil(ctx, every, func() { p.show(status()) })
	}()
	return func() {
		cancel()
		<-done
		p.Clear()
	}
}

func (p *progress) show(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty {
		fmt.Fprintln(p.w, line)
		return
	}
	pad := ""
	if len(line) < p.n {
		pad = strings.Repeat(" ", p.n-len(line))
	}
	fmt.Fprintf(p.w, "\r%s%s", line, pad)
	p.n = len(line)
}

// Clear erases the progress line from a terminal.
func (p *progress) Clear() {
	if p == nil || !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.n))
		p.n = 0
	}
}

// ClearingWriter wraps w (the same terminal the progress line is on) so that
// each write first erases the progress line; pass it to the logger.
func (p *progress) ClearingWriter(w io.Writer) io.Writer {
	return writerFunc(func(b []byte) (int, error) {
		p.Clear()
		return w.Write(b)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// si formats a count with a k/M suffix.
func si(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// tickUntil calls fn every d until ctx ends.
func tickUntil(ctx context.Context, d time.Duration, fn func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fn()
		}
	}
}

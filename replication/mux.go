package replication

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// The stream multiplexer carries the Raft traffic of every group of a node
// over its one Raft address. A group's layer dials as the single-group
// stream layer does (with mutual TLS when configured) and then writes a
// header naming the group; the mux accepts every connection, reads its
// header and hands it to that group's layer. A single group uses the plain
// TCP layer (tcplayer.go): no header, nothing to read.

const (
	// muxMagic opens every header, so that a connection from something
	// else than a group's layer (a single-group node, a stray client) is
	// told apart from a group number.
	muxMagic = "DWG1"
	// muxHeaderLen is the header's length: the magic and the group byte.
	muxHeaderLen = len(muxMagic) + 1
	// muxHeaderTimeout bounds how long a peer may take to complete the
	// TLS handshake and send its header; the header is read in its own
	// goroutine, so a slow peer only holds its own connection.
	muxHeaderTimeout = 5 * time.Second
	// muxQueue is how many connections wait for a group's Raft transport
	// to accept them; it accepts each at once, in a loop.
	muxQueue = 16
)

// mux multiplexes one Raft listener among groups.
type mux struct {
	base          *tcpLayer
	log           *slog.Logger
	headerTimeout time.Duration
	layers        []*muxLayer

	done      chan struct{} // closed by Close
	closeOnce sync.Once
	wg        sync.WaitGroup // the accept loop and the header readers
	mu        sync.Mutex
	reading   map[net.Conn]struct{} // connections whose header is being read
}

// newMux listens on bind for groups Raft groups (start serves it), advertising advertise
// (bind when empty); with serverTLS and clientTLS set, connections are
// mutual TLS, the header sent after the handshake.
func newMux(bind, advertise string, serverTLS, clientTLS *tls.Config, groups int, log *slog.Logger) (*mux, error) {
	if groups < 1 || groups > model.MaxGroups {
		return nil, fmt.Errorf("%w: raft stream multiplexer for %d groups; a group is a byte (1 to %d groups)", model.ErrInvalid, groups, model.MaxGroups)
	}
	base, err := newTCPLayer(bind, advertise, serverTLS, clientTLS)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &mux{base: base, log: log, headerTimeout: muxHeaderTimeout, done: make(chan struct{}), reading: map[net.Conn]struct{}{}}
	for g := range groups {
		m.layers = append(m.layers, &muxLayer{m: m, group: byte(g), conns: make(chan net.Conn, muxQueue), closed: make(chan struct{})})
	}
	return m, nil
}

// start accepts connections until Close. Settings (headerTimeout) are
// fixed before it.
func (m *mux) start() {
	m.wg.Add(1)
	go m.acceptLoop()
}

// Layer returns group g's stream layer.
func (m *mux) Layer(g int) raft.StreamLayer { return m.layers[g] }

// Addr is the advertised address, every group's.
func (m *mux) Addr() net.Addr { return m.base.Addr() }

// Close stops listening, drops the connections whose header is not read
// yet and ends every group's accepts.
func (m *mux) Close() error {
	var err error
	m.closeOnce.Do(func() {
		close(m.done)
		err = m.base.Close()
		m.mu.Lock()
		for c := range m.reading {
			c.Close()
		}
		m.mu.Unlock()
		m.wg.Wait()
		for _, l := range m.layers {
			l.drain()
		}
	})
	return err
}

// acceptLoop accepts connections until the mux closes and reads each one's
// header in a goroutine of its own.
func (m *mux) acceptLoop() {
	defer m.wg.Done()
	var backoff time.Duration
	for {
		c, err := m.base.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure (out of file descriptors): back off as
			// net/http does, and keep serving.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			m.log.Warn("raft listener: accept failed", "err", err, "retry_in", backoff)
			select {
			case <-m.done:
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		m.mu.Lock()
		select {
		case <-m.done:
			m.mu.Unlock()
			c.Close()
			return
		default:
		}
		m.reading[c] = struct{}{}
		m.wg.Add(1)
		m.mu.Unlock()
		go m.route(c)
	}
}

// route reads c's header and hands c to the group it names, or closes it.
func (m *mux) route(c net.Conn) {
	defer m.wg.Done()
	g, err := m.readHeader(c)
	m.mu.Lock()
	delete(m.reading, c)
	m.mu.Unlock()
	if err != nil {
		select {
		case <-m.done:
		default:
			m.log.Warn("raft listener: dropped a connection", "remote", c.RemoteAddr().String(), "err", err)
		}
		c.Close()
		return
	}
	m.layers[g].deliver(c)
}

// readHeader reads c's header within the header timeout (which includes
// the TLS handshake) and returns the group it names.
func (m *mux) readHeader(c net.Conn) (int, error) {
	if err := c.SetReadDeadline(time.Now().Add(m.headerTimeout)); err != nil {
		return 0, err
	}
	var h [muxHeaderLen]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return 0, fmt.Errorf("reading the group header: %w", err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return 0, err
	}
	if string(h[:len(muxMagic)]) != muxMagic {
		return 0, fmt.Errorf("header %q is not a Raft group's (%q and a group byte); is the peer started with the same --groups?", h[:], muxMagic)
	}
	g := int(h[len(muxMagic)])
	if g >= len(m.layers) {
		return 0, fmt.Errorf("header names group %d; this node runs groups 0 to %d: is the peer started with the same --groups?", g, len(m.layers)-1)
	}
	return g, nil
}

// muxLayer is one group's stream layer on a mux. Closing it ends that
// group's accepts only: the listener is the mux's.
type muxLayer struct {
	m         *mux
	group     byte
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

var _ raft.StreamLayer = (*muxLayer)(nil)

// Dial connects to a peer's mux and names this group.
func (l *muxLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := l.m.base.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	var h [muxHeaderLen]byte
	copy(h[:], muxMagic)
	h[len(muxMagic)] = l.group
	if timeout > 0 {
		if err := c.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
			c.Close()
			return nil, err
		}
	}
	if _, err := c.Write(h[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("raft group %d: sending the group header to %s: %w", l.group, address, err)
	}
	if err := c.SetWriteDeadline(time.Time{}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Accept waits for a peer's connection to this group.
func (l *muxLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
	case <-l.m.done:
	}
	return nil, fmt.Errorf("raft group %d: %w", l.group, net.ErrClosed)
}

// Close ends this group's accepts and drops what waits for them.
func (l *muxLayer) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	l.drain()
	return nil
}

// Addr is the advertised address, the mux's.
func (l *muxLayer) Addr() net.Addr { return l.m.Addr() }

// deliver queues c for the group's Accept, or closes it once the group or
// the mux is closed.
func (l *muxLayer) deliver(c net.Conn) {
	select {
	case <-l.closed:
		c.Close()
		return
	default:
	}
	select {
	case l.conns <- c:
		select {
		case <-l.closed:
			l.drain() // closed meanwhile: nobody accepts c
		default:
		}
	case <-l.closed:
		c.Close()
	case <-l.m.done:
		c.Close()
	}
}

// drain closes the connections queued for a closed group.
func (l *muxLayer) drain() {
	for {
		select {
		case c := <-l.conns:
			c.Close()
		default:
			return
		}
	}
}

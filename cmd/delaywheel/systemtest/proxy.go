package systemtest

import (
	"io"
	"net"
	"sync"
	"time"
)

// Proxy is a TCP forwarder that can refuse connections by source IP. A
// node's advertised Raft address is its proxy; since each node dials its
// peers from its own loopback IP, blocking an IP at a proxy cuts exactly
// that peer's connections to the proxy's node.
type Proxy struct {
	ln net.Listener

	mu      sync.Mutex
	target  string
	blocked map[string]bool
	holes   map[string]bool // blackholed source IPs
	conns   map[*proxyConn]struct{}
	closed  bool
	wg      sync.WaitGroup

	refused int
}

type proxyConn struct {
	p        *Proxy
	src      string
	down, up net.Conn // up is guarded by p.mu
	dead     bool     // guarded by p.mu
	once     sync.Once
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		c.p.mu.Lock()
		c.dead = true
		up := c.up
		c.p.mu.Unlock()
		if tc, ok := c.down.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // reset, like a dropped link
		}
		c.down.Close()
		if up != nil {
			up.Close()
		}
	})
}

// NewProxy listens on listen ("ip:0" picks a port) and forwards every
// accepted connection to target.
func NewProxy(listen, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, blocked: map[string]bool{}, holes: map[string]bool{}, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Retarget forwards new connections to target and drops the open ones,
// which lead to the old target.
func (p *Proxy) Retarget(target string) {
	p.mu.Lock()
	p.target = target
	var all []*proxyConn
	for c := range p.conns {
		all = append(all, c)
	}
	p.mu.Unlock()
	for _, c := range all {
		c.close()
	}
}

// Block refuses new connections from the given source IPs and drops the
// open ones.
func (p *Proxy) Block(ips ...string) {
	p.cut(p.blocked, ips, func(*proxyConn) bool { return true })
}

// Blackhole silently swallows traffic from the given source IPs: new
// connections are accepted but nothing is forwarded or answered, and open
// ones are dropped (as when a peer's host vanishes without a reset).
func (p *Proxy) Blackhole(ips ...string) {
	p.cut(p.holes, ips, func(c *proxyConn) bool { return c.up != nil })
}

// cut marks ips in set and closes the open connections from them that drop
// selects.
func (p *Proxy) cut(set map[string]bool, ips []string, drop func(*proxyConn) bool) {
	p.mu.Lock()
	var closing []*proxyConn
	for _, ip := range ips {
		set[ip] = true
	}
	for c := range p.conns {
		if set[c.src] && drop(c) {
			closing = append(closing, c)
		}
	}
	p.mu.Unlock()
	for _, c := range closing {
		c.close()
	}
}

// UnblockAll lifts every block.
func (p *Proxy) UnblockAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.blocked)
	clear(p.holes)
}

// Refused is how many connections the proxy has refused so far.
func (p *Proxy) Refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// Close stops the proxy and drops every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var all []*proxyConn
	for c := range p.conns {
		all = append(all, c)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range all {
		c.close()
	}
	p.wg.Wait()
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		src := ""
		if ta, ok := down.RemoteAddr().(*net.TCPAddr); ok {
			src = ta.IP.String()
		}
		c := &proxyConn{p: p, src: src, down: down}
		p.mu.Lock()
		if p.closed || p.blocked[src] {
			p.refused++
			p.mu.Unlock()
			c.close()
			continue
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		hole := p.holes[src]
		p.mu.Unlock()
		if hole {
			go p.swallow(c)
			continue
		}
		go p.serve(c)
	}
}

// forget closes c and forgets it.
func (p *Proxy) forget(c *proxyConn) {
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// swallow reads and discards what c sends until it is closed.
func (p *Proxy) swallow(c *proxyConn) {
	defer p.wg.Done()
	defer p.forget(c)
	_, _ = io.Copy(io.Discard, c.down)
}

func (p *Proxy) serve(c *proxyConn) {
	defer p.wg.Done()
	defer p.forget(c)
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	up, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		return
	}
	p.mu.Lock()
	c.up = up
	blocked := p.blocked[c.src] || p.closed || c.dead
	p.mu.Unlock()
	if blocked {
		up.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c.down); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c.down, up); done <- struct{}{} }()
	<-done
}

// Isolate cuts n's Raft traffic off from every other node of the cluster,
// both ways: n's proxy refuses (and drops) connections from their IPs and
// theirs refuse n's. HTTP is not affected.
func (c *Cluster) Isolate(n *Server) { c.cutOff(n, (*Proxy).Block) }

// Blackhole makes n's peers unreachable from n and n from them without a
// reset: connections hang, as when a host vanishes (a stopped container).
func (c *Cluster) Blackhole(n *Server) { c.cutOff(n, (*Proxy).Blackhole) }

// cutOff blocks, with block, the traffic between n and every other node,
// both ways.
func (c *Cluster) cutOff(n *Server, block func(p *Proxy, ips ...string)) {
	for _, o := range c.Servers() {
		if o != n {
			block(n.Proxy, o.IP)
			block(o.Proxy, n.IP)
		}
	}
}

// Heal lifts every block of every proxy.
func (c *Cluster) Heal() {
	for _, n := range c.Servers() {
		n.Proxy.UnblockAll()
	}
}

package replication

import (
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/delaywheel/delaywheel/replication/nettest"
)

// newTestMux starts a mux on a free loopback port; headerTimeout 0 keeps
// the default.
func newTestMux(t *testing.T, groups int, srv, cli *tls.Config, headerTimeout time.Duration) (*mux, *nettest.SyncBuffer) {
	t.Helper()
	logs := &nettest.SyncBuffer{}
	m, err := newMux(nettest.FreeAddr(t), "", srv, cli, groups, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if headerTimeout > 0 {
		m.headerTimeout = headerTimeout
	}
	m.start()
	t.Cleanup(func() { m.Close() })
	return m, logs
}

// accept returns the next connection group layer l accepts, within 30 s.
func accept(t *testing.T, l raft.StreamLayer) net.Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("accept: %v", r.err)
		}
		t.Cleanup(func() { r.c.Close() })
		return r.c
	case <-time.After(30 * time.Second):
		t.Fatal("no connection accepted within 30 s")
		return nil
	}
}

// exchange sends a line each way over a dialed and an accepted
// connection: the header is consumed, and what follows arrives intact.
func exchange(t *testing.T, dialed, accepted net.Conn, what string) {
	t.Helper()
	dialed.SetDeadline(time.Now().Add(30 * time.Second))
	accepted.SetDeadline(time.Now().Add(30 * time.Second))
	go dialed.Write([]byte(what))
	got := make([]byte, len(what))
	if _, err := io.ReadFull(accepted, got); err != nil || string(got) != what {
		t.Fatalf("accepted side read %q, %v; want %q", got, err, what)
	}
	go accepted.Write([]byte("re:" + what))
	back := make([]byte, len("re:"+what))
	if _, err := io.ReadFull(dialed, back); err != nil || string(back) != "re:"+what {
		t.Fatalf("dialed side read %q, %v", back, err)
	}
}

// wantDropped waits until the mux closes c.
func wantDropped(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	if _, err := c.Read(b[:]); err == nil || errors.Is(err, net.ErrClosed) || isTimeout(err) {
		t.Fatalf("%s: read %v, want the mux to close the connection", what, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestMuxRoutesGroups(t *testing.T) {
	a, _ := newTestMux(t, 2, nil, nil, 0)
	b, _ := newTestMux(t, 2, nil, nil, 0)
	if a.Layer(1).Addr().String() != a.Addr().String() {
		t.Fatalf("group layer advertises %s, the mux %s", a.Layer(1).Addr(), a.Addr())
	}
	// Dial both groups first, then accept: each group gets its own.
	d1, err := b.Layer(1).Dial(raft.ServerAddress(a.Addr().String()), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Close()
	d0, err := b.Layer(0).Dial(raft.ServerAddress(a.Addr().String()), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer d0.Close()
	exchange(t, d0, accept(t, a.Layer(0)), "to group 0")
	exchange(t, d1, accept(t, a.Layer(1)), "to group 1")

	// Closing a group's layer ends its accepts only.
	if err := a.Layer(0).Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Layer(0).Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept on a closed group: %v", err)
	}
	d0, err = b.Layer(0).Dial(raft.ServerAddress(a.Addr().String()), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer d0.Close()
	wantDropped(t, d0, "a connection to a closed group")
	d1, err = b.Layer(1).Dial(raft.ServerAddress(a.Addr().String()), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Close()
	exchange(t, d1, accept(t, a.Layer(1)), "group 1 still served")

	// Closing the mux closes the listener and every group's accepts.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Layer(1).Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept after the mux closed: %v", err)
	}
	if c, err := net.DialTimeout("tcp", a.Addr().String(), 30*time.Second); err == nil {
		c.Close()
		t.Fatal("the listener still accepts after the mux closed")
	}
}

func TestMuxDropsBadHeaders(t *testing.T) {
	m, logs := newTestMux(t, 2, nil, nil, 300*time.Millisecond)
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", m.Addr().String(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// A peer that sends nothing holds only its own connection.
	silent := dial()
	bad := dial()
	bad.Write([]byte("HTTP/1.1"))
	unknown := dial()
	unknown.Write([]byte(muxMagic + "\x05"))
	good := dial()
	good.Write([]byte(muxMagic + "\x01"))
	exchange(t, good, accept(t, m.Layer(1)), "past the others")

	wantDropped(t, bad, "bad magic")
	wantDropped(t, unknown, "unknown group")
	wantDropped(t, silent, "no header")
	nettest.WaitFor(t, nettest.Patience, "a warning for each dropped connection", func() bool {
		s := logs.String()
		return strings.Count(s, "dropped a connection") == 3 && strings.Contains(s, "names group 5") &&
			strings.Contains(s, "not a Raft group's")
	})
}

func TestMuxTLS(t *testing.T) {
	cert, key, ca := nettest.WriteCA(t, t.TempDir(), "mux")
	srv, cli, err := PeerTLS(cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := newTestMux(t, 3, srv, cli, 0)
	b, _ := newTestMux(t, 3, srv, cli, 0)
	d, err := b.Layer(2).Dial(raft.ServerAddress(a.Addr().String()), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, ok := d.(*tls.Conn); !ok {
		t.Fatalf("dialed a %T, want a TLS connection", d)
	}
	exchange(t, d, accept(t, a.Layer(2)), "over TLS")

	// A plain connection to a TLS mux fails its handshake and is dropped.
	plain, err := net.DialTimeout("tcp", a.Addr().String(), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plain.Write([]byte(muxMagic + "\x02"))
	wantDropped(t, plain, "a plain connection to a TLS listener")

	// A peer of another cluster (another CA) is refused.
	cert2, key2, ca2 := nettest.WriteCA(t, t.TempDir(), "other")
	_, cli2, err := PeerTLS(cert2, key2, ca2)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newTestMux(t, 3, srv, cli2, 0)
	if d, err := c.Layer(0).Dial(raft.ServerAddress(a.Addr().String()), 30*time.Second); err == nil {
		defer d.Close()
		wantDropped(t, d, "a peer with a certificate of another CA")
	}
}

package beanstalkd

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// pipeListener hands out one end of a net.Pipe: what the client writes at
// once, the server reads at once, so pipelined commands are all buffered
// when the first is parsed.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// pipelined serves f over a pipe, writes cmds in one write and returns
// the first n reply lines.
func pipelined(t *testing.T, f *fakeBackend, cfg Config, n int, cmds string) []string {
	t.Helper()
	ln := &pipeListener{conns: make(chan net.Conn, 1), done: make(chan struct{})}
	server, cl := net.Pipe()
	ln.conns <- server
	cfg.Now, cfg.Logger = f.Now, slog.New(slog.DiscardHandler)
	s := NewServer(cfg, f)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cl.Close()
		cancel()
		<-done
	})
	cl.SetDeadline(time.Now().Add(time.Minute)) // a guard against a hang, not a timing
	go func() { cl.Write([]byte(cmds)) }()
	r := bufio.NewReader(cl)
	var got []string
	for range n {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read reply: %v", err)
		}
		got = append(got, strings.TrimSuffix(l, "\r\n"))
	}
	return got
}

// Pipelined puts are enqueued together, one Put per run of puts, and
// answered in the commands' order, a refused put's answer in its place.
func TestPipelinedPutsAreOneBatch(t *testing.T) {
	f := newFake()
	got := pipelined(t, f, Config{MaxJobSize: 4}, 6, "put 1 0 10 1\r\na\r\nput 1 0 10 2\r\nbb\r\nput 1 0 10 6\r\ntoobig\r\n"+
		"put 1 0 10 1\r\nc\r\nuse other\r\nput 1 0 10 1\r\nd\r\n")
	want := []string{"INSERTED", "INSERTED", "JOB_TOO_BIG", "INSERTED", "USING other", "INSERTED"}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Fatalf("replies %q, want %q", got, want)
		}
	}
	if !slices.Equal(f.batches, []int{3, 1}) {
		t.Fatalf("puts enqueued in batches of %v, want [3 1]", f.batches)
	}
	var bodies []string
	for _, m := range f.puts {
		bodies = append(bodies, m.Topic+"/"+string(m.Body))
	}
	if !slices.Equal(bodies, []string{"default/a", "default/bb", "default/c", "other/d"}) {
		t.Fatalf("put %q", bodies)
	}
	ids := map[string]bool{}
	for _, l := range []string{got[0], got[1], got[3], got[5]} {
		ids[l] = true
	}
	if len(ids) != 4 {
		t.Fatalf("job ids not distinct: %q", got)
	}
}

// A batch the backend refuses as invalid is put again one by one, so that
// only the invalid put is refused.
func TestRefusedBatchIsPutOneByOne(t *testing.T) {
	f := newFake()
	f.refuse = func(body []byte) bool { return string(body) == "bad" }
	got := pipelined(t, f, Config{}, 3, "put 1 0 10 1\r\na\r\nput 1 0 10 3\r\nbad\r\nput 1 0 10 1\r\nc\r\n")
	if !strings.HasPrefix(got[0], "INSERTED ") || got[1] != "BAD_FORMAT" || !strings.HasPrefix(got[2], "INSERTED ") {
		t.Fatalf("replies %q", got)
	}
	if len(f.puts) != 2 {
		t.Fatalf("%d messages enqueued, want 2", len(f.puts))
	}
}

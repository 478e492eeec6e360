package beanstalkd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/wheel"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// start serves a server of f on a free port until the test ends.
func start(t *testing.T, f *fakeBackend, cfg Config) (addr string, stop func()) {
	t.Helper()
	_, addr, stop = startServer(t, f, cfg)
	return addr, stop
}

// startServer is start, which also returns the server.
func startServer(t *testing.T, f *fakeBackend, cfg Config) (s *Server, addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Now = f.Now
	cfg.Logger = slog.New(slog.DiscardHandler)
	s = NewServer(cfg, f)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	return s, ln.Addr().String(), stop
}

// client speaks the protocol line by line.
type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(time.Minute)) // a guard against a hang, not a timing
	return &client{t: t, c: c, r: bufio.NewReader(c)}
}

func (c *client) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, s+"\r\n"); err != nil {
		c.t.Fatal(err)
	}
}

// raw sends s as it is.
func (c *client) raw(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, s); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) line() string {
	c.t.Helper()
	s, err := c.r.ReadString('\n')
	if err != nil {
		c.t.Fatalf("read reply: %v", err)
	}
	if !strings.HasSuffix(s, "\r\n") {
		c.t.Fatalf("reply %q does not end in CRLF", s)
	}
	return strings.TrimSuffix(s, "\r\n")
}

// do sends cmd and wants the reply want.
func (c *client) do(cmd, want string) {
	c.t.Helper()
	c.send(cmd)
	if got := c.line(); got != want {
		c.t.Fatalf("%q: got %q, want %q", cmd, got, want)
	}
}

// data sends cmd, wants a reply starting with prefix followed by a
// length, and returns the reply's words and its data.
func (c *client) data(cmd, prefix string) ([]string, string) {
	c.t.Helper()
	c.send(cmd)
	l := c.line()
	f := strings.Fields(l)
	if !strings.HasPrefix(l, prefix) || len(f) < 2 {
		c.t.Fatalf("%q: got %q, want %s…", cmd, l, prefix)
	}
	n, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		c.t.Fatalf("%q: reply %q: %v", cmd, l, err)
	}
	b := make([]byte, n+2)
	if _, err := io.ReadFull(c.r, b); err != nil || string(b[n:]) != "\r\n" {
		c.t.Fatalf("%q: data %q: %v", cmd, b, err)
	}
	return f, string(b[:n])
}

// put puts body and returns its job id.
func (c *client) put(pri, delay, ttr int, body string) string {
	c.t.Helper()
	c.send(fmt.Sprintf("put %d %d %d %d\r\n%s", pri, delay, ttr, len(body), body))
	l := c.line()
	id, ok := strings.CutPrefix(l, "INSERTED ")
	if !ok {
		c.t.Fatalf("put: got %q", l)
	}
	return id
}

// yaml parses a YAML dictionary of stats.
func yaml(s string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok {
			out[k] = v
		}
	}
	return out
}

func TestPutReserveDelete(t *testing.T) {
	f := newFake()
	addr, _ := start(t, f, Config{})
	c := dial(t, addr)
	c.do("use jobs", "USING jobs")
	c.do("list-tube-used", "USING jobs")
	id := c.put(10, 0, 60, "hello")
	if want, _ := JobID(model.ID{Index: 1}); id != strconv.FormatUint(want, 10) {
		t.Fatalf("job id %s, want %d", id, want)
	}
	if got := f.puts[0]; got.Topic != "jobs" || got.Priority != PriorityOf(10) || got.TTRMs != 60000 || got.MaxAttempts != 1000 {
		t.Fatalf("put as %+v", got)
	}
	c.put(0, 0, 0, "")
	if got := f.puts[1]; got.TTRMs != 1000 || got.Body != nil || got.Priority != 1024 {
		t.Fatalf("put with ttr 0 as %+v; want a ttr of one second", got)
	}
	c.do("delete 524288", "DELETED") // a ready job, cancelled
	_, body := c.data("peek "+id, "FOUND "+id)
	if body != "hello" {
		t.Fatalf("peek: %q", body)
	}
	c.do("watch jobs", "WATCHING 2")
	c.do("ignore default", "WATCHING 1")
	c.do("ignore jobs", "NOT_IGNORED")
	_, watched := c.data("list-tubes-watched", "OK")
	if watched != "---\n- jobs\n" {
		t.Fatalf("list-tubes-watched: %q", watched)
	}
	f2, body := c.data("reserve", "RESERVED "+id)
	if body != "hello" || f2[1] != id {
		t.Fatalf("reserve: %v %q", f2, body)
	}
	_, st := c.data("stats-job "+id, "OK")
	if y := yaml(st); y["state"] != "reserved" || y["tube"] != "jobs" || y["pri"] != "10" || y["ttr"] != "60" || y["reserves"] != "1" {
		t.Fatalf("stats-job: %q", st)
	}
	c.do("delete "+id, "DELETED")
	c.do("delete "+id, "NOT_FOUND")
	c.do("reserve-with-timeout 0", "TIMED_OUT")
}

// A put that reached no leader is made again, and its job is due at the
// first millisecond not before its delay.
func TestPutRetriesUnsentAndRoundsUp(t *testing.T) {
	f := newFake()
	f.unsent = 2
	f.advance(1500 * time.Microsecond)
	addr, _ := start(t, f, Config{})
	c := dial(t, addr)
	c.put(1, 1, 1, "x")
	if len(f.puts) != 1 || f.unsent != 0 {
		t.Fatalf("puts %d, unsent left %d", len(f.puts), f.unsent)
	}
	if want := f.Now().Add(time.Second).UnixMilli() + 1; f.puts[0].DeliverAtMs != want {
		t.Fatalf("due at %d, want %d", f.puts[0].DeliverAtMs, want)
	}
}

func TestDelayReleaseBuryKick(t *testing.T) {
	f := newFake()
	addr, _ := start(t, f, Config{})
	c := dial(t, addr)
	id := c.put(1024, 5, 10, "later")
	c.do("reserve-with-timeout 0", "TIMED_OUT")
	c.do("peek-ready", "NOT_FOUND")
	if _, body := c.data("peek-delayed", "FOUND "+id); body != "later" {
		t.Fatalf("peek-delayed: %q", body)
	}
	_, st := c.data("stats-tube default", "OK")
	if y := yaml(st); y["current-jobs-delayed"] != "1" || y["current-jobs-ready"] != "0" || y["name"] != "default" {
		t.Fatalf("stats-tube: %q", st)
	}
	f.advance(5 * time.Second)
	c.do("peek-delayed", "NOT_FOUND")
	c.data("peek-ready", "FOUND "+id)
	c.data("reserve-with-timeout 1", "RESERVED "+id)
	c.do("touch "+id, "TOUCHED")
	c.do("release "+id+" 1024 3", "RELEASED")
	c.do("release "+id+" 1024 3", "NOT_FOUND")
	c.do("reserve-with-timeout 0", "TIMED_OUT")
	c.do("kick-job "+id, "KICKED") // delayed: due now
	c.data("reserve-with-timeout 0", "RESERVED "+id)
	c.do("bury "+id+" 5", "BURIED")
	_, st = c.data("stats-job "+id, "OK")
	if yaml(st)["state"] != "buried" {
		t.Fatalf("stats-job after bury: %q", st)
	}
	c.data("peek-buried", "FOUND "+id)
	c.do("reserve-with-timeout 0", "TIMED_OUT")
	c.do("kick 10", "KICKED 1")
	c.do("kick 10", "KICKED 0")
	c.data("reserve-with-timeout 0", "RESERVED "+id)
	c.do("bury "+id+" 5", "BURIED")
	c.do("kick-job "+id, "KICKED")
	c.do("kick-job "+id, "NOT_FOUND") // ready now
	c.do("delete "+id, "DELETED")     // a ready job is cancelled
	c.do("kick-job "+id, "NOT_FOUND")
	c.do("peek "+id, "NOT_FOUND")
}

// kick moves buried jobs when the used tube has some, else delayed ones,
// the first due first; kick-job moves either.
func TestKickDelayed(t *testing.T) {
	f := newFake()
	addr, _ := start(t, f, Config{})
	c := dial(t, addr)
	c.do("use jobs", "USING jobs")
	c.do("watch jobs", "WATCHING 2")
	late := c.put(1024, 30, 60, "late")
	soon := c.put(1024, 10, 60, "soon")
	mid := c.put(1024, 20, 60, "mid")
	buried := c.put(1024, 0, 60, "buried")
	c.data("reserve-with-timeout 0", "RESERVED "+buried)
	c.do("bury "+buried+" 1", "BURIED")
	c.do("use other", "USING other")
	other := c.put(1024, 10, 60, "other")
	c.do("use jobs", "USING jobs")
	for _, step := range []struct{ cmd, want string }{
		{"kick 10", "KICKED 1"}, // the buried job only
		{"reserve-with-timeout 0", "RESERVED " + buried},
		{"delete " + buried, "DELETED"},
		{"kick 0", "KICKED 0"},
		{"reserve-with-timeout 0", "TIMED_OUT"},
		{"kick 2", "KICKED 2"}, // no buried job: the two delayed ones due first
		{"reserve-with-timeout 0", "RESERVED " + soon},
		{"reserve-with-timeout 0", "RESERVED " + mid},
		{"reserve-with-timeout 0", "TIMED_OUT"},
		{"kick 10", "KICKED 1"},
		{"reserve-with-timeout 0", "RESERVED " + late},
		{"kick 10", "KICKED 0"}, // the other tube's delayed job stays
		{"kick-job " + other, "KICKED"},
		{"kick-job " + other, "NOT_FOUND"}, // ready now
	} {
		c.send(step.cmd)
		got := c.line()
		if strings.HasPrefix(got, "RESERVED ") {
			c.line() // the body
			got = strings.Join(strings.Fields(got)[:2], " ")
		}
		if got != step.want {
			t.Fatalf("%q: got %q, want %q", step.cmd, got, step.want)
		}
	}
	c.do("use other", "USING other")
	c.data("peek-ready", "FOUND "+other)
	c.do("use jobs", "USING jobs")
	c.put(1024, 10, 60, "again")
	f.mu.Lock()
	f.err = fmt.Errorf("%w: election", model.ErrUnavailable)
	f.mu.Unlock()
	c.do("kick 10", "INTERNAL_ERROR")
}

func TestErrorsReplies(t *testing.T) {
	f := newFake()
	addr, _ := start(t, f, Config{MaxJobSize: 4, MaxWatched: 2})
	c := dial(t, addr)
	c.do("frobnicate", "UNKNOWN_COMMAND")
	c.do("put 1 0 1", "BAD_FORMAT")
	c.do("use a+b", "BAD_FORMAT")
	c.send("put 1 0 1 5\r\nabcde")
	if got := c.line(); got != "JOB_TOO_BIG" {
		t.Fatalf("put over the size: %q", got)
	}
	c.raw("put 1 0 1 2\r\nabXY")
	if got := c.line(); got != "EXPECTED_CRLF" {
		t.Fatalf("put without CRLF: %q", got)
	}
	if len(f.puts) != 0 {
		t.Fatalf("bad puts enqueued %v", f.puts)
	}
	c.send("put 1 315360001 1 1\r\na") // over ten years
	if got := c.line(); got != "BAD_FORMAT" {
		t.Fatalf("put delayed too far: %q", got)
	}
	c.do("watch a", "WATCHING 2")
	c.do("watch b", "OUT_OF_MEMORY")
	c.do("release 1 1 1", "NOT_FOUND")
	c.do("bury 1 1", "NOT_FOUND")
	c.do("touch 1", "NOT_FOUND")
	c.do("reserve-job 1", "NOT_FOUND")
	c.do("stats-tube nosuch", "NOT_FOUND")
	c.do("pause-tube nosuch 1", "NOT_FOUND")
	c.do("peek-delayed", "NOT_FOUND")
	f.mu.Lock()
	f.err = fmt.Errorf("%w: slow down", model.ErrOverloaded)
	f.mu.Unlock()
	c.send("put 1 0 1 1\r\na")
	if got := c.line(); got != "OUT_OF_MEMORY" {
		t.Fatalf("put while overloaded: %q", got)
	}
	f.mu.Lock()
	f.err = fmt.Errorf("%w: election", model.ErrUnavailable)
	f.mu.Unlock()
	c.do("reserve-with-timeout 0", "TIMED_OUT")
	// As beanstalkd: a line over MaxLine bytes is BAD_FORMAT and read to its
	// end, and the connection stays open.
	c.send("use " + strings.Repeat("a", MaxLine))
	if got := c.line(); got != "BAD_FORMAT" {
		t.Fatalf("long line: %q", got)
	}
	c.do("list-tube-used", "USING default")
}

func TestStatsAndTubes(t *testing.T) {
	f := newFake()
	addr, _ := start(t, f, Config{MaxJobSize: 1234})
	c, d := dial(t, addr), dial(t, addr)
	c.do("use emails", "USING emails")
	c.put(1, 0, 1, "a")
	c.put(1, 9, 1, "b")
	d.do("watch other", "WATCHING 2")
	_, list := c.data("list-tubes", "OK")
	if list != "---\n- default\n- emails\n- other\n" {
		t.Fatalf("list-tubes: %q", list)
	}
	_, st := c.data("stats", "OK")
	y := yaml(st)
	for k, want := range map[string]string{"max-job-size": "1234", "current-jobs-ready": "1", "current-jobs-delayed": "1",
		"cmd-put": "2", "current-connections": "2", "total-connections": "2", "current-tubes": "3", "draining": "false"} {
		if y[k] != want {
			t.Errorf("stats %s = %q, want %q", k, y[k], want)
		}
	}
	c.do("pause-tube emails 60", "PAUSED")
	c.do("watch emails", "WATCHING 2")
	c.do("ignore default", "WATCHING 1")
	c.do("reserve-with-timeout 0", "TIMED_OUT") // paused
	_, st = c.data("stats-tube emails", "OK")
	if y := yaml(st); y["pause"] != "60" || y["pause-time-left"] != "60" || y["current-using"] != "1" || y["cmd-pause-tube"] != "1" {
		t.Fatalf("stats-tube of a paused tube: %q", st)
	}
	f.advance(time.Minute)
	c.data("reserve-with-timeout 0", "RESERVED")
}

// As in beanstalkd, a tube that no job is in and no connection uses or
// watches is gone, though its topic stays on the node.
func TestEmptiedTubeIsGone(t *testing.T) {
	addr, _ := start(t, newFake(), Config{})
	c := dial(t, addr)
	c.do("use gone", "USING gone")
	id := c.put(1024, 0, 60, "x")
	c.do("delete "+id, "DELETED")
	c.do("use default", "USING default")
	c.do("stats-tube gone", "NOT_FOUND")
	c.do("pause-tube gone 1", "NOT_FOUND")
	if _, list := c.data("list-tubes", "OK"); list != "---\n- default\n" {
		t.Fatalf("list-tubes: %q", list)
	}
	if _, st := c.data("stats", "OK"); yaml(st)["current-tubes"] != "1" {
		t.Fatalf("stats: %q", st)
	}
}

func TestReserveWaitsOnManyTubes(t *testing.T) {
	f := newFake()
	f.group = func(topic string) int { return len(topic) }
	addr, _ := start(t, f, Config{})
	w, p := dial(t, addr), dial(t, addr)
	w.do("watch a", "WATCHING 2")
	w.do("watch bb", "WATCHING 3")
	w.send("reserve")
	p.do("use bb", "USING bb")
	id := p.put(1, 0, 30, "x")
	if want, _ := JobID(model.ID{Index: 1, Seq: 2 << 24}); id != strconv.FormatUint(want, 10) {
		t.Fatalf("job id %s of group 2, want %d", id, want)
	}
	l := w.line()
	if l != "RESERVED "+id+" 1" {
		t.Fatalf("reserve over three tubes: %q", l)
	}
}

func TestDeadlineSoon(t *testing.T) {
	f := newFake()
	addr, _ := start(t, f, Config{})
	c := dial(t, addr)
	id := c.put(1, 0, 2, "x")
	c.data("reserve", "RESERVED "+id)
	f.advance(1500 * time.Millisecond)
	c.do("reserve-with-timeout 5", "DEADLINE_SOON")
	c.do("touch "+id, "TOUCHED")
	f.advance(2500 * time.Millisecond) // the lease ended: the node took the job back
	c.do("touch "+id, "NOT_FOUND")
	c.data("reserve-with-timeout 0", "RESERVED "+id)
}

// A job whose time-to-run ran out is ready again, as in beanstalkd: a
// delete deletes it, though the connection that reserved it sends it, and
// though the node still has it reserved (late: its lease's slot has not
// fired yet). A job another connection holds is not deleted.
func TestDeleteAfterTimeToRun(t *testing.T) {
	for _, late := range []bool{false, true} {
		f := newFake()
		f.late = late
		addr, _ := start(t, f, Config{})
		c, d := dial(t, addr), dial(t, addr)
		id := c.put(1, 0, 1, "x")
		c.data("reserve", "RESERVED "+id)
		f.advance(2 * time.Second)
		if _, st := c.data("stats-job "+id, "OK"); yaml(st)["state"] != "ready" || yaml(st)["time-left"] != "0" {
			t.Fatalf("stats-job of a job whose time-to-run ran out (late %v): %q", late, st)
		}
		c.do("delete "+id, "DELETED")
		c.do("peek "+id, "NOT_FOUND")
		id = c.put(1, 0, 1, "y")
		d.data("reserve", "RESERVED "+id)
		f.advance(2 * time.Second)
		c.do("delete "+id, "DELETED")
		d.do("delete "+id, "NOT_FOUND")
		id = c.put(1, 0, 60, "z")
		d.data("reserve", "RESERVED "+id)
		c.do("delete "+id, "NOT_FOUND")
		d.do("delete "+id, "DELETED")
	}
}

// A job reserved through a leader's HTTP API carries only the end of its
// lease: a touch keeps it held for as long again.
func TestTouchOfAForwardedJob(t *testing.T) {
	f := newFake()
	f.bare = true
	addr, _ := start(t, f, Config{})
	c := dial(t, addr)
	id := c.put(1, 0, 30, "x")
	c.data("reserve", "RESERVED "+id)
	f.advance(10 * time.Second)
	c.do("touch "+id, "TOUCHED")
	f.advance(10 * time.Second)
	c.do("reserve-with-timeout 0", "TIMED_OUT")
	c.do("delete "+id, "DELETED")
}

func TestClosedConnectionReleasesItsJobs(t *testing.T) {
	f := newFake()
	addr, _ := start(t, f, Config{})
	c := dial(t, addr)
	id := c.put(1, 0, 60, "x")
	c.data("reserve", "RESERVED "+id)
	d := dial(t, addr)
	d.do("reserve-with-timeout 0", "TIMED_OUT")
	c.send("quit")
	d.data("reserve-with-timeout 60", "RESERVED "+id) // once c's job went back
}

// A client that closes its side while its reserve waits is answered
// TIMED_OUT, as beanstalkd answers a half-closed connection, and its
// connection ends: it does not wait on to take a job no one would get.
func TestReserveOfAHalfClosedConnection(t *testing.T) {
	f := newFake()
	addr, _ := start(t, f, Config{})
	c, d := dial(t, addr), dial(t, addr)
	c.send("reserve")
	waitFor(t, d, "current-waiting", "1")
	if err := c.c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got := c.line(); got != "TIMED_OUT" {
		t.Fatalf("a waiting reserve of a half-closed connection: %q", got)
	}
	if _, err := c.r.ReadString('\n'); err != io.EOF {
		t.Fatalf("the connection stays open after its client closed: %v", err)
	}
	waitFor(t, d, "current-waiting", "0")
	waitFor(t, d, "current-connections", "1")
	// A job due now still goes to a client that closed its side.
	e := dial(t, addr)
	id := d.put(1, 0, 60, "y")
	e.raw("reserve\r\n")
	if err := e.c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got := e.line(); got != "RESERVED "+id+" 1" {
		t.Fatalf("a reserve of a half-closed connection with a job due: %q", got)
	}
}

func TestDrain(t *testing.T) {
	f := newFake()
	addr, stop := start(t, f, Config{})
	c := dial(t, addr)
	c.send("reserve")
	waitFor(t, dial(t, addr), "current-waiting", "1")
	stop()
	if got := c.line(); got != "DRAINING" {
		t.Fatalf("a waiting reserve at shutdown: %q", got)
	}
	if _, err := c.r.ReadString('\n'); err != io.EOF {
		t.Fatalf("the connection stays open after the drain: %v", err)
	}
}

func TestConnectionLimit(t *testing.T) {
	f := newFake()
	addr, _ := start(t, f, Config{MaxConns: 1})
	c := dial(t, addr)
	c.do("list-tube-used", "USING default")
	d := dial(t, addr)
	if got := d.line(); got != "OUT_OF_MEMORY" {
		t.Fatalf("a connection over the limit: %q", got)
	}
}

func TestUnpackableIDGoesDead(t *testing.T) {
	f := newFake()
	addr, _ := start(t, f, Config{})
	big := model.ID{Index: 3, Seq: 5000}
	f.add(big, "default", "from a big batch")
	c := dial(t, addr)
	c.do("reserve-with-timeout 0", "TIMED_OUT")
	if v, err := f.Get(context.Background(), big); err != nil || v.State != wheel.StateDead {
		t.Fatalf("an unpackable message is %v, %v; want dead", v.State, err)
	}
}

// waitFor asks stats until its key has the value want.
func waitFor(t *testing.T, c *client, key, want string) {
	t.Helper()
	for {
		_, st := c.data("stats", "OK")
		if yaml(st)[key] == want {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// A listener closed under Serve ends it with the error, once its live
// connections are closed.
func TestListenerClosed(t *testing.T) {
	f := newFake()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(Config{Now: f.Now, Logger: slog.New(slog.DiscardHandler)}, f)
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), ln) }()
	c := dial(t, ln.Addr().String())
	c.do("list-tube-used", "USING default")
	ln.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Serve after its listener closed: %v", err)
	}
	if _, err := c.r.ReadString('\n'); err != io.EOF {
		t.Fatalf("a connection stays open: %v", err)
	}
}

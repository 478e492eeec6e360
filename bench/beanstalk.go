package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// bsConn is a minimal client of beanstalkd's text protocol: just the
// commands the harness needs. It is not safe for concurrent use.
type bsConn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

// bsJob is a job to put.
type bsJob struct {
	Pri   uint32
	Delay int // whole seconds
	TTR   int // seconds
	Body  []byte
}

func newBSConn(c net.Conn) *bsConn {
	return &bsConn{c: c, r: bufio.NewReaderSize(c, 64<<10), w: bufio.NewWriterSize(c, 64<<10)}
}

// dialBeanstalk connects to the server at addr.
func dialBeanstalk(ctx context.Context, addr string) (*bsConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("beanstalkd: %w", err)
	}
	return newBSConn(c), nil
}

func (b *bsConn) Close() error { return b.c.Close() }

// bsError is an answer of the server that is not the expected one.
type bsError struct {
	Cmd, Reply string
}

func (e *bsError) Error() string { return fmt.Sprintf("beanstalkd: %s: %s", e.Cmd, e.Reply) }

// exchange runs fn with the connection's deadline bound to ctx: when ctx
// ends, a blocked read or write fails at once (and the connection is then
// unusable).
func (b *bsConn) exchange(ctx context.Context, fn func() error) error {
	if d, ok := ctx.Deadline(); ok {
		b.c.SetDeadline(d)
	} else {
		b.c.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { b.c.SetDeadline(time.Unix(1, 0)) })
	err := fn()
	stop()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err) // the connection's deadline fired first
	}
	return err
}

// line reads one reply line without its CRLF.
func (b *bsConn) line() (string, error) {
	s, err := b.r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("beanstalkd: read reply: %w", err)
	}
	return strings.TrimSuffix(strings.TrimSuffix(s, "\n"), "\r"), nil
}

// simple sends one command and expects a reply starting with want.
func (b *bsConn) simple(ctx context.Context, cmd, want string) (string, error) {
	var reply string
	err := b.exchange(ctx, func() error {
		b.w.WriteString(cmd + "\r\n")
		if err := b.w.Flush(); err != nil {
			return fmt.Errorf("beanstalkd: %s: %w", cmd, err)
		}
		var err error
		if reply, err = b.line(); err != nil {
			return err
		}
		if !strings.HasPrefix(reply, want) {
			return &bsError{Cmd: cmd, Reply: reply}
		}
		return nil
	})
	return reply, err
}

// Use makes puts go to tube.
func (b *bsConn) Use(ctx context.Context, tube string) error {
	_, err := b.simple(ctx, "use "+tube, "USING "+tube)
	return err
}

// WatchOnly makes reserves take from tube alone.
func (b *bsConn) WatchOnly(ctx context.Context, tube string) error {
	if _, err := b.simple(ctx, "watch "+tube, "WATCHING "); err != nil {
		return err
	}
	if tube == "default" {
		return nil
	}
	_, err := b.simple(ctx, "ignore default", "WATCHING ")
	return err
}

// Put sends the jobs pipelined and returns their ids in order.
func (b *bsConn) Put(ctx context.Context, jobs []bsJob) ([]uint64, error) {
	ids := make([]uint64, len(jobs))
	err := b.exchange(ctx, func() error {
		for _, j := range jobs {
			fmt.Fprintf(b.w, "put %d %d %d %d\r\n", j.Pri, max(j.Delay, 0), j.TTR, len(j.Body))
			b.w.Write(j.Body)
			b.w.WriteString("\r\n")
		}
		if err := b.w.Flush(); err != nil {
			return fmt.Errorf("beanstalkd: put: %w", err)
		}
		var first error
		for i := range jobs {
			reply, err := b.line()
			if err != nil {
				return err
			}
			id, ok := strings.CutPrefix(reply, "INSERTED ")
			if !ok {
				if first == nil {
					first = &bsError{Cmd: fmt.Sprintf("put (job %d of %d)", i, len(jobs)), Reply: reply}
				}
				continue
			}
			if ids[i], err = strconv.ParseUint(id, 10, 64); err != nil {
				return fmt.Errorf("beanstalkd: put: reply %q: %w", reply, err)
			}
		}
		return first
	})
	return ids, err
}

// ReserveWithTimeout waits up to secs seconds for a job; ok is false when
// none came (TIMED_OUT, or DEADLINE_SOON for a job this connection holds).
// When deleteFirst is not 0 that job is deleted in the same round trip.
func (b *bsConn) ReserveWithTimeout(ctx context.Context, secs int, deleteFirst uint64) (id uint64, body []byte, ok bool, err error) {
	err = b.exchange(ctx, func() error {
		if deleteFirst != 0 {
			fmt.Fprintf(b.w, "delete %d\r\n", deleteFirst)
		}
		fmt.Fprintf(b.w, "reserve-with-timeout %d\r\n", secs)
		if err := b.w.Flush(); err != nil {
			return fmt.Errorf("beanstalkd: reserve: %w", err)
		}
		var derr error
		if deleteFirst != 0 {
			reply, err := b.line()
			if err != nil {
				return err
			}
			if reply != "DELETED" {
				derr = &bsError{Cmd: fmt.Sprintf("delete %d", deleteFirst), Reply: reply}
			}
		}
		reply, err := b.line()
		if err != nil {
			return err
		}
		switch {
		case reply == "TIMED_OUT" || reply == "DEADLINE_SOON":
			return derr
		case strings.HasPrefix(reply, "RESERVED "):
		default:
			return errors.Join(derr, &bsError{Cmd: "reserve-with-timeout", Reply: reply})
		}
		f := strings.Fields(reply)
		if len(f) != 3 {
			return &bsError{Cmd: "reserve-with-timeout", Reply: reply}
		}
		if id, err = strconv.ParseUint(f[1], 10, 64); err != nil {
			return fmt.Errorf("beanstalkd: reserve: reply %q: %w", reply, err)
		}
		n, err := strconv.Atoi(f[2])
		if err != nil || n < 0 {
			return fmt.Errorf("beanstalkd: reserve: reply %q: bad length", reply)
		}
		body = make([]byte, n+2)
		if _, err := io.ReadFull(b.r, body); err != nil {
			return fmt.Errorf("beanstalkd: reserve: read job: %w", err)
		}
		if !bytes.HasSuffix(body, []byte("\r\n")) {
			return errors.New("beanstalkd: reserve: job not followed by CRLF")
		}
		body, ok = body[:n], true
		return derr
	})
	return id, body, ok, err
}

// Delete deletes a job.
func (b *bsConn) Delete(ctx context.Context, id uint64) error {
	_, err := b.simple(ctx, fmt.Sprintf("delete %d", id), "DELETED")
	return err
}

// Stats runs a stats command ("stats", "stats-tube t") and parses its YAML
// dictionary.
func (b *bsConn) Stats(ctx context.Context, cmd string) (map[string]string, error) {
	out := map[string]string{}
	err := b.exchange(ctx, func() error {
		b.w.WriteString(cmd + "\r\n")
		if err := b.w.Flush(); err != nil {
			return fmt.Errorf("beanstalkd: %s: %w", cmd, err)
		}
		reply, err := b.line()
		if err != nil {
			return err
		}
		size, ok := strings.CutPrefix(reply, "OK ")
		if !ok {
			return &bsError{Cmd: cmd, Reply: reply}
		}
		n, err := strconv.Atoi(size)
		if err != nil || n < 0 {
			return fmt.Errorf("beanstalkd: %s: reply %q: bad length", cmd, reply)
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(b.r, data); err != nil {
			return fmt.Errorf("beanstalkd: %s: %w", cmd, err)
		}
		for _, l := range strings.Split(string(data[:n]), "\n") {
			k, v, ok := strings.Cut(l, ":")
			if ok && !strings.HasPrefix(k, "-") {
				out[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
			}
		}
		return nil
	})
	return out, err
}

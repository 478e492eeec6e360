package bench

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeBeanstalkd answers a scripted conversation over net.Pipe: for each
// step it reads exactly the bytes the client must send and writes the
// reply.
func fakeBeanstalkd(t *testing.T, steps [][2]string) *bsConn {
	t.Helper()
	cli, srv := net.Pipe()
	t.Cleanup(func() { cli.Close(); srv.Close() })
	errc := make(chan error, 1)
	go func() {
		r := bufio.NewReader(srv)
		for _, st := range steps {
			got := make([]byte, len(st[0]))
			if _, err := io.ReadFull(r, got); err != nil {
				errc <- err
				return
			}
			if string(got) != st[0] {
				errc <- errors.New("client sent " + strings.ReplaceAll(string(got), "\r\n", `\r\n`) + ", want " + strings.ReplaceAll(st[0], "\r\n", `\r\n`))
				return
			}
			if _, err := srv.Write([]byte(st[1])); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	t.Cleanup(func() {
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("fake beanstalkd: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("fake beanstalkd: conversation did not finish")
		}
	})
	return newBSConn(cli)
}

func TestBeanstalkProtocol(t *testing.T) {
	ctx := t.Context()
	const stats = "---\nname: bench-1\ncurrent-jobs-ready: 0\ncurrent-jobs-delayed: 1\n"
	c := fakeBeanstalkd(t, [][2]string{
		{"use bench-1\r\n", "USING bench-1\r\n"},
		{"put 1024 2 60 5\r\nhello\r\nput 1024 0 60 3\r\nabc\r\n", "INSERTED 7\r\nINSERTED 8\r\n"},
		{"watch bench-1\r\n", "WATCHING 2\r\n"},
		{"ignore default\r\n", "WATCHING 1\r\n"},
		{"reserve-with-timeout 1\r\n", "RESERVED 7 5\r\nhello\r\n"},
		{"delete 7\r\nreserve-with-timeout 1\r\n", "DELETED\r\nTIMED_OUT\r\n"},
		{"stats-tube bench-1\r\n", "OK " + strconv.Itoa(len(stats)) + "\r\n" + stats + "\r\n"},
		{"put 1024 0 60 3\r\nabc\r\n", "JOB_TOO_BIG\r\n"},
		{"delete 9\r\n", "NOT_FOUND\r\n"},
	})
	if err := c.Use(ctx, "bench-1"); err != nil {
		t.Fatal(err)
	}
	ids, err := c.Put(ctx, []bsJob{{Pri: 1024, Delay: 2, TTR: 60, Body: []byte("hello")}, {Pri: 1024, Delay: -3, TTR: 60, Body: []byte("abc")}})
	if err != nil || len(ids) != 2 || ids[0] != 7 || ids[1] != 8 {
		t.Fatalf("put: %v %v", ids, err)
	}
	if err := c.WatchOnly(ctx, "bench-1"); err != nil {
		t.Fatal(err)
	}
	id, body, ok, err := c.ReserveWithTimeout(ctx, 1, 0)
	if err != nil || !ok || id != 7 || string(body) != "hello" {
		t.Fatalf("reserve: %d %q %v %v", id, body, ok, err)
	}
	if _, _, ok, err := c.ReserveWithTimeout(ctx, 1, 7); err != nil || ok {
		t.Fatalf("delete and reserve: %v %v, want a timeout", ok, err)
	}
	st, err := c.Stats(ctx, "stats-tube bench-1")
	if err != nil || st["name"] != "bench-1" || st["current-jobs-delayed"] != "1" {
		t.Fatalf("stats: %v %v", st, err)
	}
	_, err = c.Put(ctx, []bsJob{{Pri: 1024, TTR: 60, Body: []byte("abc")}})
	var be *bsError
	if !errors.As(err, &be) || be.Reply != "JOB_TOO_BIG" {
		t.Fatalf("put too big: %v", err)
	}
	if err := c.Delete(ctx, 9); !errors.As(err, &be) || be.Reply != "NOT_FOUND" {
		t.Fatalf("delete unknown: %v", err)
	}
}

// TestBeanstalkConsumer checks that the consumer stamps and decodes a job and
// deletes it in the round trip of the next reserve.
func TestBeanstalkConsumer(t *testing.T) {
	body := encodeBody(42, 20, padding(20))
	c := fakeBeanstalkd(t, [][2]string{
		{"reserve-with-timeout 2\r\n", "RESERVED 3 20\r\n" + body + "\r\n"},
		{"delete 3\r\nreserve-with-timeout 2\r\n", "DELETED\r\nTIMED_OUT\r\n"},
	})
	cons := &bsConsumer{c: c, secs: 2}
	before := time.Now()
	b, err := cons.Next(t.Context())
	if err != nil || len(b.Seqs) != 1 || b.Seqs[0] != 42 || b.At.Before(before) {
		t.Fatalf("first job: %+v %v", b, err)
	}
	b, err = cons.Next(t.Context())
	if err != nil || len(b.Seqs) != 0 || cons.pending != 0 {
		t.Fatalf("timeout: %+v %v pending %d", b, err, cons.pending)
	}
}

func TestBeanstalkContextCancel(t *testing.T) {
	cli, srv := net.Pipe()
	defer srv.Close()
	go io.Copy(io.Discard, srv) // swallow the command, never answer
	c := newBSConn(cli)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, _, err := c.ReserveWithTimeout(ctx, 60, 0)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("reserve with an ended context: %v after %v", err, time.Since(start))
	}
}

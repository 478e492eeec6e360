package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fakeRedis is a RESP server over net.Pipe: it records every command and
// answers it with reply(args), a raw RESP value.
type fakeRedis struct {
	mu    sync.Mutex
	cmds  [][]string
	reply func(args []string) string
}

func (f *fakeRedis) dial(context.Context, string, string) (net.Conn, error) {
	cli, srv := net.Pipe()
	go f.serve(srv)
	return cli, nil
}

func (f *fakeRedis) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		args, err := readRESPArray(r)
		if err != nil {
			return
		}
		f.mu.Lock()
		f.cmds = append(f.cmds, args)
		f.mu.Unlock()
		if _, err := io.WriteString(c, f.reply(args)); err != nil {
			return
		}
	}
}

func (f *fakeRedis) commands() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]string(nil), f.cmds...)
}

// readRESPArray reads one command: an array of bulk strings.
func readRESPArray(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, err
	}
	args := make([]string, n)
	for i := range args {
		h, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(h, "$") {
			return nil, fmt.Errorf("not a bulk string: %q", h)
		}
		size, err := strconv.Atoi(strings.TrimSpace(h[1:]))
		if err != nil {
			return nil, err
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

func bulkArray(items ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(items))
	for _, s := range items {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(s), s)
	}
	return b.String()
}

// TestRedisProtocol checks what the Redis target sends: one ZADD per batch
// scored by the due time, and the Lua pop (EVALSHA, then EVAL when the
// script is not cached) with now and the batch size, decoding the members.
func TestRedisProtocol(t *testing.T) {
	pad := padding(10)
	popped := []string{encodeBody(5, 10, pad), encodeBody(6, 10, pad)}
	f := &fakeRedis{reply: func(args []string) string {
		switch strings.ToLower(args[0]) {
		case "zadd":
			return fmt.Sprintf(":%d\r\n", (len(args)-2)/2)
		case "evalsha":
			return "-NOSCRIPT No matching script.\r\n"
		case "eval":
			return bulkArray(popped...)
		case "zcard":
			return ":3\r\n"
		}
		return "-ERR unknown command\r\n"
	}}
	cfg := Config{Workload: WorkloadFire, RedisPoll: time.Millisecond}.withDefaults()
	tg := newRedisTarget(&cfg, &redis.Options{Addr: "fake:6379", Dialer: f.dial})
	defer tg.Close()
	ctx := t.Context()

	msgs := []msg{{Seq: 1, DeliverAtMs: 1_795_317_573_642, Body: encodeBody(1, 10, pad)}, {Seq: 2, DeliverAtMs: 1_795_317_573_643, Body: encodeBody(2, 10, pad)}}
	if err := tg.Enqueue(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	c, _ := tg.NewConsumer(ctx)
	before := time.Now().UnixMilli()
	b, err := c.Next(ctx)
	if err != nil || len(b.Seqs) != 2 || b.Seqs[0] != 5 || b.Seqs[1] != 6 {
		t.Fatalf("pop: %+v %v", b, err)
	}
	if n, err := tg.Pending(ctx); err != nil || n != 3 {
		t.Fatalf("pending %d %v", n, err)
	}

	var zadd, eval []string
	for _, cmd := range f.commands() {
		switch strings.ToLower(cmd[0]) {
		case "zadd":
			zadd = cmd
		case "eval":
			eval = cmd
		}
	}
	want := []string{"zadd", tg.key, "1795317573642", msgs[0].Body, "1795317573643", msgs[1].Body}
	if strings.Join(zadd, " ") != strings.Join(want, " ") {
		t.Fatalf("ZADD sent %q, want %q", zadd, want)
	}
	if len(eval) != 6 || eval[1] != popDue || eval[2] != "1" || eval[3] != tg.key || eval[5] != strconv.Itoa(cfg.ReserveMax) {
		t.Fatalf("EVAL sent %q", eval)
	}
	if now, err := strconv.ParseInt(eval[4], 10, 64); err != nil || now < before || now > time.Now().UnixMilli() {
		t.Fatalf("EVAL now = %q, want the harness clock in ms", eval[4])
	}
}

// TestRedisPollInterval checks that an empty pop waits the poll interval
// before the next, and that Next gives up after the wait.
func TestRedisPollInterval(t *testing.T) {
	f := &fakeRedis{reply: func(args []string) string {
		if strings.EqualFold(args[0], "evalsha") {
			return "*0\r\n"
		}
		return "-ERR unknown command\r\n"
	}}
	cfg := Config{Workload: WorkloadFire, RedisPoll: 20 * time.Millisecond, Wait: 200 * time.Millisecond}.withDefaults()
	tg := newRedisTarget(&cfg, &redis.Options{Addr: "fake:6379", Dialer: f.dial})
	defer tg.Close()
	c, _ := tg.NewConsumer(t.Context())
	start := time.Now()
	b, err := c.Next(t.Context())
	took := time.Since(start)
	if err != nil || len(b.Seqs) != 0 {
		t.Fatalf("empty pop: %+v %v", b, err)
	}
	polls := 0
	for _, cmd := range f.commands() {
		if strings.EqualFold(cmd[0], "evalsha") {
			polls++
		}
	}
	// 200 ms of waiting at one poll per 20 ms: about 10 polls, never a busy loop.
	if took < 200*time.Millisecond || polls < 5 || polls > 13 {
		t.Fatalf("%d polls in %v, want about 10 in 200ms", polls, took)
	}
}

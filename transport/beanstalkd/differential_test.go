package beanstalkd

import (
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// diffStep is what one connection of a script sends (as it is, in one
// write; "" half-closes it) and how many replies it then reads.
type diffStep struct {
	conn    int
	send    string
	replies int
}

// cmds makes one step a command line of connection 0, read one reply each.
func cmds(lines ...string) []diffStep {
	out := make([]diffStep, len(lines))
	for i, l := range lines {
		out[i] = diffStep{send: l + "\r\n", replies: 1}
	}
	return out
}

// putStep puts body in one write.
func putStep(conn int, pri, delay, ttr int, body string) diffStep {
	return diffStep{conn, fmt.Sprintf("put %d %d %d %d\r\n%s\r\n", pri, delay, ttr, len(body), body), 1}
}

// startBeanstalkd runs the beanstalkd installed on a free port until the
// test ends.
func startBeanstalkd(t *testing.T, bin string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	cmd := exec.Command(bin, "-l", "127.0.0.1", "-p", port)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", port)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		time.Sleep(time.Millisecond)
	}
}

// runScript runs steps against addr and returns each reply, a job's data
// after its line, with the job ids INSERTED answered named $0, $1… (as
// the steps name them too).
func runScript(t *testing.T, addr string, steps []diffStep) []string {
	t.Helper()
	conns := map[int]*client{}
	var ids []string
	var out []string
	for _, st := range steps {
		c, ok := conns[st.conn]
		if !ok {
			c = dial(t, addr)
			conns[st.conn] = c
		}
		send := st.send
		for i := len(ids) - 1; i >= 0; i-- {
			send = strings.ReplaceAll(send, "$"+strconv.Itoa(i), ids[i])
		}
		if send == "" {
			if err := c.c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
		} else {
			c.raw(send)
		}
		for range st.replies {
			out = append(out, readReply(c, &ids))
		}
	}
	return out
}

// readReply reads one reply line and its data, or "EOF", with its job id
// named by its place in ids (an INSERTED one added), also in stats-job's
// "id:" line.
func readReply(c *client, ids *[]string) string {
	l, err := c.r.ReadString('\n')
	if err == io.EOF && l == "" {
		return "EOF"
	}
	if err != nil {
		c.t.Fatalf("read reply: %v", err)
	}
	f := strings.Fields(l)
	if len(f) < 2 {
		return l
	}
	switch f[0] {
	case "INSERTED":
		*ids = append(*ids, f[1])
	case "RESERVED", "FOUND", "OK":
		n, _ := strconv.Atoi(f[len(f)-1])
		b := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, b); err != nil {
			c.t.Fatalf("read data: %v", err)
		}
		data := string(b)
		if f[0] == "OK" {
			if rest, ok := strings.CutPrefix(data, "---\nid: "); ok {
				id, rest, _ := strings.Cut(rest, "\n")
				if i := slices.Index(*ids, id); i >= 0 {
					data = "---\nid: $" + strconv.Itoa(i) + "\n" + rest
					f[1] = strconv.Itoa(len(data) - 2)
				}
			}
		}
		f = append(f, data)
	}
	if f[0] != "OK" && f[0] != "KICKED" && f[0] != "WATCHING" {
		if i := slices.Index(*ids, f[1]); i >= 0 {
			f[1] = "$" + strconv.Itoa(i)
		}
	}
	return strings.Join(f, " ")
}

// The server answers as the beanstalkd installed here, byte for byte but
// for the job ids, to scripts of commands whose answers the package does
// not document as different.
func TestAnswersAsBeanstalkd(t *testing.T) {
	bin, err := exec.LookPath("beanstalkd")
	if err != nil {
		t.Skip("beanstalkd is not installed")
	}
	theirs := startBeanstalkd(t, bin)
	ours, _ := start(t, newFake(), Config{MaxJobSize: 1<<16 - 1})
	scripts := map[string][]diffStep{
		"parse": cmds("frobnicate", "", "put 1 0 1", "put 1 0 1 1 ", "put -1 0 1 1", "put 4294967296 0 1 1", "put 1 0 1 x",
			"use "+strings.Repeat("a", MaxTubeLen), "use "+strings.Repeat("a", MaxTubeLen+1), "use -foo", "use a b",
			"reserve 1", "reserve-with-timeout", "delete x", "delete 18446744073709551615",
			"delete 18446744073709551616", "release 7 100", "bury 7", "touch 1", "peek 1", "peek x", "peek-ready x",
			"kick x", "kick-job 1", "stats-job", "stats-tube nosuch", "stats 1", "list-tubes x", "pause-tube t",
			"pause-tube nosuch 1", "reserve-job", "reserve-job 1", "kick-jobx 1", "list-tube-used",
			"use", "watch", "ignore", "delete", "kick", "kick-job", "peek", "touch", "release", "bury", "put", "statsx",
			"stats-jobx 1", "reservex", "reserve-jobx 1", "list-tubesx", "list-tube-usedx", "list-tubex", "peek-readyx",
			"pause-tubex", "deletex 1"),
		"numbers": cmds("kick -1", "kick 4294967296", "kick 18446744073709551615", "kick 18446744073709551616",
			"kick -18446744073709551616", "kick 1 ", "kick  2", "kick +1", "kick 0x10", "kick 1x", "kick ", "kick -",
			"reserve-with-timeout ", "reserve-with-timeout x", "reserve-with-timeout -", "reserve-with-timeout 0 0",
			"reserve-with-timeout  +0", "reserve-with-timeout 4294967296", "reserve-with-timeout 9223372036854775808",
			"reserve-with-timeout -9223372036854775809", "put 1 0 1 4294967296", "put 1 0 1 -1", "put 1 0 -1 1",
			"delete -1", "peek -5", "release -1 1 1", "bury 1 4294967296", "release 1 4294967296 0",
			"release 1 0 4294967296", "pause-tube default 4294967296", "pause-tube default -1",
			"stats-job 18446744073709551616", "peek 0", "delete 0", "stats-job 0", "kick-job 0", "reserve-job 0",
			"touch 0", "peek 0 0", "delete 1 1"),
		"nul": cmds("\x00", "quit\x00", "stats\x00", "use a\x00b", "frob\x00", "list-tube-used"),
		"names": cmds("use a*b", "use a b c", "use -", "use a-", "use _x", "use .", "use ..", "use é",
			"watch -x", "ignore -x", "stats-tube -x", "pause-tube -x 1", "stats-tube "+strings.Repeat("a", MaxTubeLen+1),
			"watch "+strings.Repeat("a", MaxTubeLen+1), "ignore "+strings.Repeat("b", MaxTubeLen), "stats-tube "+strings.Repeat("c", MaxTubeLen)),
		"quit":           {{0, "quit now\r\n", 1}, {1, "quitx\r\n", 1}},
		"quit pipelined": {{0, "list-tube-used\r\nquit\r\nlist-tube-used\r\n", 2}},
		"tubes": cmds("watch default", "watch a", "watch a", "watch b", "ignore a", "ignore a", "ignore default",
			"ignore b", "ignore nosuch", "list-tubes-watched", "use x", "list-tube-used", "use default"),
		"jobs": append(cmds("use d1", "watch d1", "ignore default"),
			putStep(0, 5, 0, 60, "hello"), diffStep{0, "peek $0\r\npeek-ready\r\nreserve-with-timeout 0\r\ntouch $0\r\n" +
				"release $0 5 0\r\nreserve-with-timeout 0\r\nbury $0 5\r\npeek-buried\r\nkick 10\r\nkick 10\r\n" +
				"reserve-with-timeout 0\r\ndelete $0\r\ndelete $0\r\npeek $0\r\n", 14},
			putStep(0, 5, 100, 60, "later"), diffStep{0, "peek-delayed\r\nkick-job $1\r\npeek-ready\r\ndelete $1\r\n", 4}),
		"others": {{0, "use d2\r\n", 1}, putStep(0, 1, 0, 60, "x"), {0, "watch d2\r\nreserve-with-timeout 0\r\n", 2},
			{1, "release $0 1 0\r\nbury $0 1\r\ntouch $0\r\ndelete $0\r\nkick-job $0\r\nreserve-job $0\r\npeek $0\r\n", 7},
			{0, "delete $0\r\n", 1}},
		"empty tube": cmds("use e2", "peek-ready", "peek-delayed", "peek-buried", "kick 0", "kick 5", "stats-job 12345",
			"peek 12345", "kick-job 12345", "delete 12345", "touch 12345", "release 12345 1 1", "bury 12345 1",
			"reserve-job 12345", "stats-tube e2", "pause-tube e2 0", "pause-tube nosuch 0", "list-tube-used"),
		"watch and ignore": cmds("ignore default", "watch w1", "ignore default", "ignore w1", "list-tubes-watched",
			"ignore nosuch", "watch w1", "watch default", "list-tubes-watched", "ignore w1", "list-tubes-watched"),
		"states": {{0, "use st\r\nwatch st\r\nignore default\r\n", 3}, putStep(0, 4294967295, 0, 0, "a"), putStep(0, 3, 0, 60, "b"),
			{0, "stats-job $0\r\nreserve-with-timeout 0\r\nbury $1 2\r\ndelete $1\r\npeek $1\r\npeek-buried\r\n" +
				"reserve-with-timeout 0\r\nrelease $0 3 0\r\nrelease $0 3 0\r\ntouch $0\r\nbury $0 1\r\n", 11},
			{0, "peek-ready\r\ndelete $0\r\nkick 0\r\nlist-tubes-watched\r\nlist-tube-used\r\n", 5}},
		"paused": {{0, "use pz\r\n", 1}, putStep(0, 1, 0, 60, "x"), {0, "pause-tube pz 100\r\nwatch pz\r\nignore default\r\n" +
			"reserve-with-timeout 0\r\npeek-ready\r\npause-tube pz 0\r\npause-tube nosuch 1\r\ndelete $0\r\n", 8}},
		"kicks": {{0, "use k0\r\nwatch k0\r\n", 2}, putStep(0, 1, 0, 60, "x"), {0, "kick-job $0\r\nreserve-with-timeout 0\r\n" +
			"bury $0 1\r\nkick 0\r\npeek-buried\r\nkick -1\r\nkick-job $0\r\ndelete $0\r\n", 8}},
		"no time limit": {{0, "watch rn\r\nignore default\r\nreserve-with-timeout -1\r\n", 2}, {1, "use rn\r\n", 1},
			putStep(1, 1, 0, 60, "z"), {0, "delete $0\r\n", 2}},
		"bodies": {{0, "put 1 0 1 2\r\nabXY\r\n", 2}, {0, "put 1 0 1 65536\r\n" + strings.Repeat("x", 1<<16) + "\r\n", 1},
			{0, "list-tube-used\r\n", 1}, {0, "put 1 0 1 70000x\r\n" + strings.Repeat("y", 70000) + "\r\nlist-tube-used\r\n", 2},
			{0, "put 1 0 1 5 x\r\nhello\r\nlist-tube-used\r\n", 3}, {0, "put 1 0 1 5\r\nab\r\n", 0}, {0, "cd\r\n", 1},
			{0, "list-tube-used\r\n", 1}},
		"split": {{0, "us", 0}, {0, "e d3\r", 0}, {0, "\n", 1}, {0, "put 1 0 60 5\r\nhe", 0}, {0, "llo\r\n", 1},
			{0, "peek $0\r\ndelete $0\r\n", 2}},
		"pipelined": {{0, "use d4\r\nput 1 0 60 1\r\na\r\nput 1 0 60 1\r\nb\r\nlist-tube-used\r\nwatch d4\r\nignore default\r\n", 6},
			{0, "reserve-with-timeout 0\r\ndelete $0\r\nreserve-with-timeout 0\r\ndelete $1\r\nreserve-with-timeout 0\r\n", 5}},
		"long lines": {{0, "use " + strings.Repeat("a", 230) + "\r\nlist-tube-used\r\n", 2},
			{0, "use " + strings.Repeat("a", MaxLine-5) + "\r\nlist-tube-used\r\n", 1}, // its CRLF spans two reads of MaxLine
			{0, "use " + strings.Repeat("a", 300), 0}, {0, strings.Repeat("a", 300) + "\r\nlist-tube-used\r\n", 2},
			{0, "use " + strings.Repeat("a", 2*MaxLine) + "\r\nuse d6\r\n", 2},
			{0, "use a\rb\r\nlist-tube-used\r\n", 0}, {0, strings.Repeat("x", MaxLine) + "\r\nlist-tube-used\r\n", 2},
			{0, "use foo\nlist-tube-used\r\nlist-tube-used\r\n", 2}},
		"emptied":     {{0, "use e1\r\n", 1}, putStep(0, 1024, 0, 60, "x"), {0, "stats-tube e1\r\ndelete $0\r\nuse default\r\nstats-tube e1\r\n", 4}},
		"half-closed": {{0, "watch d5\r\nignore default\r\nreserve\r\n", 2}, {0, "", 2}},
	}
	for name, steps := range scripts {
		want, got := runScript(t, theirs, steps), runScript(t, ours, steps)
		if strings.Join(got, "") != strings.Join(want, "") {
			t.Errorf("%s: answered\n%q\nwhere beanstalkd answers\n%q", name, got, want)
		}
	}
}

package beanstalkd

import (
	"errors"
	"strings"
	"testing"

	"github.com/delaywheel/delaywheel/wheel/model"
)

func TestParseCommand(t *testing.T) {
	long := strings.Repeat("a", MaxTubeLen)
	cases := []struct {
		line string
		want Command
		err  error
	}{
		{"put 1024 5 60 11", Command{Op: OpPut, Pri: 1024, Delay: 5, TTR: 60, Bytes: 11}, nil},
		{"put 4294967295 0 0 0", Command{Op: OpPut, Pri: 4294967295}, nil},
		{"put 4294967296 0 0 0", Command{}, ErrBadFormat},
		{"put 1 2 3", Command{}, ErrBadFormat},
		{"put 1 2 3 4 5", Command{Op: OpPut, Pri: 1, Delay: 2, TTR: 3, Bytes: 4, Trailer: true}, nil}, // answered BAD_FORMAT
		{"put 1 2 3 70000x", Command{Op: OpPut, Pri: 1, Delay: 2, TTR: 3, Bytes: 70000, Trailer: true}, nil},
		{"put 1 2 3 4294967295", Command{Op: OpPut, Pri: 1, Delay: 2, TTR: 3, Bytes: 4294967295}, nil},
		{"put 1 2 3 4294967296", Command{}, ErrBadFormat},
		{"put 1 2 3 x4", Command{}, ErrBadFormat},
		{"put 1 2 3 4 ", Command{Op: OpPut, Pri: 1, Delay: 2, TTR: 3, Bytes: 4, Trailer: true}, nil},
		{"put 1 2 3  4", Command{}, ErrBadFormat},
		{"put -1 0 0 1", Command{}, ErrBadFormat},
		{"put +1 0 0 1", Command{}, ErrBadFormat},
		{"put 1 0 0 x", Command{}, ErrBadFormat},
		{"put 1  0 0 1", Command{}, ErrBadFormat},
		{"use foo", Command{Op: OpUse, Tube: "foo"}, nil},
		{"use " + long, Command{Op: OpUse, Tube: long}, nil},
		{"use " + long + "a", Command{}, ErrBadFormat},
		{"use -foo", Command{}, ErrBadFormat},
		{"use a+b", Command{}, ErrBadFormat},
		{"use", Command{}, ErrUnknownCommand}, // beanstalkd knows "use " only
		{"use a b", Command{}, ErrBadFormat},
		{"reserve", Command{Op: OpReserve}, nil},
		{"reserve 1", Command{}, ErrBadFormat},
		{"reserve-with-timeout 0", Command{Op: OpReserveWithTimeout}, nil},
		{"reserve-with-timeout 30", Command{Op: OpReserveWithTimeout, Timeout: 30}, nil},
		{"reserve-with-timeout", Command{}, ErrBadFormat},
		{"reserve-with-timeout -1", Command{Op: OpReserveWithTimeout, NoLimit: true}, nil},
		{"reserve-with-timeout x", Command{Op: OpReserveWithTimeout}, nil}, // strtol: no digits is 0
		{"reserve-with-timeout ", Command{Op: OpReserveWithTimeout}, nil},
		{"reserve-with-timeout  +7 x", Command{Op: OpReserveWithTimeout, Timeout: 7}, nil},
		{"reserve-with-timeout 2147483647", Command{Op: OpReserveWithTimeout, Timeout: 2147483647}, nil},
		{"reserve-with-timeout 2147483648", Command{Op: OpReserveWithTimeout, NoLimit: true}, nil}, // an int's wrap
		{"reserve-with-timeout 4294967296", Command{Op: OpReserveWithTimeout}, nil},
		{"reserve-with-timeout 9223372036854775807", Command{Op: OpReserveWithTimeout, NoLimit: true}, nil},
		{"reserve-with-timeout 9223372036854775808", Command{}, ErrBadFormat},
		{"reserve-with-timeout -9223372036854775808", Command{Op: OpReserveWithTimeout}, nil},
		{"reserve-with-timeout -9223372036854775809", Command{}, ErrBadFormat},
		{"reserve-job 262144", Command{Op: OpReserveJob, ID: 262144}, nil},
		{"reserve-job", Command{}, ErrBadFormat},
		{"delete 18446744073709551615", Command{Op: OpDelete, ID: 18446744073709551615}, nil},
		{"delete 18446744073709551616", Command{}, ErrBadFormat},
		{"delete", Command{}, ErrUnknownCommand}, // beanstalkd knows "delete " only
		{"release 7 100 3", Command{Op: OpRelease, ID: 7, Pri: 100, Delay: 3}, nil},
		{"release 7 100", Command{}, ErrBadFormat},
		{"bury 7 5", Command{Op: OpBury, ID: 7, Pri: 5}, nil},
		{"bury 7", Command{}, ErrBadFormat},
		{"touch 7", Command{Op: OpTouch, ID: 7}, nil},
		{"touch x", Command{}, ErrBadFormat},
		{"watch bar", Command{Op: OpWatch, Tube: "bar"}, nil},
		{"watch", Command{}, ErrUnknownCommand}, // beanstalkd knows "watch " only
		{"ignore bar", Command{Op: OpIgnore, Tube: "bar"}, nil},
		{"ignore b(r)", Command{}, ErrBadFormat},
		{"peek 9", Command{Op: OpPeek, ID: 9}, nil},
		{"peek", Command{}, ErrUnknownCommand}, // beanstalkd knows "peek " only
		{"peek-ready", Command{Op: OpPeekReady}, nil},
		{"peek-ready x", Command{}, ErrBadFormat},
		{"peek-delayed", Command{Op: OpPeekDelayed}, nil},
		{"peek-delayed 1", Command{}, ErrBadFormat},
		{"peek-buried", Command{Op: OpPeekBuried}, nil},
		{"peek-buried 1", Command{}, ErrBadFormat},
		{"kick 10", Command{Op: OpKick, Bound: 10}, nil},
		{"kick", Command{}, ErrUnknownCommand}, // beanstalkd knows "kick " only
		{"kick ", Command{}, ErrBadFormat},
		{"kick x", Command{}, ErrBadFormat},
		{"kick -", Command{}, ErrBadFormat},
		{"kick 1 ", Command{Op: OpKick, Bound: 1}, nil}, // strtoul: anything may follow
		{"kick  \t+3x", Command{Op: OpKick, Bound: 3}, nil},
		{"kick 0x10", Command{Op: OpKick}, nil},
		{"kick -1", Command{Op: OpKick, Bound: 4294967295}, nil},
		{"kick 4294967296", Command{Op: OpKick}, nil}, // an unsigned int's wrap
		{"kick 18446744073709551615", Command{Op: OpKick, Bound: 4294967295}, nil},
		{"kick 18446744073709551616", Command{}, ErrBadFormat},
		{"kick -18446744073709551616", Command{}, ErrBadFormat},
		{"kick-job 3", Command{Op: OpKickJob, ID: 3}, nil},
		{"kick-job", Command{}, ErrUnknownCommand}, // beanstalkd knows "kick-job " only
		{"stats-job 3", Command{Op: OpStatsJob, ID: 3}, nil},
		{"stats-job", Command{}, ErrBadFormat},
		{"stats-tube default", Command{Op: OpStatsTube, Tube: "default"}, nil},
		{"stats-tube", Command{}, ErrBadFormat},
		{"stats", Command{Op: OpStats}, nil},
		{"stats 1", Command{}, ErrBadFormat},
		{"list-tubes", Command{Op: OpListTubes}, nil},
		{"list-tubes x", Command{}, ErrBadFormat},
		{"list-tube-used", Command{Op: OpListTubeUsed}, nil},
		{"list-tube-used x", Command{}, ErrBadFormat},
		{"list-tubes-watched", Command{Op: OpListTubesWatched}, nil},
		{"list-tubes-watched x", Command{}, ErrBadFormat},
		{"pause-tube t 60", Command{Op: OpPauseTube, Tube: "t", Delay: 60}, nil},
		{"pause-tube t", Command{}, ErrBadFormat},
		{"quit", Command{Op: OpQuit}, nil},
		{"quit now", Command{Op: OpQuit}, nil},
		{"quitx", Command{Op: OpQuit}, nil},
		{"statsx", Command{}, ErrBadFormat},
		{"stats-jobx 1", Command{}, ErrBadFormat},
		{"reservex", Command{}, ErrBadFormat},
		{"reserve-jobx 1", Command{}, ErrBadFormat},
		{"list-tubesx", Command{}, ErrBadFormat},
		{"list-tube-usedx", Command{}, ErrBadFormat},
		{"list-tubex", Command{}, ErrUnknownCommand},
		{"peek-readyx", Command{}, ErrBadFormat},
		{"pause-tubex", Command{}, ErrBadFormat},
		{"put", Command{}, ErrUnknownCommand},
		{"deletex 1", Command{}, ErrUnknownCommand},
		{"", Command{}, ErrUnknownCommand},
		{"PUT 1 0 0 1", Command{}, ErrUnknownCommand},
		{"frobnicate", Command{}, ErrUnknownCommand},
		{"\x00", Command{}, ErrBadFormat}, // beanstalkd's lines are C strings
		{"quit\x00", Command{}, ErrBadFormat},
		{"frob\x00", Command{}, ErrBadFormat},
		{" put 1 0 0 1", Command{}, ErrUnknownCommand},
		{"use " + strings.Repeat("a", MaxLine), Command{}, ErrBadFormat},
	}
	for _, c := range cases {
		got, err := ParseCommand(c.line)
		if !errors.Is(err, c.err) || err == nil && c.err != nil || got != c.want {
			t.Errorf("ParseCommand(%.40q) = %+v, %v; want %+v, %v", c.line, got, err, c.want, c.err)
		}
	}
}

func TestJobIDRoundTrip(t *testing.T) {
	for _, id := range []model.ID{
		{Index: 1, Seq: 0},
		{Index: 12345, Seq: 3<<24 | 7},
		{Index: 1<<indexBits - 1, Seq: 255<<24 | (1<<positionBits - 1)},
	} {
		job, ok := JobID(id)
		if !ok || job == 0 || MessageID(job) != id {
			t.Errorf("JobID(%v) = %d, %v; MessageID = %v", id, job, ok, MessageID(job))
		}
	}
	for _, id := range []model.ID{{}, {Index: 1 << indexBits}, {Index: 5, Seq: 1 << positionBits}} {
		if job, ok := JobID(id); ok {
			t.Errorf("JobID(%v) = %d, want not packable", id, job)
		}
	}
	// Ids of one group and entry order like their messages.
	a, _ := JobID(model.ID{Index: 10, Seq: 2<<24 | 1})
	b, _ := JobID(model.ID{Index: 11, Seq: 2 << 24})
	if a >= b {
		t.Errorf("job ids do not follow the log: %d >= %d", a, b)
	}
}

func FuzzParseCommand(f *testing.F) {
	for _, s := range []string{"put 1024 0 60 5", "use default", "reserve-with-timeout 5", "delete 1", "release 1 2 3", "stats", "pause-tube a 1", "kick 5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		c, err := ParseCommand(line)
		if err != nil {
			if !errors.Is(err, ErrBadFormat) && !errors.Is(err, ErrUnknownCommand) {
				t.Fatalf("ParseCommand(%q): unexpected error %v", line, err)
			}
			if c != (Command{}) {
				t.Fatalf("ParseCommand(%q) failed but returned %+v", line, c)
			}
			return
		}
		if len(line)+2 > MaxLine || c.Op == 0 {
			t.Fatalf("ParseCommand(%q) accepted %+v", line, c)
		}
		if c.Tube != "" && !ValidTube(c.Tube) {
			t.Fatalf("ParseCommand(%q) accepted tube %q", line, c.Tube)
		}
	})
}

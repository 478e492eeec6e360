package beanstalkd

import (
	"errors"
	"strconv"
	"strings"
)

// Op is a protocol command.
type Op uint8

// The commands of the protocol.
const (
	OpPut Op = iota + 1
	OpUse
	OpReserve
	OpReserveWithTimeout
	OpReserveJob
	OpDelete
	OpRelease
	OpBury
	OpTouch
	OpWatch
	OpIgnore
	OpPeek
	OpPeekReady
	OpPeekDelayed
	OpPeekBuried
	OpKick
	OpKickJob
	OpStatsJob
	OpStatsTube
	OpStats
	OpListTubes
	OpListTubeUsed
	OpListTubesWatched
	OpPauseTube
	OpQuit
)

// MaxLine is the longest command line, CRLF included: beanstalkd's own
// line buffer, which holds the longest command with a 200-byte tube name.
const MaxLine = 224

// MaxTubeLen is the longest tube name the protocol allows.
const MaxTubeLen = 200

// Parse errors, answered BAD_FORMAT and UNKNOWN_COMMAND.
var (
	ErrBadFormat      = errors.New("BAD_FORMAT")
	ErrUnknownCommand = errors.New("UNKNOWN_COMMAND")
)

// Command is one parsed command line. Only the fields of its Op are set.
type Command struct {
	Op      Op
	Tube    string // use, watch, ignore, stats-tube, pause-tube
	ID      uint64 // the job of reserve-job, delete, release, bury, touch, peek, kick-job, stats-job
	Pri     uint32 // put, release, bury
	Delay   uint32 // seconds: put, release, pause-tube
	TTR     uint32 // seconds: put
	Bytes   int    // put: the body's length
	Timeout uint32 // seconds: reserve-with-timeout
	Bound   uint32 // kick
}

// argKind is the kind of one argument of a command.
type argKind uint8

const (
	argTube argKind = iota + 1
	argID
	argPri
	argDelay
	argTTR
	argBytes
	argTimeout
	argBound
)

// grammar returns the Op of a command name and its arguments in order.
func grammar(name string) (Op, []argKind, bool) {
	switch name {
	case "put":
		return OpPut, []argKind{argPri, argDelay, argTTR, argBytes}, true
	case "use":
		return OpUse, []argKind{argTube}, true
	case "reserve":
		return OpReserve, nil, true
	case "reserve-with-timeout":
		return OpReserveWithTimeout, []argKind{argTimeout}, true
	case "reserve-job":
		return OpReserveJob, []argKind{argID}, true
	case "delete":
		return OpDelete, []argKind{argID}, true
	case "release":
		return OpRelease, []argKind{argID, argPri, argDelay}, true
	case "bury":
		return OpBury, []argKind{argID, argPri}, true
	case "touch":
		return OpTouch, []argKind{argID}, true
	case "watch":
		return OpWatch, []argKind{argTube}, true
	case "ignore":
		return OpIgnore, []argKind{argTube}, true
	case "peek":
		return OpPeek, []argKind{argID}, true
	case "peek-ready":
		return OpPeekReady, nil, true
	case "peek-delayed":
		return OpPeekDelayed, nil, true
	case "peek-buried":
		return OpPeekBuried, nil, true
	case "kick":
		return OpKick, []argKind{argBound}, true
	case "kick-job":
		return OpKickJob, []argKind{argID}, true
	case "stats-job":
		return OpStatsJob, []argKind{argID}, true
	case "stats-tube":
		return OpStatsTube, []argKind{argTube}, true
	case "stats":
		return OpStats, nil, true
	case "list-tubes":
		return OpListTubes, nil, true
	case "list-tube-used":
		return OpListTubeUsed, nil, true
	case "list-tubes-watched":
		return OpListTubesWatched, nil, true
	case "pause-tube":
		return OpPauseTube, []argKind{argTube, argDelay}, true
	case "quit":
		return OpQuit, nil, true
	}
	return 0, nil, false
}

// ParseCommand parses one command line without its CRLF. An unknown
// command name is ErrUnknownCommand; a known one with the wrong number of
// arguments, a number out of its range, or a bad tube name is
// ErrBadFormat. Arguments are separated by single spaces. A line that
// names no command is answered as beanstalkd answers it (byPrefix).
func ParseCommand(line string) (Command, error) {
	if len(line)+2 > MaxLine {
		return Command{}, ErrBadFormat
	}
	fields := strings.Split(line, " ")
	op, args, ok := grammar(fields[0])
	if !ok || op == OpQuit || len(args) > 0 && len(fields) == 1 {
		return byPrefix(line)
	}
	if len(fields)-1 != len(args) {
		return Command{}, ErrBadFormat
	}
	c := Command{Op: op}
	for i, kind := range args {
		if err := c.set(kind, fields[i+1]); err != nil {
			return Command{}, err
		}
	}
	return c, nil
}

// byPrefix answers a line that is no command of the grammar, or quit, as
// beanstalkd, which takes a line for the first command whose name starts
// it, the name of a command with arguments followed by its space: a line
// that starts with quit quits, one that starts with the name of a command
// without arguments (or pause-tube) is that command with bad arguments, and
// a command with arguments named without them is unknown.
func byPrefix(line string) (Command, error) {
	if strings.HasPrefix(line, "quit") {
		return Command{Op: OpQuit}, nil
	}
	for _, name := range []string{"peek-ready", "peek-delayed", "peek-buried", "reserve", "stats", "list-tubes", "list-tube-used", "pause-tube"} {
		if strings.HasPrefix(line, name) {
			return Command{}, ErrBadFormat
		}
	}
	return Command{}, ErrUnknownCommand
}

// set parses one argument into c.
func (c *Command) set(kind argKind, s string) error {
	if kind == argTube {
		if !ValidTube(s) {
			return ErrBadFormat
		}
		c.Tube = s
		return nil
	}
	bits := 32
	if kind == argID || kind == argBytes {
		bits = 64
	}
	n, ok := parseUint(s, bits)
	if !ok {
		return ErrBadFormat
	}
	switch kind {
	case argID:
		c.ID = n
	case argPri:
		c.Pri = uint32(n)
	case argDelay:
		c.Delay = uint32(n)
	case argTTR:
		c.TTR = uint32(n)
	case argBytes:
		if n > 1<<40 {
			return ErrBadFormat
		}
		c.Bytes = int(n)
	case argTimeout:
		c.Timeout = uint32(n)
	case argBound:
		c.Bound = uint32(n)
	}
	return nil
}

// parseUint parses a decimal number of 1 to 20 digits that fits in bits.
func parseUint(s string, bits int) (uint64, bool) {
	if s == "" || len(s) > 20 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, bits)
	return n, err == nil
}

// ValidTube reports whether name is a tube this server accepts: 1 to 200
// characters that are both a beanstalkd name's and a delaywheel topic's
// ([A-Za-z0-9._-], and ':' which topics allow), not starting with '-'.
// beanstalkd's other name characters (+ / ; $ ( )) cannot name a topic
// and are answered BAD_FORMAT.
func ValidTube(name string) bool {
	if len(name) == 0 || len(name) > MaxTubeLen || name[0] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

package beanstalkd

import (
	"errors"
	"math"
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
	Trailer bool   // put: its length is followed by more (JOB_TOO_BIG when over the limit, else BAD_FORMAT)
	Timeout uint32 // seconds: reserve-with-timeout
	NoLimit bool   // reserve-with-timeout: a negative timeout, which waits as reserve does
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
// ErrBadFormat, as is a line that holds a NUL byte (beanstalkd reads the
// line as a C string). Arguments are separated by single spaces, but for
// the numbers of kick and reserve-with-timeout, read as beanstalkd reads
// them (cNumber). A line that names no command is answered as beanstalkd
// answers it (byPrefix).
func ParseCommand(line string) (Command, error) {
	if len(line)+2 > MaxLine || strings.IndexByte(line, 0) >= 0 {
		return Command{}, ErrBadFormat
	}
	fields := strings.Split(line, " ")
	op, args, ok := grammar(fields[0])
	if !ok || op == OpQuit || len(args) > 0 && len(fields) == 1 {
		return byPrefix(line)
	}
	if op == OpKick || op == OpReserveWithTimeout {
		return parseCNumber(op, line[len(fields[0])+1:])
	}
	if op == OpPut && len(fields) >= len(args)+1 {
		return parsePut(fields[1:])
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

// parsePut parses put's arguments. As beanstalkd, which reads the body's
// length before it looks at what follows, it takes a length followed by
// more than the line's end (Trailer), which is answered JOB_TOO_BIG, its
// body skipped, when it is over the limit, else BAD_FORMAT.
func parsePut(args []string) (Command, error) {
	c := Command{Op: OpPut}
	for i, kind := range []argKind{argPri, argDelay, argTTR} {
		if err := c.set(kind, args[i]); err != nil {
			return Command{}, err
		}
	}
	size := strings.Join(args[3:], " ")
	digits := len(size) - len(strings.TrimLeft(size, "0123456789"))
	if digits == 0 {
		return Command{}, ErrBadFormat
	}
	if err := c.set(argBytes, size[:digits]); err != nil {
		return Command{}, err
	}
	c.Trailer = digits < len(size)
	return c, nil
}

// parseCNumber parses the argument of kick or reserve-with-timeout, the
// rest of the line, as beanstalkd does with C's strtoul and strtol: a
// number, after white space and a sign, followed by anything. kick's bound
// wraps to 32 bits as beanstalkd's unsigned int does (kick -1 kicks every
// job it may); a timeout without digits is 0, and one that wraps to a
// negative int waits with no limit, as reserve does.
func parseCNumber(op Op, arg string) (Command, error) {
	neg, n, digits, ok := cNumber(arg)
	if op == OpKick {
		if !digits || !ok {
			return Command{}, ErrBadFormat
		}
		if neg {
			n = -n
		}
		return Command{Op: OpKick, Bound: uint32(n)}, nil
	}
	if !ok || !neg && n > math.MaxInt64 || neg && n > -math.MinInt64 {
		return Command{}, ErrBadFormat // out of a long's range
	}
	if neg {
		n = -n
	}
	t := int32(n)
	if t < 0 {
		return Command{Op: OpReserveWithTimeout, NoLimit: true}, nil
	}
	return Command{Op: OpReserveWithTimeout, Timeout: uint32(t)}, nil
}

// cNumber reads s as C's strtoul and strtol read a decimal number: white
// space, an optional sign, then the longest run of digits, whatever
// follows. It returns the sign, the digits' value, whether there were
// any, and whether that value fits in 64 bits.
func cNumber(s string) (neg bool, n uint64, digits, ok bool) {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	ok = true
	for ; s != "" && s[0] >= '0' && s[0] <= '9'; s = s[1:] {
		digits = true
		d := uint64(s[0] - '0')
		if n > (math.MaxUint64-d)/10 {
			ok = false
		}
		n = n*10 + d
	}
	return neg, n, digits, ok
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
	if kind == argID {
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

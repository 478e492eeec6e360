package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// sysProcAttr puts a spawned server in its own process group and kills it if
// the harness dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// memOf reads a process's resident memory from /proc/<pid>/status: VmRSS,
// and the two parts it is made of that matter here, RssAnon (heap, stacks,
// allocator arenas: memory only the process holds) and RssFile (pages of
// mapped files: the executable, and any data file the process maps, which
// the kernel shares with its page cache).
func memOf(pid int) (memUsage, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return unknownMem(), fmt.Errorf("resident memory of pid %d: %w", pid, err)
	}
	return parseStatusMem(b)
}

// parseStatusMem reads VmRSS, RssAnon and RssFile (kB) from a
// /proc/<pid>/status file. VmRSS is required; a kernel without the parts
// (before 4.5) leaves them unknown.
func parseStatusMem(status []byte) (memUsage, error) {
	m := unknownMem()
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch name {
		case "VmRSS":
			dst = &m.RSS
		case "RssAnon":
			dst = &m.Anon
		case "RssFile":
			dst = &m.File
		default:
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return unknownMem(), fmt.Errorf("%s %q: not a size in kB", name, strings.TrimSpace(rest))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return unknownMem(), fmt.Errorf("%s %q: %w", name, rest, err)
		}
		*dst = kb << 10
	}
	if m.RSS < 0 {
		return unknownMem(), errors.New("no VmRSS line in /proc status")
	}
	return m, nil
}

// clockTicks is the unit of the CPU times in /proc/<pid>/stat: USER_HZ,
// which Linux fixes at 100 on every architecture it exports it to users.
const clockTicks = 100

// cpuOf reads the CPU time (user and system) a process has used, from
// /proc/<pid>/stat.
func cpuOf(pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("cpu time of pid %d: %w", pid, err)
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime and stime, fields 14 and 15 of a /proc/<pid>/stat
// line. The command name, field 2, is in parentheses and may hold spaces
// and parentheses itself, so the fields are counted from its last ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no command name")
	}
	f := strings.Fields(string(stat[i+1:])) // from field 3 (state) on
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: cpu time %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

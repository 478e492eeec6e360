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

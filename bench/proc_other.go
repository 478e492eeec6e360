//go:build !linux

package bench

import (
	"errors"
	"syscall"
	"time"
)

// sysProcAttr: outside Linux the spawned servers share the harness's process
// group (resident memory is read from /proc, so backlog reports it as unknown).
func sysProcAttr() *syscall.SysProcAttr { return nil }

// memOf: resident memory is read from /proc, which only Linux has here.
func memOf(int) (memUsage, error) {
	return unknownMem(), errors.New("resident memory is read from /proc/<pid>/status (Linux only)")
}

// cpuOf: CPU time is read from /proc, which only Linux has here.
func cpuOf(int) (time.Duration, error) {
	return 0, errors.New("cpu time is read from /proc/<pid>/stat (Linux only)")
}

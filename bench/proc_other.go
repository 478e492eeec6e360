//go:build !linux

package bench

import (
	"errors"
	"syscall"
)

// sysProcAttr: outside Linux the spawned servers share the harness's process
// group (resident memory is read from /proc, so backlog reports it as unknown).
func sysProcAttr() *syscall.SysProcAttr { return nil }

// memOf: resident memory is read from /proc, which only Linux has here.
func memOf(int) (memUsage, error) {
	return unknownMem(), errors.New("resident memory is read from /proc/<pid>/status (Linux only)")
}

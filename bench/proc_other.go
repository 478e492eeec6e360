//go:build !linux

package bench

import "syscall"

// sysProcAttr: outside Linux the spawned servers share the harness's process
// group (resident memory is read from /proc, so backlog reports it as unknown).
func sysProcAttr() *syscall.SysProcAttr { return nil }

package bench

import "syscall"

// sysProcAttr puts a spawned server in its own process group and kills it if
// the harness dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

//go:build unix

package wheel

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used, user and system, in
// every thread: a benchmark's figure that counts the work of background
// goroutines (Pebble's flushes and compactions) as well as its own.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

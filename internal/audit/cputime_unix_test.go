//go:build unix

package audit

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) the process has used so
// far. Benchmarks report it per op: on a machine shared with other work,
// wall-clock throughput swings with the load, CPU per op much less.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package boot

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// pinCPUs gives the calling thread, the one every command is forked from,
// the affinity mask of the CPUs listed ("0,3"). Commands inherit it, so
// sched_getaffinity (nproc, Go's runtime.NumCPU, Node's
// os.availableParallelism) counts what the CPU limit allows.
func pinCPUs(list string) error {
	var set unix.CPUSet
	for _, f := range strings.Split(list, ",") {
		c, err := strconv.Atoi(f)
		if err != nil || c < 0 {
			return fmt.Errorf("CPU affinity %q: bad CPU %q", list, f)
		}
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("CPU affinity %s: %w", list, err)
	}
	return nil
}

// oomAdj is pid 1's own oom_score_adj file, opened before the seal
// (landlock then forbids the open).
type oomAdj struct {
	f             *os.File // nil: commands keep pid 1's value
	own, workload []byte
}

// initOOM is pid 1's; set up by setUp.
var initOOM oomAdj

// openOOMAdj prepares aroundFork for commands that start at workload (0:
// do nothing). Raising one's oom_score_adj needs no privilege, and going
// back down is allowed as far as the floor the daemon set (or the value
// pid 1 started with), so pid 1 can toggle without any capability.
func openOOMAdj(workload int) (oomAdj, error) {
	if workload == 0 {
		return oomAdj{}, nil
	}
	f, err := os.OpenFile("/proc/self/oom_score_adj", os.O_RDWR, 0)
	if err != nil {
		return oomAdj{}, fmt.Errorf("oom_score_adj: %w", err)
	}
	own := make([]byte, 16)
	n, err := f.Read(own)
	if err != nil {
		f.Close()
		return oomAdj{}, fmt.Errorf("oom_score_adj: %w", err)
	}
	ownV, err := strconv.Atoi(strings.TrimSpace(string(own[:n])))
	if err != nil {
		f.Close()
		return oomAdj{}, fmt.Errorf("oom_score_adj: %w", err)
	}
	if ownV >= workload {
		f.Close()
		return oomAdj{}, nil // nothing to gain
	}
	return oomAdj{f: f, own: []byte(strconv.Itoa(ownV)), workload: []byte(strconv.Itoa(workload))}, nil
}

// aroundFork runs fork with pid 1's oom_score_adj at the workload's, so the
// child starts there, and puts pid 1's back. Only the main thread forks,
// so no command ever starts with pid 1's value. For a moment after the
// command's execve (until pid 1 runs again and puts its value back) pid 1
// ranks with the workload rather than below it: the OOM killer would then
// choose between them by size. Closing that gap takes code between fork
// and exec, which Go's ForkExec does not offer.
func (o oomAdj) aroundFork(fork func()) {
	if o.f == nil {
		fork()
		return
	}
	_, _ = o.f.Write(o.workload)
	fork()
	_, _ = o.f.Write(o.own)
}

package sandbox

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// How every backend keeps a sandbox's pid 1 (the native init, the OCI and
// Docker helper's agent) alive through what its workload does.
const (
	// InitOOMScoreAdj is pid 1's oom_score_adj where the daemon may lower
	// it (CAP_SYS_RESOURCE): the kernel's OOM killer takes every other
	// process of the sandbox first. Not -1000, which would make pid 1
	// unkillable: a sandbox left with nothing else to kill then ends (Done
	// closes) instead of stalling in the kernel's OOM path.
	InitOOMScoreAdj = -999
	// WorkloadOOMScoreAdj is the oom_score_adj every command starts with:
	// the most, so that inside the sandbox's memory cgroup a command always
	// scores above pid 1 (a small pid 1 may outweigh a small command
	// otherwise, and without CAP_SYS_RESOURCE pid 1 cannot be lowered), and
	// under host memory pressure sandboxes go before the host's processes.
	WorkloadOOMScoreAdj = 1000
	// InitPidsReserve is how many tasks (threads) of a sandbox only its
	// pid 1 may use, on top of Limits.Pids, where the backend can split the
	// pids limit (cgroup v1): a fork bomb then fills the workload's share,
	// and pid 1 can still make the threads it needs to serve the next
	// exec. A Go program refused a thread dies, and pid 1's death ends the
	// sandbox. pid 1 runs with one P and serves everything from the
	// poller, so it needs a handful; the rest is margin.
	InitPidsReserve = 16
)

// LowerInitOOMScore sets host process pid's oom_score_adj to
// InitOOMScoreAdj. It needs CAP_SYS_RESOURCE: root without it, or a
// rootless daemon, gets a permission error.
func LowerInitOOMScore(pid int) error {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.Itoa(InitOOMScoreAdj))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// CPUPicker chooses the CPUs each sandbox's commands run on, so that what
// counts CPUs inside (nproc, Go's runtime.NumCPU, Node's
// os.availableParallelism: all read the affinity mask) sees the CPU limit
// rather than the host. The zero value is not usable; see NewCPUPicker.
// It is safe for concurrent use.
type CPUPicker struct {
	cpus []int // the CPUs this process may run on
	next atomic.Uint32
}

// NewCPUPicker picks among the CPUs the calling process may run on.
func NewCPUPicker() *CPUPicker {
	var set unix.CPUSet
	p := &CPUPicker{}
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return p
	}
	for c := 0; c < len(set)*64 && len(p.cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			p.cpus = append(p.cpus, c)
		}
	}
	return p
}

// Pick returns ceil(limit) of the host's CPUs for a sandbox with CPU limit
// limit, or nil (every CPU) when that is not fewer than the host has.
// Successive sandboxes start at successive CPUs, spreading them over the
// host; the bandwidth limit still bounds the time they get.
func (p *CPUPicker) Pick(limit float64) []int {
	n := len(p.cpus)
	k := int(math.Ceil(limit))
	if k <= 0 || k >= n {
		return nil
	}
	start := int(p.next.Add(uint32(k))-uint32(k)) % n
	out := make([]int, k)
	for i := range out {
		out[i] = p.cpus[(start+i)%n]
	}
	return out
}

// Count is how many CPUs Pick(limit) gives (all of the host's for nil).
func (p *CPUPicker) Count(limit float64) int {
	return min(max(int(math.Ceil(limit)), 1), len(p.cpus))
}

// CPUList formats cpus as a cpuset list ("0,2,3"), "" for nil.
func CPUList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

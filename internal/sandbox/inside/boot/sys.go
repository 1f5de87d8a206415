package boot

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// What a sandbox may know of its own limits. Runtimes size themselves from
// them (the JVM's and Node's heaps from the memory limit, Go's GOMAXPROCS
// from the CPU quota, thread pools from the CPU count), and with the
// host's values they would plan for a machine they do not have.

// makeSys builds /sys: a read-only tmpfs that holds nothing but fs/cgroup,
// the sandbox's own cgroup (read-only), mounted inside its cgroup
// namespace so its root is the sandbox's cgroup: cgroup2 on v2, one mount
// per v1 hierarchy otherwise (named by its controllers, with symlinks for
// each, as systemd lays them out).
func makeSys(sys string, view wire.CgroupView) error {
	const ro = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := os.Mkdir(sys, 0o555); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", sys, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=16k,nr_inodes=16,mode=0755"); err != nil {
		return fmt.Errorf("/sys tmpfs: %w", err)
	}
	cg := filepath.Join(sys, "fs", "cgroup")
	if err := os.MkdirAll(cg, 0o755); err != nil {
		return err
	}
	switch view.Version {
	case 2:
		if err := unix.Mount("cgroup2", cg, "cgroup2", ro, ""); err != nil {
			return fmt.Errorf("cgroup view: %w", err)
		}
	case 1:
		if err := unix.Mount("tmpfs", cg, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=16k,nr_inodes=32,mode=0755"); err != nil {
			return fmt.Errorf("cgroup view tmpfs: %w", err)
		}
		for _, m := range view.V1 {
			d := filepath.Join(cg, m.Name)
			if err := os.Mkdir(d, 0o555); err != nil {
				return err
			}
			if err := unix.Mount("cgroup", d, "cgroup", ro, m.Name); err != nil {
				return fmt.Errorf("cgroup view %s: %w", m.Name, err)
			}
			for _, l := range m.Links {
				if err := os.Symlink(m.Name, filepath.Join(cg, l)); err != nil {
					return err
				}
			}
		}
		if err := unix.Mount("", cg, "", unix.MS_REMOUNT|ro, ""); err != nil {
			return fmt.Errorf("cgroup view tmpfs read-only: %w", err)
		}
	}
	if err := unix.Mount("", sys, "", unix.MS_REMOUNT|ro, ""); err != nil {
		return fmt.Errorf("/sys read-only: %w", err)
	}
	return nil
}

// pinCPUs gives the calling thread, the one every command is forked from,
// the affinity mask cpus (none: leave it). Commands inherit it, so
// sched_getaffinity (nproc, Go's runtime.NumCPU, Node's
// os.availableParallelism) counts what the CPU limit allows.
func pinCPUs(cpus []int) error {
	if len(cpus) == 0 {
		return nil
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("CPU affinity %v: %w", cpus, err)
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

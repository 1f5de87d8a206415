package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// Each sandbox's cgroup is made by the OCI runtime from linux.cgroupsPath.
// The path is relative, which runc, crun and runsc all resolve beneath the
// runtime's own cgroup of each controller, i.e. the daemon's: whatever
// limits the daemon runs under still apply to its sandboxes, as with the
// native backend. The layout is
//
//	<daemon's cgroup>/ironclaw-oci/<sandbox id>
//
// The daemon only reads these cgroups (Stats, OOM counts, the leak checks
// of the tests); the runtime creates and removes them.

// cgroupFolder holds every OCI sandbox cgroup beneath the daemon's own.
const cgroupFolder = "ironclaw-oci"

func cgroupRel(id string) string { return cgroupFolder + "/" + id }

// cgroupDirs are the host directories of one sandbox cgroup.
type cgroupDirs struct {
	unified bool   // cgroup v2: every file is in memory
	memory  string // v1 memory (or the v2 directory)
	pids    string
	cpuacct string
	// every is the directory in every hierarchy this process belongs to:
	// the runtime may create the cgroup in all of them (runc does, in
	// freezer, devices, blkio, cpuset, name=systemd...).
	every []string
}

// all lists the distinct directories.
func (c cgroupDirs) all() []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range append([]string{c.memory, c.pids, c.cpuacct}, c.every...) {
		if d != "" && !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// locateCgroup finds where a runtime started by this process puts the
// cgroup rel. It follows the runtime's rule: the calling process's own
// cgroup per controller, joined with rel, beneath that controller's mount.
// On a hybrid host the v1 hierarchies win, as they do for the runtimes.
func locateCgroup(rel string) (cgroupDirs, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return cgroupDirs{}, err
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return cgroupDirs{}, err
	}
	own := map[string]string{} // controller ("" for v2) -> path
	for _, line := range strings.Split(strings.TrimSpace(string(self)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "" {
			own[""] = f[2]
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			own[c] = f[2]
		}
	}
	type mnt struct{ root, point string }
	mounts := map[string]mnt{} // controller ("" for v2) -> mount
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, p := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(p) < 3 {
			continue
		}
		switch p[0] {
		case "cgroup2":
			mounts[""] = mnt{f[3], f[4]}
		case "cgroup":
			for _, opt := range strings.Split(p[2], ",") {
				mounts[opt] = mnt{f[3], f[4]}
			}
		}
	}
	dir := func(ctrl string) string {
		m, ok := mounts[ctrl]
		p, ok2 := own[ctrl]
		if !ok || !ok2 {
			return ""
		}
		rest := strings.TrimPrefix(p, m.root)
		return filepath.Join(m.point, rest, rel)
	}
	var every []string
	for ctrl := range mounts {
		if d := dir(ctrl); d != "" {
			every = append(every, d)
		}
	}
	if mounts["memory"].point != "" {
		c := cgroupDirs{memory: dir("memory"), pids: dir("pids"), cpuacct: dir("cpuacct"), every: every}
		if c.memory == "" || c.pids == "" {
			return c, errors.New("cgroup v1: memory or pids hierarchy not found for this process")
		}
		return c, nil
	}
	d := dir("")
	if d == "" {
		return cgroupDirs{}, errors.New("no cgroup hierarchy found for this process")
	}
	return cgroupDirs{unified: true, memory: d, pids: d, cpuacct: d, every: every}, nil
}

func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// readKey reads "key value" from a flat-keyed file such as memory.events.
func readKey(p, key string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, nil
}

// stats reads the sandbox's resource use.
func (c cgroupDirs) stats() (sandbox.Stats, error) {
	var st sandbox.Stats
	var err error
	if c.unified {
		if st.MemoryBytes, err = readInt(filepath.Join(c.memory, "memory.current")); err != nil {
			return st, fmt.Errorf("cgroup stats: %w", err)
		}
		st.MemoryPeakBytes, _ = readInt(filepath.Join(c.memory, "memory.peak"))
		st.OOMKills, _ = readKey(filepath.Join(c.memory, "memory.events"), "oom_kill")
		usec, _ := readKey(filepath.Join(c.cpuacct, "cpu.stat"), "usage_usec")
		st.CPUUsage = time.Duration(usec) * time.Microsecond
	} else {
		if st.MemoryBytes, err = readInt(filepath.Join(c.memory, "memory.usage_in_bytes")); err != nil {
			return st, fmt.Errorf("cgroup stats: %w", err)
		}
		st.MemoryPeakBytes, _ = readInt(filepath.Join(c.memory, "memory.max_usage_in_bytes"))
		st.OOMKills, _ = readKey(filepath.Join(c.memory, "memory.oom_control"), "oom_kill")
		if c.cpuacct != "" {
			ns, _ := readInt(filepath.Join(c.cpuacct, "cpuacct.usage"))
			st.CPUUsage = time.Duration(ns)
		}
	}
	st.Pids, _ = readInt(filepath.Join(c.pids, "pids.current"))
	return st, nil
}

func (c cgroupDirs) oomKills() int64 {
	f := "memory.oom_control"
	if c.unified {
		f = "memory.events"
	}
	n, _ := readKey(filepath.Join(c.memory, f), "oom_kill")
	return n
}

// workingSet is the sandbox's memory use less the page cache the kernel
// can drop (inactive files): what must fit under its memory limit.
func (c cgroupDirs) workingSet() (int64, error) {
	usage, statKey := "memory.usage_in_bytes", "total_inactive_file"
	if c.unified {
		usage, statKey = "memory.current", "inactive_file"
	}
	n, err := readInt(filepath.Join(c.memory, usage))
	if err != nil {
		return 0, err
	}
	inactive, _ := readKey(filepath.Join(c.memory, "memory.stat"), statKey)
	return max(n-inactive, 0), nil
}

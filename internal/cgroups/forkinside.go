package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrStranded reports that ForkInside could not take the calling thread
// back to its own cgroup: the thread is still a member of the sandbox
// cgroup, and must not fork anything else or run anything that may
// allocate on the cgroup's account.
var ErrStranded = errors.New("cgroups: the calling thread could not leave the sandbox cgroup")

// ForkInside calls fork while the calling OS thread is a member of c in
// every v1 hierarchy, so that the process fork starts is born in c: the
// v1 equivalent of cloning into a cgroup (OpenFD), which v1 lacks.
//
// Why: moving a process into a v1 cgroup (Add: its pid written to
// cgroup.procs) takes the kernel's global threadgroup lock for writing,
// and that waits for an RCU grace period, measured at 8-30 ms for the
// first move after a quiet spell on a two-core VM. A thread that moves
// only itself (writes "0" to tasks) does not take that lock: four
// hierarchies in and out cost 0.1-0.3 ms.
//
// The caller must have locked its goroutine to the OS thread
// (runtime.LockOSThread), so that nothing else runs on the thread while it
// is inside, and the Go runtime starts no thread from it (a locked thread
// hands that to its template thread). fork should start the process and
// return: what the thread allocates meanwhile is charged to c.
//
// The error wraps ErrNotSupported on v2, or when the thread is not where
// the hierarchy found this process (moved by someone since): use Add then.
// When the thread cannot go back, the error wraps ErrStranded, and fork's
// process, if any, was started inside c all the same.
func (c *Cgroup) ForkInside(fork func() error) error {
	if c.h.version != 1 {
		return fmt.Errorf("cgroups: fork inside %q: %w: cgroup v2 clones into a cgroup (OpenFD)", c.name, ErrNotSupported)
	}
	if err := c.h.threadAtHome(); err != nil {
		return fmt.Errorf("cgroups: fork inside %q: %w: %v", c.name, ErrNotSupported, err)
	}
	dirs := c.dirs()
	entered := 0
	var err error
	for _, d := range dirs {
		if err = c.h.ops.write(filepath.Join(d, "tasks"), "0"); err != nil {
			err = fmt.Errorf("cgroups: fork inside %q: %w", c.name, err)
			break
		}
		entered++
	}
	if err == nil {
		err = fork()
	}
	var stranded []error
	for i := range entered {
		if werr := c.h.ops.write(filepath.Join(c.h.dirs[i].ownDir, "tasks"), "0"); werr != nil {
			stranded = append(stranded, werr)
		}
	}
	if len(stranded) > 0 {
		return fmt.Errorf("cgroups: fork inside %q: %w: %w (fork: %v)", c.name, ErrStranded, errors.Join(stranded...), err)
	}
	return err
}

// threadAtHome checks that the calling thread is in this process's own
// cgroup of every hierarchy, the place ForkInside returns it to.
func (h *Hierarchy) threadAtHome() error {
	data, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return err
	}
	pc, err := parseProcCgroup(data)
	if err != nil {
		return err
	}
	for _, d := range h.dirs {
		if d.ownDir == "" {
			return fmt.Errorf("no own cgroup known for %s", d.hierarchy)
		}
		for _, ctl := range d.controllers {
			if got := pc.v1[ctl]; got != d.ownPath {
				return fmt.Errorf("this thread is at %s in the %s hierarchy, not at %s where this process was", got, ctl, d.ownPath)
			}
		}
	}
	return nil
}

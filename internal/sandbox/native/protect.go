package native

import (
	"errors"
	"fmt"

	"github.com/ironclaw/ironclaw/internal/cgroups"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// What keeps a sandbox's pid 1 alive through what its workload does, and
// what the workload may know of its limits.

// protectInit runs after the init is in its cgroup and before it gets its
// plan or Config: it lowers pid 1's oom_score_adj where the host lets it
// (the init starts every command at WorkloadOOMScoreAdj, which initConfig
// puts in the Config). What a host refuses is logged once, and the
// sandbox runs without it.
func (r *Runtime) protectInit(pid int) {
	if !r.noted(&r.noOOM) { // a host that refused once refuses every time
		if err := sandbox.LowerInitOOMScore(pid); err != nil {
			r.noteOnce(&r.noOOM, fmt.Sprintf("pid 1 of each sandbox keeps the daemon's oom_score_adj (%v); commands still start at %d, above it", err, sandbox.WorkloadOOMScoreAdj))
		}
	}
}

// reservePids completes the split of the pids limit that createCold began
// (cgroup v1): sandbox.InitPidsReserve of the sandbox's tasks are pid 1's
// alone, and its forking thread, its main thread (whose tid is its pid),
// is in the pids cgroup's workload child, where every command it forks is
// born. The init moves that thread itself, through the tasks file the
// daemon opened for it, once it is set up and before it is ready: a Go
// program makes its first threads from its main thread as it starts, and
// threads are born in their maker's cgroup, so a main thread moved early
// would take them all into the workload's share. Once started, the init's
// main thread makes none (it is locked, and the Go runtime makes threads
// for it on its template thread), so from here on every new thread of pid
// 1 is born outside the workload's share and may use the reserve. Where
// the kernel refused the init's own move (before 5.16 the writer's
// credentials were checked), the daemon moves the thread, which waits for
// the kernel's global lock.
func (r *Runtime) reservePids(cg *cgroups.Cgroup, pid int) error {
	in, err := cg.InWorkload(pid)
	switch {
	case errors.Is(err, cgroups.ErrNotSupported):
		r.noteOnce(&r.noSplit, "cgroup v2: pid 1 of each sandbox shares its pids limit with the workload (no reserved PIDs)")
		return nil
	case err != nil:
		return fmt.Errorf("sandbox cgroup: reserving PIDs for pid 1: %w", err)
	case in:
		return nil
	}
	if err := cg.SplitPids(pid, sandbox.InitPidsReserve); err != nil {
		return fmt.Errorf("sandbox cgroup: reserving PIDs for pid 1: %w", err)
	}
	return nil
}

// noted reports whether flag is set (see noteOnce).
func (r *Runtime) noted(flag *bool) bool {
	r.notesMu.Lock()
	defer r.notesMu.Unlock()
	return *flag
}

// noteOnce logs msg the first time flag is unset.
func (r *Runtime) noteOnce(flag *bool, msg string) {
	r.notesMu.Lock()
	defer r.notesMu.Unlock()
	if !*flag {
		*flag = true
		r.opts.Logf("%s", msg)
	}
}

// viewOf is what sandboxes mount at /sys/fs/cgroup, in the init's terms.
func viewOf(v cgroups.View) wire.CgroupView {
	out := wire.CgroupView{Version: v.Version}
	for _, m := range v.V1 {
		out.V1 = append(out.V1, wire.CgroupMount{Name: m.Name, Links: m.Links})
	}
	return out
}

// Package cgroups places each sandbox in its own control group and enforces
// its memory, process and CPU limits on cgroup v1 and v2.
//
// # Contract
//
// Detect inspects /proc/self/mountinfo and /proc/self/cgroup (never a
// hard-coded /sys/fs/cgroup) and prepares a folder named "ironclaw" beneath
// the calling process's OWN cgroup of every controller it uses, so that any
// limits placed on the caller by whoever started it still apply to every
// sandbox. Sandbox cgroups are direct children of that folder:
//
//	<own cgroup>/ironclaw/<sandbox name>
//
// The unified (v2) hierarchy is preferred when it offers the memory and pids
// controllers to us; otherwise the v1 hierarchies for memory, pids, cpu and
// cpuacct are used (plus freezer when mounted, which makes Kill race-free).
//
// Detect has side effects and is idempotent: it creates the ironclaw folder
// and, on v2, enables the controllers in cgroup.subtree_control of the
// caller's cgroup and of the ironclaw folder. cgroup v2's "no internal
// processes" rule forbids enabling controllers for the children of a
// non-root cgroup that still contains processes, and the caller is such a
// process. If enabling fails with EBUSY, Detect moves the calling process
// (all its threads) into a leaf child "<own>/ironclaw-daemon" and retries.
// After that /proc/self/cgroup of the caller names ironclaw-daemon; a process
// that starts there (for example a re-exec of the daemon) treats the parent
// as its own cgroup, so the layout does not nest further. Any other process
// left in the caller's cgroup still makes enabling fail, with an error that
// says so.
//
// Limits are hard: memory includes swap (v1 memory.limit_in_bytes and, when
// the kernel accounts swap, memory.memsw.limit_in_bytes; v2 memory.max and
// memory.swap.max=0), pids.max counts tasks (threads included), and the CPU
// limit is a CFS bandwidth quota over a 100ms period.
//
// memory.oom.group is deliberately left at 0 on v2 (and v1 has no such
// knob): when a sandbox exceeds its memory limit the kernel's OOM killer
// kills one process (the one with the highest badness score, normally the
// one that allocated the most), not the whole sandbox, so the sandbox's
// pid-1 agent survives a runaway command and can report the failure.
//
// A sandbox sees its own cgroup through View: what to mount read-only at
// /sys/fs/cgroup inside its cgroup namespace (cgroup2, or each v1
// hierarchy named by all its controllers, as the kernel requires to mount
// an existing hierarchy from a namespace). On v1, SplitPids reserves tasks
// for a sandbox's pid 1: a child cgroup "workload" in the pids hierarchy
// holds pid 1's forking thread, and with it everything that thread forks,
// under the sandbox's pids limit, while the sandbox's own cgroup allows
// the reserve on top; Update keeps the split. ReservePids and
// WorkloadTasks are its two halves for a pid 1 that moves its own thread.
//
// Placing a process: v2 clones straight into a cgroup (OpenFD). v1 has no
// such call, and moving another task there (Add, SplitPids) takes the
// kernel's global threadgroup lock, which waits for an RCU grace period
// (8-30 ms measured on this project's VM); a thread moving only itself
// does not. ForkInside uses that: the forking thread steps into the
// sandbox's cgroups, forks, and steps back, so the child is born inside.
//
// Kill and Destroy kill every process in a sandbox cgroup. v2's cgroup.kill
// is used when the kernel has it (5.14+). Otherwise the cgroup is frozen
// first (v1 freezer controller or v2 cgroup.freeze) so no process can fork
// between the listing of cgroup.procs and the signal, every process is sent
// SIGKILL through a pidfd (so a recycled pid of an unrelated process is never
// signalled), the cgroup is thawed so the signals take effect, and the
// listing is repeated until it is empty.
//
// Freeze and Thaw pause a sandbox: every task of the cgroup stops (no CPU
// time) with its memory and files kept, until thawed. Freeze waits until
// the kernel reports the cgroup frozen. v1 needs the freezer controller
// mounted (CanFreeze says); v2 uses cgroup.freeze.
//
// Caveat on v1: every controller hierarchy has its own tree and the caller
// may sit at a different place in each (here, for example, memory is under
// /process_api/<id> but pids is at the root). The ironclaw folder of a
// controller in which the caller sits at a shared place (such as the root)
// is shared by every IronClaw process on the host that sits there too, so
// sandbox names must be unique host-wide and Collect must only be run by a
// single daemon per host.
//
// A Hierarchy and the Cgroups it returns hold no mutable state and are safe
// for concurrent use; the kernel serialises the underlying file operations.
package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Sentinel errors; every error returned by this package wraps at most one of
// them together with the underlying cause and the file path involved.
var (
	// ErrInvalidName reports a sandbox name outside [a-zA-Z0-9_.-]{1,128}
	// (or "." / "..", or one that collides with a control file).
	ErrInvalidName = errors.New("cgroups: invalid cgroup name")
	// ErrInvalidLimits reports negative, NaN or too small limits.
	ErrInvalidLimits = errors.New("cgroups: invalid limits")
	// ErrExist reports that a sandbox cgroup of that name already exists.
	ErrExist = errors.New("cgroups: cgroup already exists")
	// ErrNotSupported reports an operation the hierarchy cannot do.
	ErrNotSupported = errors.New("cgroups: not supported by this cgroup hierarchy")
	// ErrUnavailable reports that no cgroup hierarchy is usable by this process.
	ErrUnavailable = errors.New("cgroups: no usable cgroup hierarchy")
)

const (
	// folderName is the folder under the caller's own cgroup that holds
	// every sandbox cgroup.
	folderName = "ironclaw"
	// daemonLeaf is the leaf the caller moves into on v2 when its own cgroup
	// must become an inner node.
	daemonLeaf = "ironclaw-daemon"
	// cfsPeriodUs is the CFS bandwidth period; 100ms is the kernel default
	// and keeps throttling latency low for interactive tools.
	cfsPeriodUs = 100000
	// minQuotaUs is the smallest quota the kernel accepts (1ms).
	minQuotaUs = 1000
	// maxNameLen bounds sandbox names; well below NAME_MAX (255).
	maxNameLen = 128
	// killTimeout bounds Kill and each cgroup of Collect, which take no context.
	killTimeout = 10 * time.Second
	// delegateHint is appended to permission errors.
	delegateHint = "cgroup limits need root or a delegated cgroup v2 subtree (systemd-run --user -p Delegate=yes ...)"
)

// Limits are the resource limits of one sandbox. Zero means unlimited.
type Limits struct {
	// MemoryBytes is a hard limit including swap (v1: memory.limit_in_bytes
	// and memory.memsw.limit_in_bytes when present; v2: memory.max and
	// memory.swap.max=0). The kernel rounds it down to whole pages.
	MemoryBytes int64
	// Pids is pids.max: the number of tasks, threads included.
	Pids int64
	// CPUs is a CFS quota in CPUs per 100ms period (v1 cpu.cfs_quota_us /
	// cpu.cfs_period_us; v2 cpu.max). At least 0.01.
	CPUs float64
}

func (l Limits) validate() error {
	switch {
	case l.MemoryBytes < 0:
		return fmt.Errorf("%w: negative MemoryBytes %d", ErrInvalidLimits, l.MemoryBytes)
	case l.Pids < 0:
		return fmt.Errorf("%w: negative Pids %d", ErrInvalidLimits, l.Pids)
	case math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) || l.CPUs < 0:
		return fmt.Errorf("%w: CPUs %v", ErrInvalidLimits, l.CPUs)
	case l.CPUs > 0 && l.quotaUs() < minQuotaUs:
		return fmt.Errorf("%w: CPUs %v is below the kernel's 1ms-per-100ms minimum quota", ErrInvalidLimits, l.CPUs)
	case l.CPUs > 0 && l.CPUs > 1e6:
		return fmt.Errorf("%w: CPUs %v is absurdly large", ErrInvalidLimits, l.CPUs)
	}
	return nil
}

func (l Limits) quotaUs() int64 { return int64(math.Round(l.CPUs * cfsPeriodUs)) }

// Stats is a snapshot of a sandbox cgroup's resource use.
type Stats struct {
	// MemoryBytes is current usage (v1 memory.usage_in_bytes; v2 memory.current).
	MemoryBytes int64
	// MemoryPeakBytes is the high-water mark (v1 memory.max_usage_in_bytes;
	// v2 memory.peak, 0 on kernels before 5.19).
	MemoryPeakBytes int64
	// OOMKills counts processes killed by the OOM killer in this cgroup
	// (v2 memory.events oom_kill; v1 memory.oom_control oom_kill, 0 on
	// kernels before 4.13 that lack the counter).
	OOMKills int64
	// CPUUsage is total CPU time (v1 cpuacct.usage; v2 cpu.stat usage_usec).
	CPUUsage time.Duration
	// Pids is pids.current: tasks, threads included.
	Pids int64
}

// ctlDir is one place in one hierarchy where sandbox cgroups are made: the
// ironclaw folder of a v1 hierarchy (possibly serving several co-mounted
// controllers such as "cpu,cpuacct") or of the v2 hierarchy.
type ctlDir struct {
	controllers []string // controllers this directory serves for us
	base        string   // absolute path of the ironclaw folder
	rel         string   // the same folder relative to its hierarchy root
	hierarchy   string   // v1: every controller of the hierarchy, as /proc/self/cgroup names it ("cpu,cpuacct")
	// v1: the caller's own cgroup, as a path in the hierarchy
	// (/proc/self/cgroup's words) and as a directory; a thread that
	// stepped into a sandbox cgroup (ForkInside) goes back there.
	ownPath, ownDir string
}

// Hierarchy is where this process creates sandbox cgroups. Detect finds it.
type Hierarchy struct {
	version int
	dirs    []ctlDir // v2: exactly one
	ops     fsOps
}

// Detect finds the cgroup hierarchy to use and prepares the ironclaw folder
// (see the package documentation for the side effects on v2). It prefers v2
// when the unified hierarchy offers the memory and pids controllers to the
// caller's cgroup, else uses v1, which needs memory, pids, cpu and cpuacct
// mounted. The error wraps ErrUnavailable when neither is usable or writable.
func Detect() (*Hierarchy, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return detect(sysEnv{mountinfo: mi, cgroup: cg, pid: os.Getpid(), ops: hostOps()})
}

// Version returns 1 or 2.
func (h *Hierarchy) Version() int { return h.version }

// Describe returns a human-readable summary such as
// "cgroup v1 (memory, pids, cpu, cpuacct, freezer) under /process_api/x/ironclaw".
// On v1 each group of controllers at a different place is listed with its path.
func (h *Hierarchy) Describe() string {
	var all []string
	sameRel := true
	for _, d := range h.dirs {
		all = append(all, d.controllers...)
		if d.rel != h.dirs[0].rel {
			sameRel = false
		}
	}
	s := fmt.Sprintf("cgroup v%d (%s) under ", h.version, strings.Join(all, ", "))
	if sameRel {
		return s + h.dirs[0].rel
	}
	// Group controllers by path, keeping first-seen order.
	var rels []string
	byRel := map[string][]string{}
	for _, d := range h.dirs {
		if _, ok := byRel[d.rel]; !ok {
			rels = append(rels, d.rel)
		}
		byRel[d.rel] = append(byRel[d.rel], d.controllers...)
	}
	parts := make([]string, len(rels))
	for i, r := range rels {
		parts[i] = strings.Join(byRel[r], ",") + ":" + r
	}
	return s + strings.Join(parts, " ")
}

func (h *Hierarchy) has(controller string) bool {
	return h.baseFor(controller) != ""
}

func (h *Hierarchy) baseFor(controller string) string {
	for _, d := range h.dirs {
		for _, c := range d.controllers {
			if c == controller {
				return d.base
			}
		}
	}
	return ""
}

// validName reports whether name is usable as a sandbox cgroup name.
func validName(name string) bool {
	if len(name) == 0 || len(name) > maxNameLen || name == "." || name == ".." {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}

// Create makes the sandbox cgroup name in every controller and writes the
// limits. On any failure it removes what it made. The error wraps
// ErrInvalidName, ErrInvalidLimits, ErrExist or ErrNotSupported (a CPU limit
// on a v2 hierarchy without the cpu controller) where applicable.
func (h *Hierarchy) Create(name string, l Limits) (*Cgroup, error) {
	if !validName(name) {
		return nil, fmt.Errorf("cgroups: create %q: %w: want [a-zA-Z0-9_.-]{1,%d}", name, ErrInvalidName, maxNameLen)
	}
	if err := l.validate(); err != nil {
		return nil, fmt.Errorf("cgroups: create %q: %w", name, err)
	}
	if l.CPUs > 0 && !h.has("cpu") {
		return nil, fmt.Errorf("cgroups: create %q: CPU limit: %w: cpu controller unavailable", name, ErrNotSupported)
	}
	c := &Cgroup{h: h, name: name}
	var made []string
	cleanup := func() {
		for i := len(made) - 1; i >= 0; i-- {
			_ = h.ops.rmdir(made[i]) // best effort: nothing runs in it yet
		}
	}
	for i, dir := range c.dirs() {
		err := h.ops.mkdir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			// Someone removed the (empty) ironclaw folder since Detect,
			// e.g. an administrator tidying up: recreate it and retry.
			if err = h.recreateBase(h.dirs[i]); err == nil {
				err = h.ops.mkdir(dir)
			}
		}
		if err != nil {
			cleanup()
			if errors.Is(err, fs.ErrExist) {
				if fi, serr := os.Stat(dir); serr == nil && !fi.IsDir() {
					// e.g. "cgroup.procs": the name of a control file.
					return nil, fmt.Errorf("cgroups: create %q: %w: collides with control file %s", name, ErrInvalidName, dir)
				}
				return nil, fmt.Errorf("cgroups: create %q: %w: %w", name, ErrExist, err)
			}
			return nil, fmt.Errorf("cgroups: create %q: %w", name, err)
		}
		made = append(made, dir)
	}
	if err := c.applyLimits(l); err != nil {
		cleanup()
		return nil, fmt.Errorf("cgroups: create %q: %w", name, err)
	}
	c.applied = l
	return c, nil
}

// recreateBase makes the ironclaw folder d again, as Detect did.
func (h *Hierarchy) recreateBase(d ctlDir) error {
	if err := mkdirExistOK(h.ops, d.base); err != nil {
		return err
	}
	if h.version == 2 {
		return enableControllers(h.ops, d.base, d.controllers)
	}
	return nil
}

func (c *Cgroup) applyLimits(l Limits) error {
	w := c.h.ops.write
	if c.h.version == 2 {
		d := c.dirs()[0]
		if l.MemoryBytes > 0 {
			if err := w(filepath.Join(d, "memory.max"), strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
				return err
			}
			// memory.swap.max is absent when the kernel does not account
			// swap, in which case there is no swap to limit.
			if p := filepath.Join(d, "memory.swap.max"); exists(p) {
				if err := w(p, "0"); err != nil {
					return err
				}
			}
		}
		if l.Pids > 0 {
			if err := w(filepath.Join(d, "pids.max"), strconv.FormatInt(l.Pids, 10)); err != nil {
				return err
			}
		}
		if l.CPUs > 0 {
			v := fmt.Sprintf("%d %d", l.quotaUs(), cfsPeriodUs)
			if err := w(filepath.Join(d, "cpu.max"), v); err != nil {
				return err
			}
		}
		return nil
	}
	if l.MemoryBytes > 0 {
		d := c.dirFor("memory")
		v := strconv.FormatInt(l.MemoryBytes, 10)
		// memsw must stay >= the memory limit, so the memory limit goes first.
		if err := w(filepath.Join(d, "memory.limit_in_bytes"), v); err != nil {
			return err
		}
		// memory.memsw.* exists only when the kernel accounts swap
		// (CONFIG_MEMCG_SWAP and swapaccount=1).
		if p := filepath.Join(d, "memory.memsw.limit_in_bytes"); exists(p) {
			if err := w(p, v); err != nil {
				return err
			}
		}
	}
	if l.Pids > 0 {
		if err := w(filepath.Join(c.dirFor("pids"), "pids.max"), strconv.FormatInt(l.Pids, 10)); err != nil {
			return err
		}
	}
	if l.CPUs > 0 {
		d := c.dirFor("cpu")
		if err := w(filepath.Join(d, "cpu.cfs_period_us"), strconv.Itoa(cfsPeriodUs)); err != nil {
			return err
		}
		if err := w(filepath.Join(d, "cpu.cfs_quota_us"), strconv.FormatInt(l.quotaUs(), 10)); err != nil {
			return err
		}
	}
	return nil
}

// Collect garbage-collects sandbox cgroups left by a crashed earlier run:
// every cgroup under the ironclaw folder (in any controller, so half-made
// ones are found too) whose name keep rejects has its processes killed and
// is removed in every controller. Directories whose names Create would
// reject are never touched. It returns the names removed, sorted, and the
// joined errors of those it could not remove.
func (h *Hierarchy) Collect(keep func(name string) bool) (removed []string, err error) {
	names := map[string]bool{}
	var errs []error
	for _, d := range h.dirs {
		entries, rerr := os.ReadDir(d.base)
		if rerr != nil {
			errs = append(errs, fmt.Errorf("cgroups: collect: %w", rerr))
			continue
		}
		for _, e := range entries {
			if e.IsDir() && validName(e.Name()) {
				names[e.Name()] = true
			}
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		if keep(n) {
			continue
		}
		c := &Cgroup{h: h, name: n}
		ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
		derr := c.Destroy(ctx)
		cancel()
		if derr != nil {
			errs = append(errs, fmt.Errorf("cgroups: collect %q: %w", n, derr))
			continue
		}
		removed = append(removed, n)
	}
	return removed, errors.Join(errs...)
}

// View is what a sandbox mounts at /sys/fs/cgroup, inside its cgroup
// namespace, to see its own cgroup (read-only): the unified hierarchy on
// v2, else one mount per v1 hierarchy that holds its memory, pids or CPU
// limits.
type View struct {
	Version int
	// V1 lists the v1 hierarchies, each mounted at /sys/fs/cgroup/<Name>.
	V1 []ViewMount
}

// ViewMount is one v1 hierarchy of a View.
type ViewMount struct {
	// Name is the directory under /sys/fs/cgroup and the mount's options:
	// every controller of the hierarchy, comma-separated ("memory",
	// "cpu,cpuacct"). The kernel only mounts an existing hierarchy in a
	// cgroup namespace when the options name exactly its controllers.
	Name string
	// Links are the other names the hierarchy is known by, each a symlink
	// to Name ("cpu" and "cpuacct" for "cpu,cpuacct"), as systemd lays
	// them out.
	Links []string
}

// View describes the sandbox's cgroup view (see View).
func (h *Hierarchy) View() View {
	if h.version == 2 {
		return View{Version: 2}
	}
	v := View{Version: 1}
	for _, d := range h.dirs {
		var used []string
		for _, c := range d.controllers {
			if c != "freezer" { // Kill's tool, not a limit
				used = append(used, c)
			}
		}
		if len(used) == 0 {
			continue
		}
		name := d.hierarchy
		if name == "" {
			name = strings.Join(d.controllers, ",")
		}
		m := ViewMount{Name: name}
		for _, c := range strings.Split(name, ",") {
			if c != name && !strings.Contains(c, "=") {
				m.Links = append(m.Links, c)
			}
		}
		v.V1 = append(v.V1, m)
	}
	return v
}

// Cgroup is one sandbox's control group.
type Cgroup struct {
	h    *Hierarchy
	name string

	// applied are the limits Create and Update wrote (each field > 0 is
	// in force), so that Update writes only what changes: on cgroup v1 a
	// memory limit costs two writes and a CPU limit two more, each tens of
	// microseconds. Only this Cgroup writes them.
	mu      sync.Mutex
	applied Limits
}

// Name returns the sandbox name given to Create.
func (c *Cgroup) Name() string { return c.name }

// dirs returns the cgroup's directory in every hierarchy.
func (c *Cgroup) dirs() []string {
	out := make([]string, len(c.h.dirs))
	for i, d := range c.h.dirs {
		out[i] = filepath.Join(d.base, c.name)
	}
	return out
}

// dirFor returns the cgroup's directory for one controller, "" if unused.
func (c *Cgroup) dirFor(controller string) string {
	b := c.h.baseFor(controller)
	if b == "" {
		return ""
	}
	return filepath.Join(b, c.name)
}

// Add moves process pid (all its threads) into the cgroup in every
// controller. If it fails part-way the process is left in some of them; the
// caller should kill it.
func (c *Cgroup) Add(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroups: add pid %d to %q: invalid pid", pid, c.name)
	}
	for _, d := range c.dirs() {
		if err := c.h.ops.write(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("cgroups: add pid %d to %q: %w", pid, c.name, err)
		}
	}
	return nil
}

// WorkloadName is the child of a sandbox's pids cgroup that SplitPids makes.
const WorkloadName = "workload"

// SplitPids reserves reserve of the sandbox's tasks for its pid 1 (cgroup
// v1 only; ErrNotSupported on v2). It makes the child cgroup WorkloadName
// in the pids hierarchy, limited to the sandbox's current pids.max, raises
// the sandbox's own pids.max by reserve, and moves the single thread tid
// (pid 1's forking thread; a v1 cgroup holds threads, not processes) into
// the child. Every process that thread forks is born in the child and
// counts against its limit; pid 1's other threads, the ones that make its
// new threads, stay in the sandbox's cgroup and may use the reserve the
// workload cannot reach. Update keeps the reserve. Threads are born in
// their maker's cgroup, so tid must be moved only once the process has
// made the threads it makes from tid (a Go program's main thread makes its
// first threads as it starts).
func (c *Cgroup) SplitPids(tid int, reserve int64) error {
	if tid <= 0 {
		return fmt.Errorf("cgroups: split pids of %q: %w: tid %d", c.name, ErrInvalidLimits, tid)
	}
	if err := c.ReservePids(reserve); err != nil {
		return err
	}
	if err := c.h.ops.write(filepath.Join(c.dirFor("pids"), WorkloadName, "tasks"), strconv.Itoa(tid)); err != nil {
		return fmt.Errorf("cgroups: split pids of %q: %w", c.name, err)
	}
	return nil
}

// ReservePids is the first half of SplitPids: it makes the workload child
// with the sandbox's pids limit and raises the sandbox's own limit by
// reserve, moving no thread. The thread that is to fork the workload then
// moves itself (see WorkloadTasks), or SplitPids is called with its tid.
func (c *Cgroup) ReservePids(reserve int64) error {
	if c.h.version != 1 {
		return fmt.Errorf("cgroups: split pids of %q: %w: cgroup v2 has no per-thread pids cgroups here", c.name, ErrNotSupported)
	}
	if reserve <= 0 {
		return fmt.Errorf("cgroups: split pids of %q: %w: reserve %d", c.name, ErrInvalidLimits, reserve)
	}
	d := c.dirFor("pids")
	w := filepath.Join(d, WorkloadName)
	if exists(w) {
		return nil // reserved before; the limits are Update's to change
	}
	cur, err := readInt(filepath.Join(d, "pids.max"))
	if err != nil {
		return fmt.Errorf("cgroups: split pids of %q: %w", c.name, err)
	}
	if cur < 0 {
		return fmt.Errorf("cgroups: split pids of %q: %w: no pids limit to split", c.name, ErrInvalidLimits)
	}
	steps := []func() error{
		func() error { return c.h.ops.mkdir(w) },
		func() error { return c.h.ops.write(filepath.Join(w, "pids.max"), strconv.FormatInt(cur, 10)) },
		func() error { return c.h.ops.write(filepath.Join(d, "pids.max"), strconv.FormatInt(cur+reserve, 10)) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("cgroups: split pids of %q: %w", c.name, err)
		}
	}
	return nil
}

// WorkloadTasks opens, for writing, the tasks file of the workload child
// that ReservePids made. A thread given this descriptor moves itself into
// the workload by writing "0" to it: the kernel checks the opener's
// credentials (the daemon's), not the writer's, and a thread moving only
// itself does not wait for the global lock that moving another task takes
// (see ForkInside). The caller closes the file.
func (c *Cgroup) WorkloadTasks() (*os.File, error) {
	if c.h.version != 1 {
		return nil, fmt.Errorf("cgroups: workload tasks of %q: %w", c.name, ErrNotSupported)
	}
	f, err := os.OpenFile(filepath.Join(c.dirFor("pids"), WorkloadName, "tasks"), os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroups: workload tasks of %q: %w", c.name, err)
	}
	return f, nil
}

// InWorkload reports whether thread tid is in the workload child of the
// pids hierarchy (v1), that is, whether the split is complete.
func (c *Cgroup) InWorkload(tid int) (bool, error) {
	if c.h.version != 1 {
		return false, fmt.Errorf("cgroups: workload tasks of %q: %w", c.name, ErrNotSupported)
	}
	pids, err := readPids(filepath.Join(c.dirFor("pids"), WorkloadName, "tasks"))
	if err != nil {
		return false, fmt.Errorf("cgroups: workload tasks of %q: %w", c.name, err)
	}
	return slices.Contains(pids, tid), nil
}

// pidsReserve is what SplitPids reserved (0 when the cgroup is not split).
func (c *Cgroup) pidsReserve() (int64, error) {
	if c.h.version != 1 {
		return 0, nil
	}
	d := c.dirFor("pids")
	w := filepath.Join(d, WorkloadName)
	if !exists(w) {
		return 0, nil
	}
	all, err := readInt(filepath.Join(d, "pids.max"))
	if err != nil {
		return 0, err
	}
	work, err := readInt(filepath.Join(w, "pids.max"))
	if err != nil {
		return 0, err
	}
	return max(all-work, 0), nil
}

// OpenFD returns an O_DIRECTORY|O_CLOEXEC file descriptor of the cgroup
// directory for syscall.SysProcAttr.UseCgroupFD, which starts a child
// directly inside the cgroup (clone3 CLONE_INTO_CGROUP) so it never runs a
// single instruction outside its limits. The caller closes it. v1 has no
// such mechanism: ErrNotSupported.
func (c *Cgroup) OpenFD() (int, error) {
	if c.h.version != 2 {
		return -1, fmt.Errorf("cgroups: open fd of %q: %w: cgroup v1 cannot clone into a cgroup", c.name, ErrNotSupported)
	}
	d := c.dirs()[0]
	fd, err := unix.Open(d, unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_RDONLY, 0)
	if err != nil {
		return -1, fmt.Errorf("cgroups: open fd of %q: %w", c.name, &fs.PathError{Op: "open", Path: d, Err: err})
	}
	return fd, nil
}

// Stats reads the cgroup's resource use. Counters a kernel lacks read as 0.
func (c *Cgroup) Stats() (Stats, error) {
	var s Stats
	var err error
	wrap := func(e error) (Stats, error) { return Stats{}, fmt.Errorf("cgroups: stats of %q: %w", c.name, e) }
	if c.h.version == 2 {
		d := c.dirs()[0]
		if s.MemoryBytes, err = readInt(filepath.Join(d, "memory.current")); err != nil {
			return wrap(err)
		}
		if s.MemoryPeakBytes, err = readIntOptional(filepath.Join(d, "memory.peak")); err != nil {
			return wrap(err)
		}
		if s.OOMKills, err = c.oomKills(); err != nil {
			return wrap(err)
		}
		usec, err := readKeyed(filepath.Join(d, "cpu.stat"), "usage_usec")
		if err != nil {
			return wrap(err)
		}
		s.CPUUsage = time.Duration(usec) * time.Microsecond
		if s.Pids, err = readInt(filepath.Join(d, "pids.current")); err != nil {
			return wrap(err)
		}
		return s, nil
	}
	mem := c.dirFor("memory")
	if s.MemoryBytes, err = readInt(filepath.Join(mem, "memory.usage_in_bytes")); err != nil {
		return wrap(err)
	}
	if s.MemoryPeakBytes, err = readInt(filepath.Join(mem, "memory.max_usage_in_bytes")); err != nil {
		return wrap(err)
	}
	if s.OOMKills, err = c.oomKills(); err != nil {
		return wrap(err)
	}
	ns, err := readInt(filepath.Join(c.dirFor("cpuacct"), "cpuacct.usage"))
	if err != nil {
		return wrap(err)
	}
	s.CPUUsage = time.Duration(ns)
	if s.Pids, err = readInt(filepath.Join(c.dirFor("pids"), "pids.current")); err != nil {
		return wrap(err)
	}
	return s, nil
}

// Pids returns the sorted ids of the processes in the cgroup and in any
// descendant cgroups (in any controller on v1), as seen from this process's
// pid namespace.
func (c *Cgroup) Pids() ([]int, error) {
	pids, err := c.listPids(false)
	if err != nil {
		return nil, fmt.Errorf("cgroups: pids of %q: %w", c.name, err)
	}
	return pids, nil
}

// Kill kills every process in the cgroup and waits (up to 10s) until
// cgroup.procs is empty. See the package documentation for the method.
func (c *Cgroup) Kill() error {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	if err := c.kill(ctx); err != nil {
		return fmt.Errorf("cgroups: kill %q: %w", c.name, err)
	}
	return nil
}

// Destroy kills every process in the cgroup and removes it (and any
// descendants) in every controller, retrying EBUSY (exiting processes not
// yet gone) until ctx ends. A cgroup that is already gone is not an error,
// so Destroy is idempotent.
func (c *Cgroup) Destroy(ctx context.Context) error {
	if c.removeIfEmpty() {
		return nil
	}
	var errs []error
	if err := c.kill(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, d := range c.dirs() {
		if err := c.removeTree(ctx, d); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cgroups: destroy %q: %w", c.name, err)
	}
	return nil
}

// removeIfEmpty is Destroy's usual case, a sandbox whose pid namespace is
// gone already: it removes the cgroup with rmdir alone, the child it made
// itself (WorkloadName under pids, v1) first, and reports whether every
// directory is gone. The kernel refuses to remove a cgroup that holds a
// task or a child cgroup (EBUSY), so true means there was nothing left
// to kill or list; the first refusal leaves the rest to the full
// teardown, which lists, kills and removes whatever remains. It spares
// the teardown listing every directory twice (the kill's look for
// processes and removeTree's for children), about 0.5 ms of a one-shot
// run on cgroup v1's five controllers.
func (c *Cgroup) removeIfEmpty() bool {
	pids := c.dirFor("pids")
	for _, d := range c.dirs() {
		if c.h.version == 1 && d == pids {
			if err := c.h.ops.rmdir(filepath.Join(d, WorkloadName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return false
			}
		}
		if err := c.h.ops.rmdir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	return true
}

// removeTree removes dir and its descendant cgroups, deepest first.
func (c *Cgroup) removeTree(ctx context.Context, dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := c.removeTree(ctx, filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	var b backoff
	for {
		err := c.h.ops.rmdir(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return err
		}
		// EBUSY: tasks are still exiting (v2 counts a cgroup populated
		// until every task has fully gone). Kill any latecomer too.
		if pids, perr := c.listPids(true); perr == nil && len(pids) > 0 {
			c.signal(pids)
		}
		if werr := b.wait(ctx); werr != nil {
			return fmt.Errorf("%w (gave up: %w)", err, werr)
		}
	}
}

// OOMKills reads only the OOM-kill counter: Stats reads five files, and
// the sandbox checks this one around every command.
func (c *Cgroup) OOMKills() (int64, error) {
	n, err := c.oomKills()
	if err != nil {
		return 0, fmt.Errorf("cgroups: oom kills of %q: %w", c.name, err)
	}
	return n, nil
}

// oomKills reads the OOM-kill counter.
func (c *Cgroup) oomKills() (int64, error) { return readKeyed(c.oomFile(), "oom_kill") }

// oomFile is the file holding the OOM-kill counter: v2 memory.events, v1
// memory.oom_control.
func (c *Cgroup) oomFile() string {
	if c.h.version == 2 {
		return filepath.Join(c.dirs()[0], "memory.events")
	}
	return filepath.Join(c.dirFor("memory"), "memory.oom_control")
}

// OOMCounter reads a cgroup's OOM-kill counter through a descriptor kept
// open: one pread a reading, where OOMKills opens, reads and closes the
// file. A sandbox holds one for each command it runs, read before and
// after (two system calls fewer than OOMKills twice), and none while idle.
// It is safe for concurrent use.
type OOMCounter struct {
	f    *os.File
	path string
}

// OpenOOMCounter opens the cgroup's OOM-kill counter. Close it before the
// cgroup is destroyed.
func (c *Cgroup) OpenOOMCounter() (*OOMCounter, error) {
	p := c.oomFile()
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("cgroups: oom kills of %q: %w", c.name, err)
	}
	return &OOMCounter{f: f, path: p}, nil
}

// Read returns the counter's current value. A kernfs file regenerates its
// contents for every read at offset 0, so each pread sees the live count.
func (o *OOMCounter) Read() (int64, error) {
	var buf [512]byte // memory.events is 6 short lines, memory.oom_control 3
	n, err := o.f.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("cgroups: read %s: %w", o.path, err)
	}
	if n == len(buf) {
		return 0, fmt.Errorf("cgroups: read %s: longer than %d bytes", o.path, len(buf))
	}
	v, err := parseKeyed(buf[:n], "oom_kill")
	if err != nil {
		return 0, fmt.Errorf("cgroups: parse %s: %w", o.path, err)
	}
	return v, nil
}

// Close releases the descriptor.
func (o *OOMCounter) Close() error { return o.f.Close() }

// Update changes the limits of a live cgroup (zero fields are left alone).
// On v1 the swap-inclusive limit must never sit below the memory limit, so
// the order of the two writes depends on the direction of the change.
func (c *Cgroup) Update(l Limits) error {
	if err := l.validate(); err != nil {
		return fmt.Errorf("cgroups: update %q: %w", c.name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// A limit already in force is not written again; 0 leaves one as it
	// is, as in Create.
	want := l
	if want.MemoryBytes == c.applied.MemoryBytes {
		want.MemoryBytes = 0
	}
	if want.Pids == c.applied.Pids {
		want.Pids = 0
	}
	if want.CPUs == c.applied.CPUs {
		want.CPUs = 0
	}
	if want == (Limits{}) {
		return nil
	}
	if err := c.update(want); err != nil {
		// What was written before the failure is unknown: write every
		// limit next time.
		c.applied = Limits{}
		return err
	}
	if want.MemoryBytes > 0 {
		c.applied.MemoryBytes = want.MemoryBytes
	}
	if want.Pids > 0 {
		c.applied.Pids = want.Pids
	}
	if want.CPUs > 0 {
		c.applied.CPUs = want.CPUs
	}
	return nil
}

func (c *Cgroup) update(l Limits) error {
	if c.h.version == 1 && l.MemoryBytes > 0 {
		d := c.dirFor("memory")
		if p := filepath.Join(d, "memory.memsw.limit_in_bytes"); exists(p) {
			cur, err := readInt(filepath.Join(d, "memory.limit_in_bytes"))
			if err != nil {
				return fmt.Errorf("cgroups: update %q: %w", c.name, err)
			}
			if l.MemoryBytes > cur {
				// Raise memsw first; applyLimits then writes memory, then
				// memsw again (a no-op).
				if err := c.h.ops.write(p, strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
					return fmt.Errorf("cgroups: update %q: %w", c.name, err)
				}
			}
		}
	}
	if l.Pids > 0 {
		reserve, err := c.pidsReserve()
		if err != nil {
			return fmt.Errorf("cgroups: update %q: %w", c.name, err)
		}
		if reserve > 0 {
			// Split (see SplitPids): the workload gets the limit, the
			// sandbox the limit and pid 1's reserve.
			w := filepath.Join(c.dirFor("pids"), WorkloadName, "pids.max")
			if err := c.h.ops.write(w, strconv.FormatInt(l.Pids, 10)); err != nil {
				return fmt.Errorf("cgroups: update %q: %w", c.name, err)
			}
			l.Pids += reserve
		}
	}
	if err := c.applyLimits(l); err != nil {
		return fmt.Errorf("cgroups: update %q: %w", c.name, err)
	}
	return nil
}

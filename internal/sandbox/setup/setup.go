// Package setup is what a native sandbox's pid 1 does to build its root
// and seal itself, written out as a list of steps (a Plan) that either of
// its two inits executes: the Go init (inside/boot), which compiles the
// plan itself from its wire.Config, and the C one (inside/steward/csrc),
// which starts without a Go runtime and is sent the plan, compiled and
// encoded by the daemon (Compiler, Encode), for every sandbox Supports
// (native.Options.GoInit turns it off).
//
// The decisions (which mounts, in which order, with which flags; which
// rlimits, landlock rules and seccomp program) are all made here, once;
// the executors only make the system calls a step names, so the two inits
// cannot build different sandboxes from one Config. Steps whose outcome
// depends on the new root (Freeze, Mask: skip a path the root lacks; Bind:
// a file or a directory mount point) carry that small decision into both.
package setup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// Op is what a Step does. The numbers are the encoding's (csrc/setup.c
// names the same ones); append, never renumber.
type Op uint8

// The root. Paths of the steps between Root and Pivot are inside the root
// being assembled (the executor joins them to Root's directory); Open's
// are the host's; after Pivot, the new root's.
const (
	// OpUnshareCgroup enters a new cgroup namespace (cgroup v1 where the
	// init could not be born in its cgroups).
	OpUnshareCgroup Op = iota + 1
	// OpPrivate makes every mount of the namespace private.
	OpPrivate
	// OpOpen opens host path Path (O_PATH) as the next source slot,
	// after the mount trees the daemon sent (slots 0..trees-1).
	OpOpen
	// OpRoot mounts the root's tmpfs (options Data) on host directory
	// Path, where the root is assembled.
	OpRoot
	// OpMkdir makes directory Path with permissions Mode; OpMkdirAll, and
	// its missing parents.
	OpMkdir
	OpMkdirAll
	// OpWriteFile writes file Path holding Data, with permissions Mode.
	OpWriteFile
	// OpSymlink makes Path a symlink to Source.
	OpSymlink
	// OpBind binds source slot Slot (recursively; a mount tree is
	// attached) at Path, creating a directory or an empty file to mount
	// on as the source is one or not, and sets the mount attributes Attr
	// (MOUNT_ATTR_*) on it and every mount below.
	OpBind
	// OpMount is mount(Source, Path, FSType, Flags, Data).
	OpMount
	// OpFreeze makes Path, where the root has it, read-only, nosuid, nodev
	// and noexec (a recursive bind of itself).
	OpFreeze
	// OpMask hides Path where the root has it: a directory under a
	// read-only bind of the empty directory Source (Source "": under an
	// empty read-only tmpfs), anything else under the root's /dev/null.
	OpMask
	// OpGate masks the gated programs (the Go init only: see boot's
	// maskGated).
	OpGate
	// OpPivot makes the root "/" and detaches the host's.
	OpPivot
	// OpHostname sets the hostname to Data.
	OpHostname
	// OpLoopback brings lo up.
	OpLoopback
	// OpCPUs pins the forking thread to the CPUs listed in Data ("0,3").
	OpCPUs
	// OpOOM opens pid 1's oom_score_adj, for commands to start at Flags
	// (an int64) above pid 1's own.
	OpOOM
	// OpListen binds and listens on 127.0.0.1 port Flags; the listeners go
	// back with "ready", in order.
	OpListen
	// OpRmdir removes the empty directory Path (the masks' Source, once
	// bound: the masked directories keep showing it, deleted and empty).
	OpRmdir
)

// maskDir is the empty directory of the root masked directories show,
// removed once bound (so no path leads to it); no plan has an entry there
// (rootfs.Check).
const maskDir = "/" + rootfs.MaskDir

// The seal: only the C init executes these (the Go init applies
// cfg.Seal itself, on all of its threads, in the same order).
const (
	// OpRlimit sets resource Slot's soft and hard limits to Flags.
	OpRlimit Op = iota + 64
	// OpIdentity becomes uid Flags, gid Attr with no supplementary groups
	// (unless already them: rootless), after emptying the bounding set,
	// then drops every capability and sets no_new_privs, not dumpable and
	// the death signal.
	OpIdentity
	// OpLandlock creates the ruleset: handled filesystem rights Flags,
	// network rights Attr, scopes Mode, struct size Slot.
	OpLandlock
	// OpLandlockPath grants Flags beneath directory Path, or Attr on the
	// file Path; a path the root lacks is skipped.
	OpLandlockPath
	// OpLandlockPort allows access Attr on TCP port Flags.
	OpLandlockPort
	// OpLandlockExec grants Flags on pid 1's own two programs, then
	// restricts pid 1 to the ruleset.
	OpLandlockExec
	// OpSeccomp installs the BPF program in Data (struct sock_filter,
	// native byte order), last.
	OpSeccomp
)

// Step is one step of a Plan; which fields it uses is its Op's business
// (see each Op).
type Step struct {
	Op                         Op
	Path, Source, FSType, Data string
	Slot                       int32
	Mode                       uint32
	Flags, Attr                uint64
}

// Plan is what one sandbox's pid 1 does before it serves.
type Plan struct {
	// Trees is how many mount trees the daemon sends (cfg.Sources).
	Trees int
	// Root builds the root and the sandbox's own state (hostname, lo,
	// CPUs, oom_score_adj, listeners); Seal seals (the C init only).
	Root, Seal []Step
}

// Rlimits are the seal's rlimits a native init can set.
var Rlimits = map[string]int{
	seal.RlimitNofile:   unix.RLIMIT_NOFILE,
	seal.RlimitCore:     unix.RLIMIT_CORE,
	seal.RlimitMsgqueue: unix.RLIMIT_MSGQUEUE,
}

// newRootCandidates are where the new root is assembled before
// pivot_root; all are shadowed only inside the sandbox's private mount
// namespace.
var newRootCandidates = []string{"/tmp", "/mnt", "/run", "/dev"}

// Root compiles the steps that build the sandbox of cfg, whose first trees
// sources come as mount trees.
func Root(cfg *wire.Config, trees int) ([]Step, error) {
	sl := &cfg.Seal
	if err := rootfs.Check(sl.Root); err != nil {
		return nil, err
	}
	var steps []Step
	add := func(s Step) { steps = append(steps, s) }
	if cfg.UnshareCgroup {
		// cgroup v1: the daemon has placed us into our cgroups by now, so
		// the namespace is rooted at the sandbox's own cgroup.
		add(Step{Op: OpUnshareCgroup})
	}
	add(Step{Op: OpPrivate})

	// Every host source is opened before anything is mounted: the root is
	// assembled on a host directory (normally /tmp), which then hides
	// what lies beneath it, a test binary or an image directory for
	// instance.
	slots := map[string]int32{}
	for i, p := range cfg.Sources {
		if i < trees {
			slots[p] = int32(i)
		}
	}
	next := int32(trees)
	open := func(p string) {
		if _, ok := slots[p]; !ok {
			slots[p] = next
			next++
			add(Step{Op: OpOpen, Path: p})
		}
	}
	for _, e := range sl.Root {
		if e.Source != "" {
			open(e.Source)
		}
	}
	for _, m := range sl.Mounts {
		if m.Kind == seal.KindBind || m.Kind == seal.KindCopy {
			open(m.Source)
		}
	}
	devices := hostDevices(sl)
	for _, d := range devices {
		open(d)
	}

	root := ""
	for _, c := range newRootCandidates {
		if st, err := os.Stat(c); err == nil && st.IsDir() {
			root = c
			break
		}
	}
	if root == "" {
		return nil, errors.New("no directory to assemble the root in")
	}
	// 4m: the synthetic /etc, mount points, and up to
	// rootfs.MaxAlternatives links (a target beyond 128 bytes takes a page).
	add(Step{Op: OpRoot, Path: root, Data: "size=4m,nr_inodes=4096,mode=0755"})

	const bindAttr = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	// The daemon's one mount of the alternatives links, when it sent one
	// (wire.AlternativesSource): bound where the links would be made.
	altSlot, sharedAlt := slots[wire.AlternativesSource]
	for _, e := range sl.Root {
		switch e.Kind {
		case rootfs.KindDir:
			if sharedAlt && e.Path == rootfs.AlternativesDir {
				add(Step{Op: OpBind, Slot: altSlot, Path: e.Path, Attr: bindAttr | unix.MOUNT_ATTR_NOEXEC | unix.MOUNT_ATTR_RDONLY})
				continue
			}
			// rootfs.Check has the plan make a directory's parent first.
			add(Step{Op: OpMkdir, Path: e.Path, Mode: e.Mode&0o777 | 0o700})
		case rootfs.KindFile:
			add(Step{Op: OpWriteFile, Path: e.Path, Data: e.Content, Mode: e.Mode & 0o777})
		case rootfs.KindSymlink:
			if _, ok := rootfs.Alternative(e); ok && sharedAlt {
				continue // in the bound mount
			}
			add(Step{Op: OpSymlink, Path: e.Path, Source: e.Target})
		case rootfs.KindBindDir, rootfs.KindBindFile:
			add(Step{Op: OpBind, Slot: slots[e.Source], Path: e.Path, Attr: bindAttr | unix.MOUNT_ATTR_RDONLY})
		default:
			return nil, fmt.Errorf("root entry %s: unknown kind %q", e.Path, e.Kind)
		}
	}
	for _, m := range sl.Mounts {
		switch m.Kind {
		case seal.KindDev:
			steps = appendDev(steps, m, devices, slots)
		case seal.KindProc:
			add(Step{Op: OpMkdir, Path: m.Target, Mode: 0o555})
			add(Step{Op: OpMount, Source: "proc", Path: m.Target, FSType: "proc", Flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC})
		case seal.KindCgroupView:
			if m.Target != "/sys/fs/cgroup" {
				return nil, fmt.Errorf("mount %s: the cgroup view belongs at /sys/fs/cgroup", m.Target)
			}
			steps = appendSys(steps, "/sys", cfg.Cgroup)
		case seal.KindTmpfs:
			add(Step{Op: OpMkdirAll, Path: m.Target, Mode: 0o755})
			add(Step{Op: OpMount, Source: "tmpfs", Path: m.Target, FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: m.TmpfsOptions()})
		case seal.KindBind:
			attr := uint64(bindAttr)
			if m.ReadOnly {
				attr |= unix.MOUNT_ATTR_RDONLY
			}
			add(Step{Op: OpBind, Slot: slots[m.Source], Path: m.Target, Attr: attr})
		case seal.KindCopy:
			// The daemon's files, which it does not change while the
			// sandbox runs: a read-only bind shows what a copy would.
			add(Step{Op: OpBind, Slot: slots[m.Source], Path: m.Target, Attr: bindAttr | unix.MOUNT_ATTR_RDONLY})
		default:
			return nil, fmt.Errorf("mount %s: unknown mount kind %q", m.Target, m.Kind)
		}
	}
	for _, q := range sl.ReadOnlyPaths {
		add(Step{Op: OpFreeze, Path: q})
	}
	// Directories are masked with binds of one empty directory rather
	// than an empty tmpfs each: every superblock is a memcg-aware
	// shrinker, and the kernel keeps, for every memory cgroup, room for
	// every such shrinker, so a sandbox's own superblocks cost each other
	// sandbox's cgroup memory too (quadratic in the sandboxes a host
	// holds: docs/performance.md).
	if len(sl.MaskedPaths) > 0 {
		add(Step{Op: OpMkdir, Path: maskDir, Mode: 0o555})
		for _, q := range sl.MaskedPaths {
			add(Step{Op: OpMask, Path: q, Source: maskDir})
		}
		add(Step{Op: OpRmdir, Path: maskDir})
	}
	if len(cfg.Gate) > 0 {
		add(Step{Op: OpGate})
	}
	// The root itself: nothing may be created in it. Read-only as a mount
	// (MS_BIND), not as a superblock: a superblock holding a removed
	// inode still in use (maskDir, bound) refuses to turn read-only
	// (EBUSY). No other mount of it is writable (the masks are read-only
	// binds), and the sealed sandbox cannot mount.
	add(Step{Op: OpMount, Path: "/", Flags: unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV})
	add(Step{Op: OpPivot})

	add(Step{Op: OpHostname, Data: sl.Hostname})
	add(Step{Op: OpLoopback})
	if len(cfg.CPUs) > 0 {
		cpus := make([]string, len(cfg.CPUs))
		for i, c := range cfg.CPUs {
			if c < 0 {
				return nil, fmt.Errorf("CPU affinity: bad CPU %d", c)
			}
			cpus[i] = strconv.Itoa(c)
		}
		add(Step{Op: OpCPUs, Data: strings.Join(cpus, ",")})
	}
	if cfg.WorkloadOOMScoreAdj != 0 {
		add(Step{Op: OpOOM, Flags: uint64(int64(cfg.WorkloadOOMScoreAdj))})
	}
	for _, p := range cfg.Listen {
		add(Step{Op: OpListen, Flags: uint64(p)})
	}
	return steps, nil
}

// hostDevices are the host device nodes bound into the sandbox's /dev: a
// user namespace cannot mknod, so they are binds of the host's nodes. The
// devpts instance provides the rest (/dev/pts/ptmx).
func hostDevices(sl *seal.Seal) []string {
	var out []string
	for _, d := range sl.DeviceNodes {
		if filepath.Dir(d) == "/dev" {
			out = append(out, d)
		}
	}
	return out
}

// appendDev builds a minimal /dev: the seal's device nodes (binds of the
// host's), a private devpts instance and the usual symlinks, in a
// directory of the root, read-only with it. It is not a tmpfs of its own:
// it holds no file but mount points and links (a superblock less per
// sandbox; see the masks). /dev/shm points at /tmp so POSIX shared memory
// works without another writable area.
func appendDev(steps []Step, m seal.Mount, devices []string, slots map[string]int32) []Step {
	dev := m.Target
	steps = append(steps, Step{Op: OpMkdir, Path: dev, Mode: 0o755})
	for _, d := range devices {
		steps = append(steps, Step{Op: OpBind, Slot: slots[d], Path: filepath.Join(dev, filepath.Base(d)), Attr: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC})
	}
	pts := filepath.Join(dev, "pts")
	steps = append(steps,
		Step{Op: OpMkdir, Path: pts, Mode: 0o755},
		Step{Op: OpMount, Source: "devpts", Path: pts, FSType: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC, Data: seal.DevPtsOptions})
	names := make([]string, 0, len(seal.DevLinks))
	for name := range seal.DevLinks {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		steps = append(steps, Step{Op: OpSymlink, Path: filepath.Join(dev, name), Source: seal.DevLinks[name]})
	}
	return steps
}

// What a sandbox may know of its own limits. Runtimes size themselves from
// them (the JVM's and Node's heaps from the memory limit, Go's GOMAXPROCS
// from the CPU quota, thread pools from the CPU count), and with the
// host's values they would plan for a machine they do not have.

// appendSys builds /sys: directories of the root (read-only with it) that
// hold nothing but fs/cgroup, the sandbox's own cgroup (read-only),
// mounted inside its cgroup namespace so its root is the sandbox's
// cgroup: cgroup2 on v2, one mount per v1 hierarchy otherwise (named by
// its controllers, with symlinks for each, as systemd lays them out).
func appendSys(steps []Step, sys string, view wire.CgroupView) []Step {
	const ro = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	cg := filepath.Join(sys, "fs", "cgroup")
	steps = append(steps,
		Step{Op: OpMkdir, Path: sys, Mode: 0o555},
		Step{Op: OpMkdirAll, Path: cg, Mode: 0o755})
	switch view.Version {
	case 2:
		steps = append(steps, Step{Op: OpMount, Source: "cgroup2", Path: cg, FSType: "cgroup2", Flags: ro})
	case 1:
		for _, m := range view.V1 {
			d := filepath.Join(cg, m.Name)
			steps = append(steps,
				Step{Op: OpMkdir, Path: d, Mode: 0o555},
				Step{Op: OpMount, Source: "cgroup", Path: d, FSType: "cgroup", Flags: ro, Data: m.Name})
			for _, l := range m.Links {
				steps = append(steps, Step{Op: OpSymlink, Path: filepath.Join(cg, l), Source: m.Name})
			}
		}
	}
	return steps
}

// Package seal says what a sealed sandbox is, once, as data: its fresh
// namespaces, its identity (uid/gid 65532, no groups), no capabilities,
// no_new_privs, its rlimits, its root and mounts (the root's read-only
// binds, the tmpfs areas, /proc, the /dev nodes, the /sys cgroup view),
// the masked and read-only kernel paths, the seccomp filter and the
// landlock rules. New builds it from a validated sandbox.Spec; every
// backend applies all of it:
//
//   - native: the daemon sends the Seal to the sandbox's init (in
//     wire.Config), which builds the root and seals itself from it
//     (inside/boot);
//   - oci: config.json is generated from it (oci/bundle.go);
//   - docker: the container's settings are generated from it
//     (docker/config.go).
//
// A new wall is added here, in the Seal and its builder, and then in each
// backend's renderer; each renderer fails on a namespace, mount kind or
// rlimit it does not know, so none can be left out silently. What a
// backend cannot express is said where the backend renders the Seal (and
// in docs/backends.md): landlock exists only on native, Docker has no
// user namespace per sandbox.
//
// The Seal is plain data: it is built on the host, and only read by
// whoever applies it, inside or out.
package seal

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ironclaw/ironclaw/internal/landlock"
	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// Seal is everything that makes one sandbox sealed. The zero value is not
// a seal; see New. Sections: who runs, what it may do, what it sees.
type Seal struct {
	// Who runs.

	// Hostname is the sandbox's own (its UTS namespace).
	Hostname string `json:"hostname"`
	// Namespaces are made fresh for every sandbox; see Namespace.
	Namespaces []Namespace `json:"namespaces"`
	// UID and GID are every process's identity (sandbox.UID, GID), with
	// no supplementary groups.
	UID int `json:"uid"`
	GID int `json:"gid"`

	// What it may do.

	// Capabilities are held in every set (bounding and ambient
	// included): none, always. It is a field so that every renderer says
	// so from the same place.
	Capabilities []string `json:"capabilities"`
	// NoNewPrivs: set-uid bits and file capabilities grant nothing.
	NoNewPrivs bool `json:"no_new_privs"`
	// Rlimits are set, soft and hard, on every process.
	Rlimits []Rlimit `json:"rlimits"`
	// Landlock is the landlock ruleset (native only: the container
	// runtimes have no landlock layer; see docs/backends.md).
	Landlock landlock.Rules `json:"landlock"`
	// Seccomp is the system-call filter as an OCI profile, which runc,
	// crun, runsc and dockerd compile. The native init installs the very
	// same rules compiled by internal/seccomp (TestProfileMatchesFilter),
	// so the profile itself does not travel to it.
	Seccomp *Seccomp `json:"-"`
	// Sysctls the container backends set, so that their agent, which holds
	// no capability, may bind an exposed port below 1024. (The native init
	// binds the exposed ports before it drops its privileges.)
	Sysctls map[string]string `json:"sysctls,omitempty"`

	// What it sees.

	// Root are the entries of the root filesystem (internal/rootfs): the
	// host-toolchain view or a directory root, read-only, nosuid, nodev.
	Root []rootfs.Entry `json:"root"`
	// Mounts come after the root, in this order: the kernel's views
	// (/dev, /proc, the /sys cgroup view), the writable areas, the Spec's
	// own mounts.
	Mounts []Mount `json:"mounts"`
	// DeviceNodes are the only device nodes /dev holds.
	DeviceNodes []string `json:"device_nodes"`
	// MaskedPaths are hidden: a file becomes /dev/null, a directory an
	// empty read-only tmpfs. Paths that do not exist are skipped.
	MaskedPaths []string `json:"masked_paths"`
	// ReadOnlyPaths are made read-only in place.
	ReadOnlyPaths []string `json:"read_only_paths"`
}

// Namespace names one kind of Linux namespace.
type Namespace string

// The namespaces of every sandbox.
const (
	NSUser    Namespace = "user"    // ids 0-65535 map to unprivileged host ids (not on Docker)
	NSPID     Namespace = "pid"     // pid 1 is the sandbox's own
	NSMount   Namespace = "mount"   // the root and mounts above
	NSNetwork Namespace = "network" // lo only
	NSIPC     Namespace = "ipc"     // no shared SysV or POSIX IPC
	NSUTS     Namespace = "uts"     // Hostname
	NSCgroup  Namespace = "cgroup"  // /sys/fs/cgroup shows the sandbox's own cgroups as its root
)

// Namespaces lists them, in the order backends apply them.
var Namespaces = []Namespace{NSUser, NSPID, NSMount, NSNetwork, NSIPC, NSUTS, NSCgroup}

// Rlimit is one resource limit, soft and hard.
type Rlimit struct {
	// Name is the limit's name without RLIMIT_: "NOFILE", "CORE".
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}

// The rlimits every sandbox has.
const (
	// RlimitNofile is Limits.OpenFiles.
	RlimitNofile = "NOFILE"
	// RlimitCore is 0: no core dumps (the host's core_pattern may be a
	// pipe to a host program).
	RlimitCore = "CORE"
	// RlimitMsgqueue is 0: no POSIX message queues, whose quota is per
	// host user and so shared by every sandbox running as that user.
	RlimitMsgqueue = "MSGQUEUE"
)

// MountKind says how a Mount is made.
type MountKind string

const (
	// KindDev is /dev: a small tmpfs, root's, holding only DeviceNodes,
	// a private devpts instance at /dev/pts (DevPtsOptions) and the usual
	// symlinks (DevLinks). Read-only, nosuid, noexec to the sandbox. The
	// native backend makes it a directory of its read-only root instead
	// (no superblock of its own: see internal/sandbox/setup), its nodes
	// nosuid and noexec binds; Size and Inodes are the OCI backends'.
	KindDev MountKind = "dev"
	// KindProc is /proc of the sandbox's pid namespace, nosuid, nodev,
	// noexec, with MaskedPaths and ReadOnlyPaths applied.
	KindProc MountKind = "proc"
	// KindCgroupView is /sys/fs/cgroup, read-only: the sandbox's own
	// cgroups (its cgroup namespace's root) and nothing else of /sys.
	KindCgroupView MountKind = "cgroup-view"
	// KindTmpfs is a private tmpfs of Size bytes, Mode, owned by UID:GID,
	// nosuid, nodev.
	KindTmpfs MountKind = "tmpfs"
	// KindBind binds the host path Source, nosuid, nodev, read-only
	// unless ReadOnly is false.
	KindBind MountKind = "bind"
	// KindCopy is a read-only directory showing the regular files of the
	// host directory Source as they are when the sandbox is made (at most
	// sandbox.MaxTrustFiles of sandbox.MaxTrustFileBytes; the directory and
	// files readable by others, its parents need not be): small public
	// files the daemon owns, which the sandbox must read whatever host uid
	// its backend runs it as (the trust bundle, sandbox.TrustDir). The
	// container backends copy them into the sandbox's own state
	// directory and bind that; the native init binds Source itself (the
	// daemon hands it over as a mount tree): the same view, as the daemon
	// never changes the files while sandboxes run.
	KindCopy MountKind = "copy"
)

// Mount is one mount of a sandbox, at Target inside it.
type Mount struct {
	Target   string      `json:"target"`
	Kind     MountKind   `json:"kind"`
	Source   string      `json:"source,omitempty"`    // KindBind: absolute host path
	ReadOnly bool        `json:"read_only,omitempty"` // KindBind
	Size     int64       `json:"size,omitempty"`      // KindTmpfs, KindDev: bytes
	Inodes   int64       `json:"inodes,omitempty"`    // KindDev
	Mode     os.FileMode `json:"mode,omitempty"`      // KindTmpfs, KindDev: permission (and sticky) bits
	UID      int         `json:"uid,omitempty"`       // KindTmpfs: owner
	GID      int         `json:"gid,omitempty"`
}

// TmpfsOptions is a KindTmpfs or KindDev mount's tmpfs data: size,
// inodes, mode and owner ("size=1048576,mode=1777").
func (m Mount) TmpfsOptions() string {
	s := "size=" + strconv.FormatInt(m.Size, 10)
	if m.Inodes > 0 {
		s += ",nr_inodes=" + strconv.FormatInt(m.Inodes, 10)
	}
	s += fmt.Sprintf(",mode=%04o", uint32(m.Mode.Perm())|sticky(m.Mode))
	if m.UID != 0 || m.GID != 0 {
		s += fmt.Sprintf(",uid=%d,gid=%d", m.UID, m.GID)
	}
	return s
}

func sticky(m os.FileMode) uint32 {
	if m&os.ModeSticky != 0 {
		return 0o1000
	}
	return 0
}

// DevPtsOptions are the sandbox's own devpts instance's.
const DevPtsOptions = "newinstance,ptmxmode=0666,mode=0620"

// DeviceNodes are the only device nodes a sandbox's /dev holds, on every
// backend. /dev/ptmx is a symlink to pts/ptmx (the sandbox's own devpts).
var DeviceNodes = []string{"/dev/full", "/dev/null", "/dev/pts/ptmx", "/dev/random", "/dev/tty", "/dev/urandom", "/dev/zero"}

// DevLinks are /dev's symlinks. runc, crun, runsc and dockerd make the
// first five themselves; /dev/shm exists only on native, where it points
// at /tmp so POSIX shared memory needs no other writable area.
var DevLinks = map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
	"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2", "shm": sandbox.TmpDir}

// MaskedPaths hide kernel state a sandbox has no business reading: the
// union of runc's, Docker's and IronClaw's own lists.
var MaskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/config.gz", "/proc/driver", "/proc/firmware", "/proc/kallsyms",
	"/proc/kcore", "/proc/keys", "/proc/kmsg", "/proc/latency_stats", "/proc/pagetypeinfo", "/proc/sched_debug",
	"/proc/scsi", "/proc/slabinfo", "/proc/timer_list", "/proc/timer_stats", "/proc/vmallocinfo",
	"/sys/devices/virtual/powercap", "/sys/firmware",
}

// ReadOnlyPaths are the kernel's knobs under /proc, frozen.
var ReadOnlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

// The kernel views' sizes.
const (
	devSize   = 64 << 10
	devInodes = 64
)

// New builds the seal of a validated spec (after WithDefaults). It reads
// the host to plan the root (internal/rootfs) and checks that every bind
// source exists; its errors wrap sandbox.ErrInvalidSpec.
func New(spec sandbox.Spec) (*Seal, error) {
	var root []rootfs.Entry
	var err error
	switch spec.Root.Kind {
	case sandbox.RootDirectory:
		root, err = rootfs.Directory(spec.Root.Path)
	default:
		root, err = rootfs.HostView("/", spec.Hostname)
	}
	if err == nil {
		err = rootfs.Check(root)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrInvalidSpec, err)
	}
	lim := spec.Limits
	s := &Seal{
		Hostname:     spec.Hostname,
		Namespaces:   append([]Namespace(nil), Namespaces...),
		UID:          sandbox.UID,
		GID:          sandbox.GID,
		Capabilities: []string{},
		NoNewPrivs:   true,
		Rlimits: []Rlimit{
			{Name: RlimitNofile, Value: uint64(lim.OpenFiles)},
			{Name: RlimitCore, Value: 0},
			{Name: RlimitMsgqueue, Value: 0},
		},
		Root: root,
		Mounts: []Mount{
			{Target: "/dev", Kind: KindDev, Size: devSize, Inodes: devInodes, Mode: 0o755},
			{Target: "/proc", Kind: KindProc},
			{Target: "/sys/fs/cgroup", Kind: KindCgroupView},
			{Target: sandbox.TmpDir, Kind: KindTmpfs, Size: lim.TmpBytes, Mode: os.ModeSticky | 0o777},
		},
		DeviceNodes:   append([]string(nil), DeviceNodes...),
		MaskedPaths:   append([]string(nil), MaskedPaths...),
		ReadOnlyPaths: append([]string(nil), ReadOnlyPaths...),
	}
	if spec.Workspace != "" {
		st, err := os.Stat(spec.Workspace)
		if err != nil {
			return nil, fmt.Errorf("%w: workspace: %v", sandbox.ErrInvalidSpec, err)
		}
		if !st.IsDir() {
			return nil, fmt.Errorf("%w: workspace %s is not a directory", sandbox.ErrInvalidSpec, spec.Workspace)
		}
		s.Mounts = append(s.Mounts, Mount{Target: sandbox.WorkspaceDir, Kind: KindBind, Source: filepath.Clean(spec.Workspace)})
	} else {
		s.Mounts = append(s.Mounts, Mount{Target: sandbox.WorkspaceDir, Kind: KindTmpfs, Size: lim.WorkspaceBytes, Mode: 0o755,
			UID: sandbox.UID, GID: sandbox.GID})
	}
	for _, m := range spec.Mounts {
		if _, err := os.Stat(m.Source); err != nil {
			return nil, fmt.Errorf("%w: mount source: %v", sandbox.ErrInvalidSpec, err)
		}
		s.Mounts = append(s.Mounts, Mount{Target: m.Target, Kind: KindBind, Source: m.Source, ReadOnly: m.ReadOnly})
	}
	if spec.Trust != "" {
		if err := checkCopy(spec.Trust); err != nil {
			return nil, fmt.Errorf("%w: trust: %v", sandbox.ErrInvalidSpec, err)
		}
		s.Mounts = append(s.Mounts, Mount{Target: sandbox.TrustDir, Kind: KindCopy, Source: filepath.Clean(spec.Trust)})
		if spec.Root.Kind == sandbox.RootHostView {
			// The host-toolchain view's /etc is ours: the system bundle's
			// usual path leads to the trust bundle too.
			s.Root = append(s.Root,
				rootfs.Entry{Path: rootfs.SSLDir, Kind: rootfs.KindDir, Mode: 0o755},
				rootfs.Entry{Path: rootfs.SSLCertsDir, Kind: rootfs.KindDir, Mode: 0o755},
				rootfs.Entry{Path: rootfs.SystemBundle, Kind: rootfs.KindSymlink, Target: sandbox.TrustBundle})
			if err := rootfs.Check(s.Root); err != nil {
				return nil, fmt.Errorf("%w: %v", sandbox.ErrInvalidSpec, err)
			}
		}
	}
	if s.Seccomp, err = Profile(); err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrUnsupported, err)
	}
	if low := lowest(spec.Network.ExposedTCP); low > 0 && low < 1024 {
		s.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": strconv.Itoa(int(low))}
	}
	s.Landlock = landlock.Rules{
		ReadExec:          []string{"/"},
		ReadWrite:         []string{sandbox.WorkspaceDir, sandbox.TmpDir},
		Devices:           landlockDevices(),
		ConnectTCP:        append(append([]uint16(nil), spec.Network.ExposedTCP...), spec.Network.LoopbackTCP...),
		BindTCP:           append([]uint16(nil), spec.Network.LoopbackTCP...),
		ScopeAbstractUnix: true,
		ScopeSignals:      true,
	}
	for _, m := range spec.Mounts {
		if !m.ReadOnly {
			s.Landlock.ReadWrite = append(s.Landlock.ReadWrite, m.Target)
		}
	}
	return s, nil
}

// CopyFiles lists the regular files a KindCopy mount shows (base names),
// checking the bounds.
func CopyFiles(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, de := range des {
		if !de.Type().IsRegular() {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			return nil, err
		}
		if fi.Mode().Perm()&0o004 == 0 {
			// What every backend shows must be the same: public files only.
			return nil, fmt.Errorf("%s is not readable by others (mode %04o)", filepath.Join(dir, de.Name()), fi.Mode().Perm())
		}
		if fi.Size() > sandbox.MaxTrustFileBytes {
			return nil, fmt.Errorf("%s is larger than %d bytes", filepath.Join(dir, de.Name()), sandbox.MaxTrustFileBytes)
		}
		out = append(out, de.Name())
	}
	if len(out) > sandbox.MaxTrustFiles {
		return nil, fmt.Errorf("%s holds %d files, more than %d", dir, len(out), sandbox.MaxTrustFiles)
	}
	return out, nil
}

func checkCopy(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if st.Mode().Perm()&0o005 != 0o005 {
		return fmt.Errorf("%s is not readable and searchable by others (mode %04o)", dir, st.Mode().Perm())
	}
	_, err = CopyFiles(dir)
	return err
}

// CopyInto copies the files of a KindCopy mount's Source into dst (made
// 0755, files 0444), for a backend to bind dst.
func CopyInto(src, dst string) error {
	names, err := CopyFiles(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dst, 0o755); err != nil {
		return err
	}
	for _, n := range names {
		data, err := os.ReadFile(filepath.Join(src, n))
		if err != nil {
			return err
		}
		if len(data) > sandbox.MaxTrustFileBytes {
			return fmt.Errorf("%s grew past %d bytes", n, sandbox.MaxTrustFileBytes)
		}
		if err := os.WriteFile(filepath.Join(dst, n), data, 0o444); err != nil {
			return err
		}
	}
	return nil
}

// landlockDevices are the device files commands may use: DeviceNodes, with
// the devpts instance as a whole and /dev/ptmx, its link.
func landlockDevices() []string {
	var out []string
	for _, d := range DeviceNodes {
		if filepath.Dir(d) == "/dev/pts" {
			out = append(out, "/dev/ptmx", "/dev/pts")
			continue
		}
		out = append(out, d)
	}
	return out
}

func lowest(ports []uint16) uint16 {
	var low uint16
	for _, p := range ports {
		if low == 0 || p < low {
			low = p
		}
	}
	return low
}

// Rlimit returns the value of the named rlimit and whether the seal sets
// it.
func (s *Seal) Rlimit(name string) (uint64, bool) {
	for _, r := range s.Rlimits {
		if r.Name == name {
			return r.Value, true
		}
	}
	return 0, false
}

// Has reports whether the seal makes namespace ns.
func (s *Seal) Has(ns Namespace) bool {
	for _, n := range s.Namespaces {
		if n == ns {
			return true
		}
	}
	return false
}

package docker

import (
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/container"
	"github.com/ironclaw/ironclaw/internal/sandbox/gate"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	ctr "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
)

// Container labels. ownerLabel lets New remove the containers of daemons
// that are gone; stateLabel names the host directory to remove with them.
const (
	ownerLabel   = "ironclaw.owner"   // "<pid>.<starttime>" of the daemon
	sandboxLabel = "ironclaw.sandbox" // the sandbox ID
	stateLabel   = "ironclaw.state"   // the sandbox's state directory
)

// user is the container's and every exec's identity, uid:gid, numeric so
// that no passwd lookup can change it.
var user = fmt.Sprintf("%d:%d", sandbox.UID, sandbox.GID)

// dockerEtcFiles are the files dockerd bind-mounts into every container
// with a network namespace, filled from the host (resolv.conf would carry
// the host's name servers). A mount of our own at each path makes dockerd
// skip its own.
var dockerEtcFiles = []string{"hostname", "hosts", "resolv.conf"}

// state is one sandbox's directory on the host:
//
//	<StateDir>/b/<id>/
//	  owner   "<pid>.<starttime>" of the daemon that made it
//	  etc/    the synthetic /etc (host-toolchain view), bound read-only;
//	          for a directory root, only hostname, hosts and resolv.conf
//	  sock/   ctl.sock and <port>.sock, bound read-only at /.ironclaw/sock
type state struct {
	dir  string
	gate *gate.Plan // the gated programs, whose stubs the container binds (nil: none)
}

func (s state) etc() string     { return filepath.Join(s.dir, "etc") }
func (s state) sockDir() string { return filepath.Join(s.dir, "sock") }
func (s state) owner() string   { return filepath.Join(s.dir, "owner") }

// plan is what a sandbox's root is made of, in Docker's terms.
type plan struct {
	mounts   []mount.Mount  // binds, in order
	symlinks []rootfs.Entry // top-level symlinks: they live in the image
}

// prepare lays out the state directory for spec and plans the root: the
// host-toolchain view or a directory's entries as read-only binds, their
// symlinks for the image, the synthetic /etc, the workspace and extra
// mounts, and the helper's binary and socket directory. The caller removes
// s.dir on error.
func prepare(s state, spec sandbox.Spec, helperExe string) (plan, error) {
	var p plan
	var entries []rootfs.Entry
	var err error
	switch spec.Root.Kind {
	case sandbox.RootDirectory:
		entries, err = rootfs.Directory(spec.Root.Path)
	default:
		entries, err = rootfs.HostView("/", spec.Hostname)
	}
	if err != nil {
		return p, fmt.Errorf("%w: %v", sandbox.ErrInvalidSpec, err)
	}
	if err := rootfs.Check(entries); err != nil {
		return p, fmt.Errorf("%w: %v", sandbox.ErrInvalidSpec, err)
	}
	// 0711: the sandbox user may pass through to its sockets, never list.
	for _, d := range []string{s.dir, s.sockDir()} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return p, err
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return p, err
		}
	}
	if err := os.Mkdir(s.etc(), 0o755); err != nil {
		return p, err
	}
	bind := func(src, dst string, ro bool) {
		p.mounts = append(p.mounts, mount.Mount{Type: mount.TypeBind, Source: src, Target: dst, ReadOnly: ro,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate}})
	}
	taken := map[string]bool{}
	var imageEtc string // a directory root's own /etc, if any
	synthetic := false  // whether /etc is ours
	for _, e := range entries {
		taken[e.Path] = true
		switch e.Kind {
		case rootfs.KindBindDir, rootfs.KindBindFile:
			bind(e.Source, e.Path, true)
			if e.Path == "/etc" {
				imageEtc = e.Source
			}
		case rootfs.KindSymlink:
			p.symlinks = append(p.symlinks, e)
		case rootfs.KindDir:
			if e.Path != "/etc" {
				return p, fmt.Errorf("rootfs: unexpected directory entry %s", e.Path)
			}
			synthetic = true
		case rootfs.KindFile:
			dir, name := path.Split(e.Path)
			if path.Clean(dir) != "/etc" || !synthetic {
				return p, fmt.Errorf("rootfs: unexpected file entry %s", e.Path)
			}
			if err := os.WriteFile(filepath.Join(s.etc(), name), []byte(e.Content), 0o444); err != nil {
				return p, err
			}
		}
	}
	if taken[wire.HelperDir] {
		return p, fmt.Errorf("%w: the root's top-level entry %s is reserved", sandbox.ErrInvalidSpec, wire.HelperDir)
	}
	switch {
	case synthetic:
		bind(s.etc(), "/etc", true)
		for _, name := range dockerEtcFiles {
			bind(filepath.Join(s.etc(), name), "/etc/"+name, true)
		}
	case imageEtc != "":
		// A directory root brings its own /etc; only the files dockerd
		// would fill from the host are replaced, by ours. A mount point
		// cannot be made inside a read-only bind, so each must exist.
		for _, e := range rootfs.Etc(spec.Hostname) {
			name := path.Base(e.Path)
			if e.Kind != rootfs.KindFile || !isDockerEtcFile(name) {
				continue
			}
			if st, err := os.Stat(filepath.Join(imageEtc, name)); err != nil || !st.Mode().IsRegular() {
				return p, fmt.Errorf("%w: the docker backend needs the directory root to hold a regular file /etc/%s "+
					"(dockerd mounts its own over it, and a mount point cannot be made in a read-only /etc)", sandbox.ErrUnsupported, name)
			}
			if err := os.WriteFile(filepath.Join(s.etc(), name), []byte(e.Content), 0o444); err != nil {
				return p, err
			}
			bind(filepath.Join(s.etc(), name), "/etc/"+name, true)
		}
	}
	if spec.Workspace != "" {
		st, err := os.Stat(spec.Workspace)
		if err != nil {
			return p, fmt.Errorf("%w: workspace: %v", sandbox.ErrInvalidSpec, err)
		}
		if !st.IsDir() {
			return p, fmt.Errorf("%w: workspace %s is not a directory", sandbox.ErrInvalidSpec, spec.Workspace)
		}
		bind(filepath.Clean(spec.Workspace), sandbox.WorkspaceDir, false)
	}
	for _, m := range spec.Mounts {
		if m.Target == wire.HelperDir || strings.HasPrefix(m.Target, wire.HelperDir+"/") {
			return p, fmt.Errorf("%w: mount target %s is reserved", sandbox.ErrInvalidSpec, m.Target)
		}
		if taken[m.Target] {
			return p, fmt.Errorf("%w: mount target %s is already part of the root", sandbox.ErrInvalidSpec, m.Target)
		}
		if _, err := os.Stat(m.Source); err != nil {
			return p, fmt.Errorf("%w: mount source: %v", sandbox.ErrInvalidSpec, err)
		}
		bind(m.Source, m.Target, m.ReadOnly)
	}
	stubs, err := container.WriteStubs(filepath.Join(s.dir, "gate"), s.gate)
	if err != nil {
		return p, err
	}
	for _, st := range stubs {
		bind(st.Host, st.Inside, true)
	}
	// The helper's mounts go last; nothing may shadow them.
	bind(helperExe, wire.HelperPath, true)
	bind(s.sockDir(), wire.SockDir, true)
	return p, nil
}

func isDockerEtcFile(name string) bool {
	for _, n := range dockerEtcFiles {
		if n == name {
			return true
		}
	}
	return false
}

// containerOpts is what containerConfig needs beyond the Spec.
type containerOpts struct {
	id       string
	image    string
	state    state
	owner    string
	seccomp  string   // the SecurityOpt entry, "seccomp=<profile JSON>"
	runtime  string   // Docker runtime name; "" is the daemon's default
	runsc    bool     // the runtime is gVisor's runsc
	hostCPUs int      // the daemon's CPU count; 0 if unknown
	cpuset   string   // the CPUs commands run on ("" all; sandbox.CPUPicker)
	args     []string // the container's process (agent or probe)
}

// containerConfig is the sealed container for spec: the seal of the other
// backends expressed as Docker settings (see the package documentation).
func containerConfig(spec sandbox.Spec, p plan, o containerOpts) (*ctr.Config, *ctr.HostConfig) {
	lim := spec.Limits
	cfg := &ctr.Config{
		Hostname:   spec.Hostname,
		User:       user,
		Env:        append([]string(nil), container.BaseEnv...),
		Entrypoint: o.args,
		Cmd:        []string{},
		Image:      o.image,
		WorkingDir: sandbox.WorkspaceDir,
		Labels: map[string]string{
			ownerLabel:   o.owner,
			sandboxLabel: o.id,
			stateLabel:   o.state.dir,
		},
	}
	nano := int64(math.Round(lim.CPUs * 1e9))
	if o.hostCPUs > 0 && nano > int64(o.hostCPUs)*1e9 {
		nano = int64(o.hostCPUs) * 1e9 // dockerd refuses more than the host has
	}
	pids := lim.Pids
	ulimits := []*ctr.Ulimit{
		{Name: "nofile", Soft: lim.OpenFiles, Hard: lim.OpenFiles},
		// No POSIX message queues: /dev/mqueue is mounted in every Docker
		// container and its quota is per host user, shared by every
		// sandbox (all run as host uid 65532).
		{Name: "msgqueue", Soft: 0, Hard: 0},
	}
	if o.runsc {
		// As in the oci backend: the host cgroup also holds the sentry's
		// threads, so it is only a backstop; the limit itself is each
		// command's RLIMIT_NPROC, set by the exec front's trampoline (not a
		// container ulimit: runsc would give it to the agent too, which
		// must never be refused a thread).
		pids = 32*lim.Pids + 1024
	}
	tmpfs := map[string]string{
		sandbox.TmpDir: "rw,exec,nosuid,nodev,size=" + strconv.FormatInt(lim.TmpBytes, 10) + ",mode=1777",
	}
	if spec.Workspace == "" {
		tmpfs[sandbox.WorkspaceDir] = fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=0755,uid=%d,gid=%d",
			lim.WorkspaceBytes, sandbox.UID, sandbox.GID)
	}
	hc := &ctr.HostConfig{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges", o.seccomp},
		IpcMode:        ctr.IPCModeNone, // private, and no /dev/shm
		CgroupnsMode:   ctr.CgroupnsModePrivate,
		Tmpfs:          tmpfs,
		Mounts:         p.mounts,
		Runtime:        o.runtime,
		RestartPolicy:  ctr.RestartPolicy{Name: ctr.RestartPolicyDisabled},
		// The agent writes only when it fails to start; keep that short.
		LogConfig: ctr.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "64k", "max-file": "1"}},
		Resources: ctr.Resources{
			Memory:     lim.MemoryBytes,
			MemorySwap: lim.MemoryBytes, // memory plus swap: no swap
			NanoCPUs:   nano,
			CpusetCpus: o.cpuset,
			PidsLimit:  &pids,
			Ulimits:    ulimits,
		},
	}
	hc.MaskedPaths = maskedPaths()
	if low := lowestPort(spec.Network.ExposedTCP); low > 0 && low < 1024 {
		// The agent holds no capability; let it bind a low exposed port.
		hc.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": strconv.Itoa(int(low))}
	}
	return cfg, hc
}

// dockerMaskedPaths are dockerd's own defaults, which HostConfig.MaskedPaths
// replaces.
var dockerMaskedPaths = []string{"/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
	"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap"}

// maskedPaths are dockerd's defaults and everything of /sys but the
// sandbox's own cgroups. dockerd mounts the host's sysfs (read-only) and
// keeps its cgroup mount at /sys/fs/cgroup only beneath its own /sys (a
// mount of ours at /sys drops both), so every other entry of /sys and of
// /sys/fs is masked: an empty read-only directory, as the host's sysfs
// names them.
func maskedPaths() []string {
	out := append([]string(nil), dockerMaskedPaths...)
	for _, dir := range []string{"/sys", "/sys/fs"} {
		des, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, de := range des {
			p := path.Join(dir, de.Name())
			if p == "/sys/fs" || p == "/sys/fs/cgroup" || !de.IsDir() || slices.Contains(out, p) {
				continue
			}
			out = append(out, p)
		}
	}
	return out
}

func lowestPort(ports []uint16) uint16 {
	var low uint16
	for _, p := range ports {
		if low == 0 || p < low {
			low = p
		}
	}
	return low
}

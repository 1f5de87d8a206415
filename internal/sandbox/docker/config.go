package docker

import (
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/container"
	"github.com/ironclaw/ironclaw/internal/sandbox/docker/engine"
	"github.com/ironclaw/ironclaw/internal/sandbox/gate"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// Container labels. ownerLabel lets New remove the containers of daemons
// that are gone; stateLabel names the host directory to remove with them.
const (
	ownerLabel   = "ironclaw.owner"   // "<pid>.<starttime>" of the daemon
	sandboxLabel = "ironclaw.sandbox" // the sandbox ID
	stateLabel   = "ironclaw.state"   // the sandbox's state directory
)

// user is the container's and every exec's identity, the seal's uid:gid,
// numeric so that no passwd lookup can change it.
func user(sl *seal.Seal) string { return fmt.Sprintf("%d:%d", sl.UID, sl.GID) }

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

// plan is what a sandbox's root is made of, in Docker's terms.
type plan struct {
	mounts   []engine.Mount // binds, in order
	symlinks []rootfs.Entry // top-level symlinks: they live in the image
}

// prepare lays out the state directory for spec and plans the root from
// its seal: the host-toolchain view or a directory's entries as read-only
// binds, their symlinks for the image, the synthetic /etc, the workspace
// and extra mounts, the gate's stubs, and the helper's binary and socket
// directory. The seal's tmpfs areas and kernel views are the container's
// settings (containerConfig). The caller removes s.dir on error.
func prepare(s state, spec sandbox.Spec, sl *seal.Seal, helperExe string) (plan, error) {
	var p plan
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
		p.mounts = append(p.mounts, engine.Mount{Type: "bind", Source: src, Target: dst, ReadOnly: ro,
			BindOptions: &engine.BindOptions{Propagation: "rprivate"}})
	}
	taken := map[string]bool{}
	var imageEtc string // a directory root's own /etc, if any
	synthetic := false  // whether /etc is ours
	// The plan's shape is rootfs.Check's to say (what may lie below the
	// top level); what passes is rendered here.
	if err := rootfs.Check(sl.Root); err != nil {
		return p, err
	}
	for _, e := range sl.Root {
		taken[e.Path] = true
		switch e.Kind {
		case rootfs.KindBindDir, rootfs.KindBindFile:
			bind(e.Source, e.Path, true)
			if e.Path == "/etc" {
				imageEtc = e.Source
			}
		case rootfs.KindSymlink:
			if rel, ok := strings.CutPrefix(e.Path, "/etc/"); ok && synthetic {
				// Inside the synthetic /etc, which is a bind of ours.
				if err := os.Symlink(e.Target, filepath.Join(s.etc(), rel)); err != nil {
					return p, err
				}
				continue
			}
			p.symlinks = append(p.symlinks, e)
		case rootfs.KindDir:
			rel, nested := strings.CutPrefix(e.Path, "/etc/")
			switch {
			case e.Path == "/etc":
				synthetic = true
			case nested && synthetic:
				if err := os.Mkdir(filepath.Join(s.etc(), rel), 0o755); err != nil {
					return p, err
				}
			default:
				return p, fmt.Errorf("rootfs: unexpected directory entry %s", e.Path)
			}
		case rootfs.KindFile:
			rel, ok := strings.CutPrefix(e.Path, "/etc/")
			if !ok || !synthetic {
				return p, fmt.Errorf("rootfs: unexpected file entry %s", e.Path)
			}
			if err := os.WriteFile(filepath.Join(s.etc(), rel), []byte(e.Content), 0o444); err != nil {
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
	for _, m := range sl.Mounts {
		switch m.Kind {
		case seal.KindDev, seal.KindProc, seal.KindCgroupView, seal.KindTmpfs:
			continue // containerConfig's
		case seal.KindBind:
		case seal.KindCopy:
			dst := filepath.Join(s.dir, "copy"+strings.ReplaceAll(m.Target, "/", "-"))
			if err := seal.CopyInto(m.Source, dst); err != nil {
				return p, fmt.Errorf("%w: %s: %v", sandbox.ErrInvalidSpec, m.Target, err)
			}
			bind(dst, m.Target, true)
			continue
		default:
			return p, fmt.Errorf("%w: the docker backend cannot make a %s mount", sandbox.ErrUnsupported, m.Kind)
		}
		if m.Target != sandbox.WorkspaceDir {
			if m.Target == wire.HelperDir || strings.HasPrefix(m.Target, wire.HelperDir+"/") {
				return p, fmt.Errorf("%w: mount target %s is reserved", sandbox.ErrInvalidSpec, m.Target)
			}
			if taken[m.Target] {
				return p, fmt.Errorf("%w: mount target %s is already part of the root", sandbox.ErrInvalidSpec, m.Target)
			}
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
	runtime  string   // Docker runtime name; "" is the daemon's default
	runsc    bool     // the runtime is gVisor's runsc
	hostCPUs int      // the daemon's CPU count; 0 if unknown
	cpuset   string   // the CPUs commands run on ("" all; sandbox.CPUPicker)
	args     []string // the container's process (agent or probe)
}

// containerConfig is the sealed container for spec: its seal sl as
// Docker settings (see the package documentation).
func containerConfig(spec sandbox.Spec, sl *seal.Seal, p plan, o containerOpts) (*engine.Config, *engine.HostConfig, error) {
	lim := spec.Limits
	cfg := &engine.Config{
		Hostname:   sl.Hostname,
		User:       user(sl),
		Env:        append([]string(nil), seal.BaseEnv...),
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
	var ulimits []*engine.Ulimit
	for _, r := range sl.Rlimits {
		// (/dev/mqueue is mounted in every Docker container: RLIMIT_MSGQUEUE
		// 0 keeps the queue quota, per host user and so shared by every
		// sandbox, out of reach.)
		v := int64(r.Value)
		ulimits = append(ulimits, &engine.Ulimit{Name: strings.ToLower(r.Name), Soft: v, Hard: v})
	}
	if o.runsc {
		// As in the oci backend: the host cgroup also holds the sentry's
		// threads, so it is only a backstop; the limit itself is each
		// command's RLIMIT_NPROC, set by the exec front's trampoline (not a
		// container ulimit: runsc would give it to the agent too, which
		// must never be refused a thread).
		pids = 32*lim.Pids + 1024
	}
	sc, err := seccompOpt(sl.Seccomp)
	if err != nil {
		return nil, nil, err
	}
	hc := &engine.HostConfig{
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		CapAdd:         sl.Capabilities,
		SecurityOpt:    []string{sc},
		Mounts:         p.mounts,
		Tmpfs:          map[string]string{},
		Runtime:        o.runtime,
		RestartPolicy:  engine.RestartPolicy{Name: "no"},
		// The agent writes only when it fails to start; keep that short.
		LogConfig: engine.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "64k", "max-file": "1"}},
		Resources: engine.Resources{
			Memory:     lim.MemoryBytes,
			MemorySwap: lim.MemoryBytes, // memory plus swap: no swap
			NanoCPUs:   nano,
			CpusetCpus: o.cpuset,
			PidsLimit:  &pids,
			Ulimits:    ulimits,
		},
		MaskedPaths:   maskedPaths(sl.MaskedPaths),
		ReadonlyPaths: sl.ReadOnlyPaths,
		Sysctls:       sl.Sysctls,
	}
	if sl.NoNewPrivs {
		hc.SecurityOpt = append([]string{"no-new-privileges"}, hc.SecurityOpt...)
	}
	for _, ns := range sl.Namespaces {
		switch ns {
		case seal.NSUser:
			// No user namespace per sandbox: dockerd's userns-remap, where
			// configured, is one mapping for every container (see the
			// package documentation).
		case seal.NSPID, seal.NSMount, seal.NSUTS:
			// Every Docker container's own.
		case seal.NSNetwork:
			hc.NetworkMode = "none"
		case seal.NSIPC:
			hc.IpcMode = "none" // private, and no /dev/shm
		case seal.NSCgroup:
			hc.CgroupnsMode = "private"
		default:
			return nil, nil, fmt.Errorf("%w: the docker backend cannot make a %s namespace", sandbox.ErrUnsupported, ns)
		}
	}
	for _, m := range sl.Mounts {
		switch m.Kind {
		case seal.KindTmpfs:
			hc.Tmpfs[m.Target] = "rw,exec,nosuid,nodev," + m.TmpfsOptions()
		case seal.KindDev, seal.KindProc:
			// dockerd's own /dev (a tmpfs with its default devices and a
			// private devpts) and /proc, with the masks below.
		case seal.KindCgroupView:
			// dockerd's read-only cgroup mount in the container's cgroup
			// namespace; the rest of its /sys is masked (maskedPaths).
		}
	}
	return cfg, hc, nil
}

// maskedPaths are the seal's, and everything of /sys but the sandbox's
// own cgroups. dockerd mounts the host's sysfs (read-only) and keeps its
// cgroup mount at /sys/fs/cgroup only beneath its own /sys (a mount of
// ours at /sys drops both), so every other entry of /sys and of /sys/fs is
// masked: an empty read-only directory, as the host's sysfs names them.
func maskedPaths(sealed []string) []string {
	out := append([]string(nil), sealed...)
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

package oci

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/container"
	"github.com/ironclaw/ironclaw/internal/sandbox/gate"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// The subset of the OCI runtime specification (v1.0.2) that IronClaw
// writes. Declared here rather than imported so the module needs no
// runtime-spec dependency; field names and JSON tags follow
// github.com/opencontainers/runtime-spec/specs-go.

type ociSpec struct {
	Version  string      `json:"ociVersion"`
	Process  *ociProcess `json:"process"`
	Root     ociRoot     `json:"root"`
	Hostname string      `json:"hostname"`
	Mounts   []ociMount  `json:"mounts"`
	Linux    ociLinux    `json:"linux"`
}

type ociProcess struct {
	Terminal        bool        `json:"terminal"`
	User            ociUser     `json:"user"`
	Args            []string    `json:"args"`
	Env             []string    `json:"env"`
	Cwd             string      `json:"cwd"`
	Capabilities    ociCaps     `json:"capabilities"`
	Rlimits         []ociRlimit `json:"rlimits"`
	NoNewPrivileges bool        `json:"noNewPrivileges"`
}

type ociUser struct {
	UID            uint32   `json:"uid"`
	GID            uint32   `json:"gid"`
	AdditionalGids []uint32 `json:"additionalGids"`
}

// ociCaps lists every set explicitly, each empty: a missing set would let
// a runtime fill in its defaults.
type ociCaps struct {
	Bounding    []string `json:"bounding"`
	Effective   []string `json:"effective"`
	Inheritable []string `json:"inheritable"`
	Permitted   []string `json:"permitted"`
	Ambient     []string `json:"ambient"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociLinux struct {
	UIDMappings   []ociIDMap        `json:"uidMappings,omitempty"`
	GIDMappings   []ociIDMap        `json:"gidMappings,omitempty"`
	Sysctl        map[string]string `json:"sysctl,omitempty"`
	Resources     *ociResources     `json:"resources,omitempty"`
	CgroupsPath   string            `json:"cgroupsPath,omitempty"`
	Namespaces    []ociNamespace    `json:"namespaces"`
	Seccomp       *seal.Seccomp     `json:"seccomp,omitempty"`
	MaskedPaths   []string          `json:"maskedPaths,omitempty"`
	ReadonlyPaths []string          `json:"readonlyPaths,omitempty"`
}

type ociIDMap struct {
	ContainerID uint32 `json:"containerID"`
	HostID      uint32 `json:"hostID"`
	Size        uint32 `json:"size"`
}

type ociNamespace struct {
	Type string `json:"type"`
}

type ociResources struct {
	Devices []ociDeviceRule `json:"devices"`
	Memory  *ociMemory      `json:"memory,omitempty"`
	CPU     *ociCPU         `json:"cpu,omitempty"`
	Pids    *ociPids        `json:"pids,omitempty"`
}

type ociDeviceRule struct {
	Allow  bool   `json:"allow"`
	Access string `json:"access,omitempty"`
}

type ociMemory struct {
	Limit *int64 `json:"limit,omitempty"`
	// Swap is memory plus swap (the cgroup v1 memsw limit).
	Swap *int64 `json:"swap,omitempty"`
}

type ociCPU struct {
	Quota  *int64  `json:"quota,omitempty"`
	Period *uint64 `json:"period,omitempty"`
	Cpus   string  `json:"cpus,omitempty"`
}

type ociPids struct {
	Limit int64 `json:"limit"`
}

// HostIDBase is where container ids 0..65535 map on the host, as on the
// native backend: the sandbox user 65532 is host uid 165532 and nothing in
// the container is host root.
const HostIDBase = 100000

// cfsPeriodUs is the CFS bandwidth period, as internal/cgroups uses.
const cfsPeriodUs = 100000

// agentEnv is the agent's whole environment.
var agentEnv = []string{"GOMAXPROCS=1", "GOGC=50"}

// sealedProcess is the process every container process runs as: the agent
// and every exec. It is the seal's process part: its identity with no
// supplementary groups, its (empty) capability sets, no_new_privs and its
// rlimits.
func sealedProcess(args, env []string, cwd string, s *seal.Seal) *ociProcess {
	caps := append([]string{}, s.Capabilities...)
	var rl []ociRlimit
	for _, r := range s.Rlimits {
		rl = append(rl, ociRlimit{Type: "RLIMIT_" + r.Name, Hard: r.Value, Soft: r.Value})
	}
	return &ociProcess{
		User:            ociUser{UID: uint32(s.UID), GID: uint32(s.GID), AdditionalGids: []uint32{}},
		Args:            args,
		Env:             env,
		Cwd:             cwd,
		Capabilities:    ociCaps{Bounding: caps, Effective: caps, Inheritable: caps, Permitted: caps, Ambient: caps},
		Rlimits:         rl,
		NoNewPrivileges: s.NoNewPrivs,
	}
}

// bundle is one sandbox's directory:
//
//	<StateDir>/bundles/<id>/
//	  config.json     the OCI spec (0600)
//	  owner           "<pid>.<starttime>" of the daemon that made it
//	  rootfs/         the container root: only mount points and, on merged-
//	                  /usr hosts, the view's symlinks; read-only
//	  etc/            the synthetic /etc, bound read-only
//	  sock/           ctl.sock and <port>.sock, bound read-only at /.ironclaw/sock
//	  exec/           one process.json per running exec
type bundle struct {
	dir  string
	gate *gate.Plan // the gated programs, whose stubs the bundle binds (nil: none)
}

func (b bundle) config() string  { return filepath.Join(b.dir, "config.json") }
func (b bundle) rootfs() string  { return filepath.Join(b.dir, "rootfs") }
func (b bundle) etc() string     { return filepath.Join(b.dir, "etc") }
func (b bundle) sockDir() string { return filepath.Join(b.dir, "sock") }
func (b bundle) execDir() string { return filepath.Join(b.dir, "exec") }
func (b bundle) pidFile() string { return filepath.Join(b.dir, "init.pid") }

// bundleConfig is what writeBundle needs beyond the Spec.
type bundleConfig struct {
	id         string
	spec       sandbox.Spec // validated, with defaults
	seal       *seal.Seal   // spec's
	helperExe  string       // host path of the staged helper binary
	cgroupPath string       // relative to the runtime's own cgroup
	userns     bool         // map ids into a user namespace
	args       []string     // the container process (agent or probe)
	// pidsOverhead is added to the host pids limit for the runtime's own
	// tasks in the container's cgroup (runsc: the sentry and gofer).
	pidsOverhead int64
	// pidsReserve is added to the host pids limit for pid 1 alone: the
	// workload's execs run in a child cgroup limited to the Spec's pids
	// (runc and crun on cgroup v1; see Sandbox.splitPids).
	pidsReserve int64
	// cpus is the cpuset of the sandbox ("" every CPU): what the CPU
	// count inside shows (sandbox.CPUPicker).
	cpus string
	// gvisor: the runtime is runsc, whose sentry provides /sys and /dev
	// of its own making (see gvisorSetup).
	gvisor bool
	// memOverhead is added to the host memory limit (runsc: a backstop
	// above the limit the daemon enforces).
	memOverhead int64
}

// writeBundle lays out the bundle directory and its config.json: the
// seal as the runtime spec. The caller removes b.dir on error.
func writeBundle(b bundle, c bundleConfig) error {
	sl := c.seal
	// 0711 everywhere the container's own (mapped) root must pass through
	// to open a bind source: it may search, never list.
	for _, d := range []string{b.dir, b.sockDir(), b.execDir()} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	if err := os.Mkdir(b.rootfs(), 0o755); err != nil {
		return err
	}

	var mounts []ociMount
	// Mount points: inside path -> mode (a directory when ModeDir is set).
	// runc gives a tmpfs the mode of the directory it is mounted on, so
	// /tmp's must already be 1777.
	mountpoints := map[string]os.FileMode{}
	addDir := func(p string) { mountpoints[p] = os.ModeDir | 0o755 }
	addFile := func(p string) { mountpoints[p] = 0o444 }

	// The plan's shape is rootfs.Check's to say (what may lie below the
	// top level); what passes is rendered here.
	if err := rootfs.Check(sl.Root); err != nil {
		return err
	}
	etcWritten := false
	for _, e := range sl.Root {
		switch e.Kind {
		case rootfs.KindBindDir:
			mounts = append(mounts, bindMount(e.Source, e.Path, true))
			addDir(e.Path)
		case rootfs.KindBindFile:
			mounts = append(mounts, bindMount(e.Source, e.Path, true))
			addFile(e.Path)
		case rootfs.KindSymlink:
			at := filepath.Join(b.rootfs(), e.Path)
			if rel, ok := strings.CutPrefix(e.Path, "/etc/"); ok && etcWritten {
				at = filepath.Join(b.etc(), rel) // inside the synthetic /etc
			}
			if err := os.Symlink(e.Target, at); err != nil {
				return err
			}
		case rootfs.KindDir:
			rel, nested := strings.CutPrefix(e.Path, "/etc/")
			switch {
			case e.Path == "/etc":
				if err := os.Mkdir(b.etc(), 0o755); err != nil {
					return err
				}
				etcWritten = true
			case nested && etcWritten:
				if err := os.Mkdir(filepath.Join(b.etc(), rel), 0o755); err != nil {
					return err
				}
			default:
				return fmt.Errorf("rootfs: unexpected directory entry %s", e.Path)
			}
		case rootfs.KindFile:
			rel, ok := strings.CutPrefix(e.Path, "/etc/")
			if !ok || !etcWritten {
				return fmt.Errorf("rootfs: unexpected file entry %s", e.Path)
			}
			if err := os.WriteFile(filepath.Join(b.etc(), rel), []byte(e.Content), os.FileMode(e.Mode)&0o644|0o444); err != nil {
				return err
			}
		}
	}
	if etcWritten {
		mounts = append(mounts, bindMount(b.etc(), "/etc", true))
		addDir("/etc")
	}
	for _, m := range sl.Mounts {
		switch m.Kind {
		case seal.KindDev:
			mounts = append(mounts,
				ociMount{Destination: m.Target, Type: "tmpfs", Source: "tmpfs", Options: append([]string{"nosuid", "noexec", "strictatime"}, strings.Split(m.TmpfsOptions(), ",")...)},
				ociMount{Destination: m.Target + "/pts", Type: "devpts", Source: "devpts", Options: append([]string{"nosuid", "noexec"}, strings.Split(seal.DevPtsOptions, ",")...)})
			addDir(m.Target)
		case seal.KindProc:
			mounts = append(mounts, ociMount{Destination: m.Target, Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}})
			addDir(m.Target)
		case seal.KindCgroupView:
			mounts = append(mounts, sysMounts(m.Target, c.gvisor)...)
			addDir(m.Target)
		case seal.KindTmpfs:
			mounts = append(mounts, ociMount{Destination: m.Target, Type: "tmpfs", Source: "tmpfs",
				Options: append(strings.Split(m.TmpfsOptions(), ","), "nosuid", "nodev")})
			mountpoints[m.Target] = os.ModeDir | m.Mode
		case seal.KindBind:
			st, err := os.Stat(m.Source)
			if err != nil {
				return fmt.Errorf("%w: mount source: %v", sandbox.ErrInvalidSpec, err)
			}
			mounts = append(mounts, bindMount(m.Source, m.Target, m.ReadOnly))
			if path.Dir(m.Target) == "/" { // a new top-level entry: our mount point
				if st.IsDir() {
					addDir(m.Target)
				} else {
					addFile(m.Target)
				}
			}
		case seal.KindCopy:
			// A copy in the bundle, which the container's root (host uid
			// 100000) can reach where the daemon's own directory may not.
			dst := filepath.Join(b.dir, "copy"+strings.ReplaceAll(m.Target, "/", "-"))
			if err := seal.CopyInto(m.Source, dst); err != nil {
				return fmt.Errorf("%w: %s: %v", sandbox.ErrInvalidSpec, m.Target, err)
			}
			mounts = append(mounts, bindMount(dst, m.Target, true))
			addDir(m.Target)
		default:
			return fmt.Errorf("%w: the oci backend cannot make a %s mount", sandbox.ErrUnsupported, m.Kind)
		}
	}
	stubs, err := container.WriteStubs(filepath.Join(b.dir, "gate"), b.gate)
	if err != nil {
		return err
	}
	for _, st := range stubs {
		mounts = append(mounts, bindMount(st.Host, st.Inside, true))
	}
	mounts = append(mounts,
		bindMount(c.helperExe, wire.HelperPath, true),
		bindMount(b.sockDir(), wire.SockDir, true),
	)
	addFile(wire.HelperPath)
	addDir(wire.SockDir)
	// The helper's mounts go last; its directory must not be shadowed.
	if _, ok := mountpoints[wire.HelperDir]; ok {
		return fmt.Errorf("%w: mount target %s is reserved", sandbox.ErrInvalidSpec, wire.HelperDir)
	}

	if err := makeMountpoints(b.rootfs(), mountpoints); err != nil {
		return err
	}

	lim := c.spec.Limits
	mem := lim.MemoryBytes + c.memOverhead
	pids := lim.Pids + c.pidsOverhead + c.pidsReserve
	quota := int64(math.Round(lim.CPUs * cfsPeriodUs))
	period := uint64(cfsPeriodUs)
	var namespaces []ociNamespace
	for _, ns := range sl.Namespaces {
		switch ns {
		case seal.NSUser:
			if !c.userns {
				continue // runsc: the sentry's own identities (see the package documentation)
			}
		case seal.NSPID, seal.NSMount, seal.NSNetwork, seal.NSIPC, seal.NSUTS, seal.NSCgroup:
		default:
			return fmt.Errorf("%w: the oci backend cannot make a %s namespace", sandbox.ErrUnsupported, ns)
		}
		namespaces = append(namespaces, ociNamespace{Type: string(ns)})
	}
	// The container's process (the agent) never gets RLIMIT_NPROC, even
	// on runsc where the pids limit is one: it is a Go program whose
	// runtime may make a thread at any time, and a failed thread creation
	// is fatal for it, and so for the sandbox. It forks nothing; its
	// threads still count against the commands' limit, which the exec
	// front sets (see Sandbox.nproc).
	cfg := ociSpec{
		Version:  "1.0.2",
		Process:  sealedProcess(c.args, agentEnv, "/", sl),
		Root:     ociRoot{Path: "rootfs", Readonly: true},
		Hostname: sl.Hostname,
		Mounts:   mounts,
		Linux: ociLinux{
			Resources: &ociResources{
				Devices: []ociDeviceRule{{Allow: false, Access: "rwm"}},
				Memory:  &ociMemory{Limit: &mem, Swap: &mem},
				CPU:     &ociCPU{Quota: &quota, Period: &period, Cpus: c.cpus},
				Pids:    &ociPids{Limit: pids},
			},
			CgroupsPath:   c.cgroupPath,
			Namespaces:    namespaces,
			MaskedPaths:   sl.MaskedPaths,
			ReadonlyPaths: sl.ReadOnlyPaths,
			Sysctl:        sl.Sysctls,
			Seccomp:       sl.Seccomp,
		},
	}
	if c.gvisor && len(c.args) > 1 && c.args[1] == wire.ModeAgent {
		// Only the agent, only on runsc, and only until it has prepared
		// the sentry's /dev and cgroup view (inside/agent's gvisorSetup):
		// it drops them before anything else runs.
		cfg.Process.Capabilities = gvisorSetupCaps()
	}
	if c.userns {
		m := []ociIDMap{{ContainerID: 0, HostID: HostIDBase, Size: 65536}}
		cfg.Linux.UIDMappings, cfg.Linux.GIDMappings = m, m
	}
	data, err := json.MarshalIndent(cfg, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(b.config(), data, 0o600)
}

// sysMounts give the sandbox a /sys that holds only its own cgroup,
// read-only, at /sys/fs/cgroup.
//
// runc and crun mount the container's cgroup hierarchies there (in its
// cgroup namespace, so each shows the sandbox's cgroup as its root) on a
// tmpfs they leave writable; the rootfs around it is read-only, and the
// tmpfs is root's, mode 0755. runsc mounts a sysfs of the sentry's own
// unless the spec has a /sys: an empty read-only tmpfs hides it, and
// --cgroupfs (see Runtime.globalArgs) mounts the sentry's cgroupfs beneath,
// whose limits the agent writes (wire.GVisorSetup).
func sysMounts(target string, gvisor bool) []ociMount {
	if gvisor {
		return []ociMount{{Destination: "/sys", Type: "tmpfs", Source: "tmpfs",
			Options: []string{"ro", "nosuid", "nodev", "noexec", "size=16k", "mode=0755"}}}
	}
	return []ociMount{{Destination: target, Type: "cgroup", Source: "cgroup",
		Options: []string{"ro", "nosuid", "nodev", "noexec"}}}
}

// gvisorSetupCaps are the agent's capabilities on runsc until it drops
// them: enough to remove the sentry's extra device nodes and to write the
// cgroup view's limits (all root's files inside the sentry, not the host).
func gvisorSetupCaps() ociCaps {
	caps := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_SETPCAP"}
	return ociCaps{Bounding: caps, Effective: caps, Permitted: caps, Inheritable: []string{}, Ambient: []string{}}
}

// bindMount binds a host path; binds are always nosuid and nodev.
func bindMount(src, dst string, readOnly bool) ociMount {
	opts := []string{"rbind", "nosuid", "nodev"}
	if readOnly {
		opts = append(opts, "ro")
	} else {
		opts = append(opts, "rw")
	}
	return ociMount{Destination: dst, Type: "bind", Source: src, Options: opts}
}

// makeMountpoints creates every mount point in the (root-owned) rootfs, so
// the runtime never needs to write there: the container's root is not host
// root and could not.
func makeMountpoints(root string, points map[string]os.FileMode) error {
	for p, mode := range points {
		full := filepath.Join(root, p)
		if mode.IsDir() {
			if err := os.MkdirAll(full, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(full, mode&(os.ModePerm|os.ModeSticky)); err != nil {
				return err
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(full, os.O_CREATE|os.O_RDONLY, 0o444)
		if err != nil {
			return err
		}
		f.Close()
	}
	return nil
}

// writeProcess writes one exec's process.json.
func writeProcess(file string, p *ociProcess) error {
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o600)
}

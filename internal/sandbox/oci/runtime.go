package oci

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/container"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// The OCI runtimes this package drives.
const (
	Runc  = "runc"
	Crun  = "crun"
	Runsc = "runsc"
)

// DefaultStateDir holds bundles, runtime state and the staged helper.
const DefaultStateDir = "/run/ironclaw/oci"

// Options configure a Runtime. Runtime is required; the rest may be zero.
type Options struct {
	// Runtime is "runc", "crun" or "runsc". Required.
	Runtime string
	// Binary is the runtime's executable; "" looks Runtime up in PATH.
	Binary string
	// StateDir holds the bundles, the runtime's own state (its --root) and
	// the staged helper binary; "" means DefaultStateDir. Every directory
	// above it must be searchable by others (mode o+x): the container's
	// root is host uid 100000, which must reach the bind sources inside.
	StateDir string
	// Exe is the ironclaw binary bound into every sandbox as the in-sandbox
	// helper (see package helper); "" means os.Executable(). It is copied
	// once into StateDir, so it may live in a private directory.
	Exe string
	// Logf receives diagnostics (never secrets); nil discards them.
	Logf func(format string, args ...any)
}

// Runtime drives one OCI runtime binary. It embeds the container
// backends' skeleton (package container), which runs the sandbox's
// lifecycle; this package says how a bundle is written and how the runtime
// starts it and runs a process in it. It is safe for concurrent use; Close
// destroys every sandbox it still holds.
type Runtime struct {
	*container.Runtime
	opts    Options
	bin     string // absolute path of the runtime binary
	version string // first line of `<runtime> --version`
	root    string // the runtime's --root
	bundles string // parent of every bundle directory
	helper  string // staged copy of Options.Exe
	userns  bool   // map ids through a user namespace (runc, crun)
	// splitPids: execs run in a child of the sandbox's pids cgroup, so
	// pid 1 keeps sandbox.InitPidsReserve tasks of its own (runc and crun
	// on cgroup v1: runc exec --cgroup; see box.splitPids).
	splitPids bool
	cpus      *sandbox.CPUPicker
}

var _ sandbox.Runtime = (*Runtime)(nil)

// New checks that the OCI runtime works on this host by running a probe
// container with the full seal, collects what a crashed earlier run left,
// and returns a ready Runtime. A runtime that is missing or cannot work
// here gives an error wrapping sandbox.ErrUnsupported that says why.
func New(ctx context.Context, opts Options) (*Runtime, error) {
	switch opts.Runtime {
	case Runc, Crun, Runsc:
	default:
		return nil, fmt.Errorf("%w: unknown OCI runtime %q (want runc, crun or runsc)", sandbox.ErrInvalidSpec, opts.Runtime)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: the %s backend needs root (rootless OCI runtimes are not supported by IronClaw)", sandbox.ErrUnsupported, opts.Runtime)
	}
	bin := opts.Binary
	if bin == "" {
		bin = opts.Runtime
	}
	bin, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("%w: %s is not installed: %v", sandbox.ErrUnsupported, opts.Runtime, err)
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return nil, err
	}
	if opts.StateDir, err = container.StateDir(opts.StateDir, DefaultStateDir); err != nil {
		return nil, err
	}
	if opts.Exe, err = container.ResolveExe(opts.Exe); err != nil {
		return nil, err
	}
	base := filepath.Join(opts.StateDir, opts.Runtime)
	r := &Runtime{
		opts:    opts,
		bin:     bin,
		root:    filepath.Join(base, "state"),
		bundles: filepath.Join(base, "b"),
		userns:  opts.Runtime != Runsc,
		cpus:    sandbox.NewCPUPicker(),
	}
	if r.Runtime, err = container.NewRuntime(container.Options{Name: opts.Runtime, IDPrefix: "oci-", Backend: r,
		NProcLimit: opts.Runtime == Runsc, Logf: opts.Logf}); err != nil {
		return nil, err
	}
	if mode, _ := cgroupMode(); opts.Runtime != Runsc && (mode == "v1" || mode == "hybrid") {
		r.splitPids = true
	}
	out, err := r.run(ctx, nil, "--version")
	if err != nil {
		return nil, fmt.Errorf("%w: %s --version: %v", sandbox.ErrUnsupported, bin, err)
	}
	r.version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])

	if err := mkdirs(base, 0o711); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	if err := checkSearchable(base); err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrUnsupported, err)
	}
	if err := mkdirs(r.bundles, 0o711); err != nil {
		return nil, err
	}
	if err := mkdirs(r.root, 0o700); err != nil {
		return nil, err
	}
	if r.helper, err = container.StageHelper(opts.Exe, base, "ironclaw-oci-helper-"); err != nil {
		return nil, fmt.Errorf("staging the helper binary: %w", err)
	}
	r.collect(ctx)
	if err := r.probe(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Create implements sandbox.Runtime. Nothing is left behind on error.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	sb, err := r.Runtime.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &Sandbox{Sandbox: sb, box: sb.Container().(*box)}, nil
}

// Version is the runtime's version line, e.g. "runc version 1.1.5+ds1".
func (r *Runtime) Version() string { return r.version }

// globalArgs come before every subcommand. runsc takes its configuration
// as global flags and needs the same ones on every call for a container:
//
//	--platform=ptrace  no KVM on most hosts (and none here)
//	--network=none     a sandbox-internal loopback only, no host NIC
//	--host-uds=open    lets the sentry connect to the daemon's sockets
//	--oci-seccomp      enforce config.json's seccomp profile in the sentry
//	--cgroupfs         mount the sentry's cgroupfs (memory, cpu) at
//	                   /sys/fs/cgroup: the sandbox's view of its limits
func (r *Runtime) globalArgs() []string {
	args := []string{"--root", r.root}
	if r.opts.Runtime == Runsc {
		args = append(args, "--platform=ptrace", "--network=none", "--host-uds=open", "--oci-seccomp", "--cgroupfs")
	}
	return args
}

// runtimeEnv is the runtime processes' whole environment: nothing of the
// daemon's (it may hold provider keys).
var runtimeEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// command prepares one runtime invocation. It leads its own process group
// so a backstop kill reaches everything the runtime started on the host.
func (r *Runtime) command(args ...string) *exec.Cmd {
	cmd := exec.Command(r.bin, append(r.globalArgs(), args...)...)
	cmd.Env = runtimeEnv
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// run runs the runtime to completion and returns its stdout; the error
// carries its stderr. ctx bounds it.
func (r *Runtime) run(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	var cmd *exec.Cmd
	if len(args) == 1 && args[0] == "--version" {
		cmd = exec.Command(r.bin, "--version")
		cmd.Env = runtimeEnv
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	} else {
		cmd = r.command(args...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	err := cmd.Wait()
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return stdout.Bytes(), fmt.Errorf("%s %s: %w", r.opts.Runtime, args[0], ctx.Err())
		}
		return stdout.Bytes(), fmt.Errorf("%s %s: %v: %s", r.opts.Runtime, args[0], err, lastLines(stderr.String(), 3))
	}
	return stdout.Bytes(), nil
}

// lastLines keeps the tail of a runtime's error output.
func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " | ")
}

// probe runs one short container with the full seal and checks what the
// helper inside reports. It is the only reliable test of "this runtime
// works here": versions and cgroup layouts combine in too many ways.
func (r *Runtime) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	id := "probe-" + container.RandHex(6)
	b := bundle{dir: filepath.Join(r.bundles, id)}
	defer os.RemoveAll(b.dir)
	spec := container.ProbeSpec()
	sl, err := seal.New(spec)
	if err == nil {
		err = r.layout(b, id, spec, sl, []string{wire.HelperPath, wire.ModeProbe})
	}
	if err != nil {
		return fmt.Errorf("%w: %s probe bundle: %v", sandbox.ErrUnsupported, r.opts.Runtime, err)
	}
	out, err := r.run(ctx, nil, "run", "--bundle", b.dir, id)
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, _ = r.run(dctx, nil, "delete", "--force", id)
	if cg, cerr := locateCgroup(cgroupRel(id)); cerr == nil {
		for _, d := range cg.all() {
			_ = removeCgroup(dctx, d) // a runtime that failed half-way may leave them
		}
	}
	dcancel()
	if err != nil {
		return fmt.Errorf("%w: %s cannot run a sealed container here: %v%s", sandbox.ErrUnsupported, r.version, err, r.explain(err))
	}
	if err := wire.ParseProbe(string(out)); err != nil {
		return fmt.Errorf("%w: %s probe container is not sealed: %v", sandbox.ErrUnsupported, r.version, err)
	}
	r.Logf("%s works here (%s)", r.opts.Runtime, r.version)
	return nil
}

// explain adds what we know about a runtime failing on this host.
func (r *Runtime) explain(err error) string {
	msg := err.Error()
	switch {
	case r.opts.Runtime == Crun && strings.Contains(msg, "hybrid"):
		mode, ctrls := cgroupMode()
		return fmt.Sprintf(" (this host's cgroups are %s with controllers %q on the unified hierarchy; crun refuses that layout: it only manages pure cgroup v1 or pure v2. Use runc or runsc here, or boot with a pure v1 or v2 hierarchy)", mode, ctrls)
	case strings.Contains(msg, "permission denied") && r.userns:
		return fmt.Sprintf(" (the container's root is host uid %d: every directory above the state directory %s and above each bind source must be searchable by others)", HostIDBase, r.opts.StateDir)
	}
	return ""
}

// cgroupMode names this host's cgroup layout: "v1", "v2" or "hybrid", and
// for hybrid the controllers enabled on the unified hierarchy.
func cgroupMode() (string, string) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "unknown", ""
	}
	var v1 bool
	var v2 string
	for _, line := range strings.Split(string(mi), "\n") {
		_, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f := strings.Fields(line)
		switch strings.Fields(post)[0] {
		case "cgroup":
			v1 = true
		case "cgroup2":
			if len(f) > 4 {
				v2 = f[4]
			}
		}
	}
	switch {
	case v1 && v2 != "":
		c, _ := os.ReadFile(filepath.Join(v2, "cgroup.controllers"))
		return "hybrid", strings.TrimSpace(string(c))
	case v2 != "":
		return "v2", ""
	case v1:
		return "v1", ""
	}
	return "none", ""
}

// On runsc the host pids cgroup holds the sentry, the gofer and the ptrace
// platform's stub processes and tracer threads, which grow with the
// sandbox's own tasks; a sentry that cannot make a thread dies with the
// whole sandbox, and an agent whose clone the host refuses too. So the
// Spec's limit is enforced inside, by the sentry, as RLIMIT_NPROC on every
// command (fork fails with EAGAIN, as under a pids cgroup; see
// Sandbox.nproc), and the host limit is only a backstop with room for the
// sentry.
//
// Measured with runsc 2022-12 on the ptrace platform: 40 sandbox processes
// cost about 550 host tasks; a sandbox held at a pids limit of 40 (the
// agent's and the exec fronts' Go threads included) peaked at about 1070.
func runscHostPidsOverhead(pids int64) int64 { return 32*pids + 1024 }

// On runsc the memory of every sandbox process is the sentry's, so the
// host's OOM killer, at the cgroup's limit, can only end the whole sandbox.
// The Spec's limit is therefore enforced by the daemon instead (see
// Sandbox.watchMemory): above it, the agent kills the largest process
// inside, as the kernel's OOM killer would. The host limit is a backstop
// above that, with room for the overshoot while the kill takes effect.
func runscHostMemOverhead(mem int64) int64 { return 64<<20 + mem/4 }

// layout writes a bundle for spec, sealed by sl, whose container runs
// args.
func (r *Runtime) layout(b bundle, id string, spec sandbox.Spec, sl *seal.Seal, args []string) error {
	c := bundleConfig{
		id:         id,
		spec:       spec,
		seal:       sl,
		helperExe:  r.helper,
		cgroupPath: cgroupRel(id),
		userns:     r.userns,
		args:       args,
		cpus:       sandbox.CPUList(r.cpus.Pick(spec.Limits.CPUs)),
		gvisor:     r.opts.Runtime == Runsc,
	}
	if r.splitPids {
		c.pidsReserve = sandbox.InitPidsReserve
	}
	if r.opts.Runtime == Runsc {
		c.pidsOverhead = runscHostPidsOverhead(spec.Limits.Pids)
		c.memOverhead = runscHostMemOverhead(spec.Limits.MemoryBytes)
	}
	if err := writeBundle(b, c); err != nil {
		return err
	}
	return r.WriteOwner(b.dir)
}

// collect removes the containers and bundles of runtimes (in this or an
// earlier process) whose owner is gone; a live owner's are never touched.
func (r *Runtime) collect(ctx context.Context) {
	r.CollectDirs(r.bundles, func(id string) {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, _ = r.run(dctx, nil, "delete", "--force", id)
		if cg, err := locateCgroup(cgroupRel(id)); err == nil {
			for _, d := range cg.all() {
				_ = removeCgroup(dctx, d)
			}
		}
	})
}

// mkdirs makes dir (and its parents) and sets its mode.
func mkdirs(dir string, mode os.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return err
	}
	return os.Chmod(dir, mode)
}

// checkSearchable fails unless every directory from / to dir lets others
// search it.
func checkSearchable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("state directory %s: %s is not searchable by others (mode %v); the container's root (host uid %d) must reach the bundle", dir, d, st.Mode().Perm(), HostIDBase)
		}
		if d == "/" {
			return nil
		}
	}
}

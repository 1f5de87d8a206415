// Package native is the default sandbox backend: Linux namespaces, a fresh
// root via pivot_root, cgroups (v1 and v2), landlock and seccomp, driven
// from pure Go with no external binary. This package is the host side (the
// parent); package boot is what runs inside (the child); package wire is
// the protocol between them.
//
// pid 1 (the init) is protected from its workload (see protectInit): on
// cgroup v1 the pids limit is split so that sandbox.InitPidsReserve tasks
// stay pid 1's; the daemon lowers pid 1's oom_score_adj where it may
// (CAP_SYS_RESOURCE), and every command starts at
// sandbox.WorkloadOOMScoreAdj, which landlock keeps it from lowering. The
// sandbox sees its own cgroups read-only at /sys/fs/cgroup, and its
// commands run on ceil(cpus) CPUs (sandbox.CPUPicker), fixed at create.
// When pid 1 dies, Done closes at once (its control socket ends).
package native

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/cgroups"
	"github.com/ironclaw/ironclaw/internal/landlock"
	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside/boot"
	"github.com/ironclaw/ironclaw/internal/sandbox/setup"
	"golang.org/x/sys/unix"
)

// DefaultHostIDBase is where root mode maps the sandbox's ids on the host:
// uid 0..65535 inside become DefaultHostIDBase+0..65535 outside, so the
// sandbox user 65532 is host uid 165532 and nothing maps to host root.
const DefaultHostIDBase = 100000

// Options configure a Runtime. The zero value is usable.
type Options struct {
	// Logf receives diagnostics (never secrets); nil discards them.
	Logf func(format string, args ...any)
	// Exe is the binary re-executed as the sandbox init; "" means
	// /proc/self/exe. Tests and the daemon both use their own binary.
	Exe string
	// Steward is the sandbox steward (inside/steward's csrc: make build
	// puts ironclaw-steward beside ironclaw-sandbox), the small pid 1 an
	// idle sandbox keeps instead of the Go init; "" means none: pid 1
	// stays the Go init, as it does (with a line to Logf) when the file
	// does not speak this build's protocol (HasSteward tells).
	Steward string
	// StewardAfter is how long after a sandbox is ready its pid 1 becomes
	// the steward; 0: steward.FirstHandover (250 ms, so that a create's
	// first commands do not wait for the execve). The tests make it at
	// once, so that their commands exercise the steward.
	StewardAfter time.Duration
	// GoInit starts every sandbox with the Go init. Without it, every
	// sandbox the C init can make (setup.Supports: all but gated ones)
	// starts with the steward as its init: it builds the root and seals
	// itself from the plan the daemon compiles (package setup), with no Go
	// runtime, and hands pid 1 to the Go agent only for what it does not
	// serve; measured in one run (docs/performance.md), create to first
	// result takes 15-17 ms this way and 26-27 ms with the Go init. The C
	// init needs Steward and a known landlock ABI; without either, the Go
	// init makes every sandbox.
	GoInit bool
	// HostIDBase overrides DefaultHostIDBase (root mode only).
	HostIDBase int
	// RequireLandlock makes Create fail on kernels without landlock
	// instead of running with namespaces and seccomp only.
	RequireLandlock bool
	// PoolSize keeps that many default-shaped sandboxes sealed and idle so
	// Create can hand one out at once (see pool). 0 disables the pool; a
	// one-shot CLI has no use for it, a daemon does.
	PoolSize int
	// PoolExposedTCP are the exposed ports pooled sandboxes are made with:
	// a daemon that exposes its model proxy in every sandbox lists its port
	// here so that its sandboxes still come from the pool.
	PoolExposedTCP []uint16
	// PoolGate is the gate (Spec.Gate) pooled sandboxes are made with: a
	// daemon whose policy gates programs lists them here. A spec with
	// another gate, or a PATH of its own (gated names are looked up in
	// it), is created cold.
	PoolGate []string
	// PoolTrust is the trust directory (Spec.Trust) pooled sandboxes
	// are made with: the daemon's, which every sandbox of it gets.
	PoolTrust string
	// SpareCgroups keeps that many sandbox cgroups made ahead, with the
	// default limits, for creates the pool cannot serve (see
	// spareCgroups). 0 makes each create its own; a one-shot CLI has no
	// use for spares, a daemon does.
	SpareCgroups int
	// SpareInits keeps that many sandbox inits started ahead, in their
	// namespaces and cgroups, waiting for their plans, for the creates
	// the pool cannot serve (see hatchery). 0: none (the one-shot CLI's
	// choice); it needs the steward's C init.
	SpareInits int
}

// Runtime is the native backend. It is safe for concurrent use; Close
// destroys every sandbox it still holds.
type Runtime struct {
	opts    Options
	init    *initFile // Options.Exe when it is not this binary (see initFile.open)
	steward *os.File  // Options.Steward, open for the runtime's life; nil: none
	// plans compiles the C init's plans for this kernel; nil: the Go
	// init makes every sandbox (Options.GoInit, no steward, or a landlock
	// ABI or seccomp program that could not be worked out).
	plans    *setup.Compiler
	cg       *cgroups.Hierarchy
	rootless bool
	owner    string // "<pid>.<starttime>": names our cgroups so a later run can tell them from a live run's
	hostUID  int    // the sandbox user's uid and gid as the host sees them
	hostGID  int
	idMaps   idMaps    // what every init's user namespace maps (see idmap.go)
	ambient  []uintptr // the capabilities every init executes with until its seal
	spawn    *spawner
	pool     *pool         // nil when Options.PoolSize is 0
	spares   *spareCgroups // nil when Options.SpareCgroups is 0
	hatchery *hatchery     // nil when Options.SpareInits is 0 (or no C init)
	// alternatives is the one read-only mount of the view's
	// alternatives links every root-mode sandbox binds.
	alternatives *sharedAlternatives
	cpus         *sandbox.CPUPicker

	notesMu                      sync.Mutex // guards the flags below: things logged once
	noSplit, noOOM, noForkInside bool
	// noQueue: a first command is not queued behind a new init's message
	// (its move into the workload's pids share was refused; CreateExec).
	noQueue bool
	// openWorkloadTasks opens the tasks file a C init moves itself into
	// ((*cgroups.Cgroup).WorkloadTasks; a test makes it refuse).
	openWorkloadTasks func(*cgroups.Cgroup) (*os.File, error)

	mu     sync.Mutex
	boxes  map[string]*Sandbox
	closed bool
}

var _ sandbox.Runtime = (*Runtime)(nil)

// New checks the host, collects what a crashed earlier run left, and
// returns a ready Runtime.
func New(ctx context.Context, opts Options) (*Runtime, error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	// The default root's plan reads the host's bin directories once per
	// process (rootfs caches it): begun now, it overlaps the checks and
	// the cgroup set-up below instead of delaying the first create, which
	// for a one-shot `ironclaw run` is the only one. The one mount of its
	// alternatives links that root-mode sandboxes share is made after it,
	// for the same reason (a rootless runtime shares none).
	alternatives := newSharedAlternatives()
	go func() {
		rootfs.WarmHostView("/")
		if os.Geteuid() != 0 {
			return
		}
		if root, err := rootfs.HostView("/", ""); err == nil {
			alternatives.warm(alternativesLinks(root))
		}
	}()
	if opts.Exe == "" {
		// The init is this very binary, so it must be able to seal all
		// of its threads.
		if _, _, e := syscall.AllThreadsSyscall(unix.SYS_GETPID, 0, 0, 0); e == syscall.ENOTSUP {
			return nil, fmt.Errorf("%w: this binary was built with cgo and would be its own sandbox init, which must seal every one of its threads (a cgo runtime's threads escape that): build it with CGO_ENABLED=0, or put a CGO_ENABLED=0 ironclaw-sandbox of the same build beside it (make build)", sandbox.ErrUnsupported)
		}
		opts.Exe = "/proc/self/exe"
	}
	var initBin *initFile
	if opts.Exe != "/proc/self/exe" {
		f, err := statInit(opts.Exe)
		if err != nil {
			return nil, err
		}
		initBin = &f
	}
	if opts.HostIDBase == 0 {
		opts.HostIDBase = DefaultHostIDBase
	}
	rootless := os.Geteuid() != 0
	if rootless {
		if err := CheckUserNamespaces(); err != nil {
			return nil, err
		}
	}
	ambient, err := boundingCaps()
	if err != nil {
		return nil, fmt.Errorf("%w: reading this process's capability bounding set: %v", sandbox.ErrUnsupported, err)
	}
	cg, err := cgroups.Detect()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrUnsupported, err)
	}
	owner, err := sandbox.ProcessOwner(os.Getpid())
	if err != nil {
		return nil, err
	}
	// Descriptors this process inherited without close-on-exec (a shell's
	// saved fds, say) must never reach a sandbox: Go itself only passes
	// what ExtraFiles names, so marking them costs nothing.
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	var stewardBin *os.File
	if opts.Steward != "" {
		f, err := openSteward(opts.Steward)
		if err != nil {
			opts.Logf("%v; idle sandboxes keep the Go init as pid 1", err)
		}
		stewardBin = f
	}
	r := &Runtime{opts: opts, init: initBin, steward: stewardBin, cg: cg, rootless: rootless, owner: owner, spawn: newSpawner(opts.Logf), boxes: map[string]*Sandbox{}, alternatives: alternatives, cpus: sandbox.NewCPUPicker(),
		hostUID: opts.HostIDBase + sandbox.UID, hostGID: opts.HostIDBase + sandbox.GID,
		idMaps: sandboxIDMaps(rootless, opts.HostIDBase), ambient: ambient,
		openWorkloadTasks: (*cgroups.Cgroup).WorkloadTasks}
	if rootless {
		r.hostUID, r.hostGID = os.Getuid(), os.Getgid()
	}
	if stewardBin != nil && !opts.GoInit {
		if r.plans, err = cInitCompiler(); err != nil {
			opts.Logf("%v; every sandbox gets the Go init", err)
		}
	}
	// Leftovers first: a spare is named like a sandbox's cgroup.
	removed, err := cg.Collect(r.keepCgroup)
	if err != nil {
		opts.Logf("collecting leftover cgroups: %v", err)
	}
	if len(removed) > 0 {
		opts.Logf("collected %d sandbox cgroup(s) left by an earlier run", len(removed))
	}
	if opts.SpareCgroups > 0 {
		r.spares = newSpareCgroups(r, opts.SpareCgroups)
	}
	if opts.SpareInits > 0 {
		r.hatchery = newHatchery(r, opts.SpareInits)
	}
	if opts.PoolSize > 0 {
		r.pool = newPool(r, opts.PoolSize)
	}
	return r, nil
}

// PoolIdle reports how many pooled sandboxes are ready (0 without a pool).
func (r *Runtime) PoolIdle() int {
	if r.pool == nil {
		return 0
	}
	return r.pool.idle()
}

// SparesIdle reports how many spare cgroups are ready (0 without spares).
func (r *Runtime) SparesIdle() int {
	if r.spares == nil {
		return 0
	}
	return r.spares.idle()
}

// SpareInitsIdle reports how many inits started ahead are ready (0
// without them).
func (r *Runtime) SpareInitsIdle() int {
	if r.hatchery == nil {
		return 0
	}
	return r.hatchery.idle()
}

// HasSteward reports whether sandboxes get the steward as their idle pid 1.
func (r *Runtime) HasSteward() bool { return r.steward != nil }

// Name implements sandbox.Runtime.
func (r *Runtime) Name() string { return "native" }

// Rootless reports whether sandboxes are created without host root.
func (r *Runtime) Rootless() bool { return r.rootless }

// Cgroups describes where sandbox cgroups live.
func (r *Runtime) Cgroups() string { return r.cg.Describe() }

// Close destroys every sandbox still held.
func (r *Runtime) Close(ctx context.Context) error {
	if r.pool != nil {
		r.pool.close() // first: its refill takes spare inits and cgroups
	}
	if r.hatchery != nil {
		r.hatchery.close() // before the spare cgroups, which it takes
	}
	if r.spares != nil {
		r.spares.close()
	}
	r.mu.Lock()
	r.closed = true
	boxes := slices.Collect(maps.Values(r.boxes))
	r.mu.Unlock()
	err := sandbox.DestroyAll(ctx, boxes)
	// Safe now: a create under way either failed on closed or had sent
	// its Config (the descriptor travels as a copy).
	closeFile(r.steward)
	r.alternatives.close()
	return err
}

func closeFile(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// cgroupPrefix starts every sandbox cgroup name.
const cgroupPrefix = "ic-"

func (r *Runtime) cgroupName(id string) string { return cgroupPrefix + r.owner + "-" + id }

// keepCgroup tells Collect which cgroups belong to a live runtime: ours, or
// another process's whose pid and start time still match.
func (r *Runtime) keepCgroup(name string) bool {
	rest, ok := strings.CutPrefix(name, cgroupPrefix)
	if !ok {
		return true // not ours to judge
	}
	owner, _, ok := strings.Cut(rest, "-")
	if !ok {
		return false
	}
	if owner == r.owner {
		return true
	}
	pidStr, _, _ := strings.Cut(owner, ".")
	pid, err := strconv.Atoi(pidStr)
	if err != nil {
		return false
	}
	cur, err := sandbox.ProcessOwner(pid)
	return err == nil && cur == owner
}

// CheckUserNamespaces reports, for an unprivileged caller, whether the host
// lets it create user namespaces, with what to change when it does not.
func CheckUserNamespaces() error {
	read := func(p string) (string, bool) {
		b, err := os.ReadFile(p)
		return strings.TrimSpace(string(b)), err == nil
	}
	if v, ok := read("/proc/sys/user/max_user_namespaces"); ok && v == "0" {
		return fmt.Errorf("%w: user namespaces are disabled (user.max_user_namespaces=0); enable them with: sysctl -w user.max_user_namespaces=15000, or run as root", sandbox.ErrUnsupported)
	}
	if v, ok := read("/proc/sys/kernel/unprivileged_userns_clone"); ok && v == "0" {
		return fmt.Errorf("%w: unprivileged user namespaces are disabled; enable them with: sysctl -w kernel.unprivileged_userns_clone=1, or run as root", sandbox.ErrUnsupported)
	}
	if v, ok := read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); ok && v == "1" {
		return fmt.Errorf("%w: AppArmor restricts unprivileged user namespaces; allow them with: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or an AppArmor profile granting userns to ironclaw), or run as root", sandbox.ErrUnsupported)
	}
	return nil
}

func newID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return "sbx-" + hex.EncodeToString(b[:])
}

// spawner starts every sandbox init from one OS thread that lives as long
// as the process: the kernel delivers an init's parent-death signal when
// the *thread* that forked it exits, so a short-lived thread would kill
// sandboxes at random, and a dead daemon must take its sandboxes with it.
// On cgroup v1 that thread steps into the new sandbox's cgroup for the
// fork (cgroups.ForkInside), so the init is born there, and steps back
// out while its caller writes the init's id maps (see begin).
type spawner struct {
	reqs chan spawnReq
	logf func(string, ...any)
}

type spawnReq struct {
	exe  string
	argv []string
	attr *syscall.ProcAttr
	// forkInside, when set, forks inside a sandbox's cgroup (v1:
	// (*cgroups.Cgroup).ForkInside; a test strands the thread).
	forkInside func(fork func() error) error
	born       chan *initProc // the forked init, at once (buffered)
	res        chan spawnRes  // the outcome, the thread home again (buffered)
}

type spawnRes struct {
	p   *initProc
	err error
}

func newSpawner(logf func(string, ...any)) *spawner {
	s := &spawner{reqs: make(chan spawnReq), logf: logf}
	go s.serve()
	return s
}

// serve runs on its own locked thread until the process ends. A thread
// that could not leave a sandbox cgroup serves no more: it is parked for
// good (its exit would kill the inits it forked) and a fresh thread takes
// over.
func (s *spawner) serve() {
	// Never unlocked: the thread exits with the process.
	runtime.LockOSThread()
	for r := range s.reqs {
		var p *initProc
		start := func() error {
			// syscall's, not os's: os.StartProcess would hold a pidfd
			// per sandbox (see initProc).
			pid, _, err := syscall.StartProcess(r.exe, r.argv, r.attr)
			if err != nil {
				return &fs.PathError{Op: "fork/exec", Path: r.exe, Err: err}
			}
			p = &initProc{pid: pid}
			r.born <- p // before the thread steps back out of the cgroup
			return nil
		}
		var err error
		if r.forkInside != nil {
			err = r.forkInside(start)
		} else {
			err = start()
		}
		r.res <- spawnRes{p, err}
		if errors.Is(err, cgroups.ErrStranded) {
			// The caller kills the init it was handed (settle's error).
			s.logf("sandbox spawner: %v; a new spawner thread takes over", err)
			go s.serve()
			select {} // parked, locked, for the life of the process
		}
	}
}

// start starts exe; with inside set, the process is born in that cgroup.
func (s *spawner) start(ctx context.Context, exe string, argv []string, attr *syscall.ProcAttr, inside *cgroups.Cgroup) (*initProc, error) {
	w, err := s.begin(ctx, exe, argv, attr, inside)
	if err != nil {
		return nil, err
	}
	p, settle, err := w()
	if err != nil {
		return nil, err
	}
	if err := settle(); err != nil {
		_ = p.kill()
		_ = p.wait()
		return nil, err
	}
	return p, nil
}

// spawnWait waits for a start that begin handed the spawner thread. It
// returns the init as soon as it is forked, while the thread, on cgroup
// v1, is still stepping back out of the sandbox's cgroups (five writes
// to tasks files, 0.1-0.3 ms here), so the caller writes the init's id
// maps meanwhile; settle waits for that step and reports nil or why the
// thread could not leave (cgroups.ErrStranded). A caller whose settle
// fails must kill the init: its cgroup holds a parked daemon thread.
type spawnWait func() (p *initProc, settle func() error, err error)

// begin hands the spawner thread the start of exe and returns at once,
// with the function that waits for its result: the caller can prepare
// what the new process is to be sent while it is cloned. The wait must
// be called once, and a settle it returns at most once; attr must not
// change before the wait returns.
func (s *spawner) begin(ctx context.Context, exe string, argv []string, attr *syscall.ProcAttr, inside *cgroups.Cgroup) (spawnWait, error) {
	req := spawnReq{exe: exe, argv: argv, attr: attr, born: make(chan *initProc, 1), res: make(chan spawnRes, 1)}
	if inside != nil {
		req.forkInside = inside.ForkInside
	}
	return s.send(ctx, req)
}

func (s *spawner) send(ctx context.Context, req spawnReq) (spawnWait, error) {
	select {
	case s.reqs <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return func() (*initProc, func() error, error) {
		select {
		case p := <-req.born:
			return p, func() error { return (<-req.res).err }, nil
		case r := <-req.res:
			if r.p != nil { // forked (born holds it too) and home already
				return r.p, func() error { return r.err }, nil
			}
			return nil, nil, r.err // no process: refused before or at the fork
		}
	}, nil
}

// initFile is the init binary a Runtime was opened with (Options.Exe), as
// it was then: a create executes it only if it is still that file.
type initFile struct {
	path     string
	dev, ino uint64
	size     int64
	mtime    unix.Timespec
}

func statInit(path string) (initFile, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return initFile{}, fmt.Errorf("%w: the sandbox init %s: %v", sandbox.ErrUnsupported, path, err)
	}
	return initFile{path: path, dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim}, nil
}

// cInitCompiler is the compiler of the C init's plans for this kernel.
func cInitCompiler() (*setup.Compiler, error) {
	abi, err := landlock.ABI()
	if err != nil {
		return nil, err
	}
	return setup.NewCompiler(abi)
}

// open opens the init for one create and returns a path naming the open
// file, /proc/self/fd/N, which the sandbox's child resolves at execve, and
// the function that closes it once the child has executed it. The child
// executes as the sandbox's host uid, which may not be allowed to walk the
// directories above the binary (a home directory of mode 0700, say); the
// magic link needs no walk. The descriptor is opened per create, not held:
// a descriptor held for the process's life would be lost to any code that
// closes a stale descriptor number, and every create after it would fail.
// A binary replaced since the Runtime started (an upgrade) is refused: it
// may be another build, whose wire protocol is not this one's.
func (f initFile) open() (string, func(), error) {
	file, err := f.openFile()
	if err != nil {
		return "", nil, err
	}
	// Above the descriptors the child is given (0-3), so no dup2 in the
	// child lands on it.
	high, err := unix.FcntlInt(file.Fd(), unix.F_DUPFD_CLOEXEC, 64)
	file.Close()
	if err != nil {
		return "", nil, fmt.Errorf("opening the sandbox init %s: %v", f.path, err)
	}
	return "/proc/self/fd/" + strconv.Itoa(high), func() { unix.Close(high) }, nil
}

// openFile opens the init (O_PATH) and checks it is still the file the
// Runtime started with.
func (f initFile) openFile() (*os.File, error) {
	fd, err := unix.Open(f.path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: opening the sandbox init %s: %v", sandbox.ErrUnsupported, f.path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Dev != f.dev || st.Ino != f.ino || st.Size != f.size || st.Mtim != f.mtime {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: the sandbox init %s changed since this runtime started (an upgrade?): restart the daemon", sandbox.ErrUnsupported, f.path)
	}
	return os.NewFile(uintptr(fd), f.path), nil
}

// initArgv is the sandbox init's command line; see boot.IsInit.
var initArgv = []string{boot.Arg0}

// stewardInitArgv is the C init's command line (csrc/steward.h's
// INIT_ARG0).
var stewardInitArgv = []string{"ironclaw-steward-init"}

// initEnv is the init's whole environment: nothing of the daemon's.
var initEnv = []string{"GOMAXPROCS=1", "GOGC=50"}

const readyTimeout = 30 * time.Second

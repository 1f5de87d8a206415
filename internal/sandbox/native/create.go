package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/cgroups"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/setup"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// Create implements sandbox.Runtime. Nothing is left behind on error.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	return r.CreateNamed(ctx, spec, nil)
}

// CreateNamed is Create that tells named, if set, the new sandbox's id
// as soon as it is drawn and before the slow part of the build: a cold
// create's clone and the init's set-up, or the set-up alone of a spare
// init. The caller can then do its own work for that id (the session
// layer commits the sandbox's record) while the sandbox is built. named
// is called at most once, on the caller's goroutine, and must not block.
// It is not called for a sandbox from the warm pool, which has nothing
// left to build; and when a spare init dies as it is taken, the create
// starts over under a new id that named does not hear of, so the
// sandbox returned is what counts: its ID may differ from the one named.
func (r *Runtime) CreateNamed(ctx context.Context, spec sandbox.Spec, named func(id string)) (sandbox.Sandbox, error) {
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if r.pool != nil {
		if sb := r.pool.take(spec); sb != nil {
			return sb, nil
		}
	}
	return r.createCold(ctx, spec, named)
}

// CreateExec creates a sandbox for spec and runs req in it as its first
// command: Create, then Exec, except that a cold create queues req to
// the init right behind what the init is to build (see raise), so the
// command starts as soon as the sandbox is sealed instead of a round
// trip through us later. The sandbox is returned whenever one was made,
// also when the command failed; the caller destroys it. On a cold
// create, a request that Exec would refuse fails the create, and nothing
// is left behind; a sandbox from the warm pool is returned with Exec's
// error.
func (r *Runtime) CreateExec(ctx context.Context, spec sandbox.Spec, req sandbox.ExecRequest) (sandbox.Sandbox, sandbox.ExecResult, error) {
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return nil, sandbox.ExecResult{}, err
	}
	if r.pool != nil {
		if sb := r.pool.take(spec); sb != nil {
			res, err := sb.Exec(ctx, req)
			return sb, res, err
		}
	}
	first := &req
	if r.noted(&r.noQueue) {
		first = nil
	}
	sb, p, err := r.createColdFirst(ctx, spec, nil, first)
	if errors.Is(err, errWorkloadRefused) {
		r.noteOnce(&r.noQueue, fmt.Sprintf("a new sandbox's first command waits for the sandbox to be ready: %v", err))
		sb, p, err = r.createColdFirst(ctx, spec, nil, nil)
	}
	if err != nil {
		return nil, sandbox.ExecResult{}, err
	}
	if p == nil {
		res, err := sb.Exec(ctx, req)
		return sb, res, err
	}
	res, err := p.finish(ctx)
	return sb, res, err
}

// sandboxCgroup returns a new sandbox's id and its cgroup with limits l:
// a spare made ahead when one is ready, else one made now.
func (r *Runtime) sandboxCgroup(l sandbox.Limits) (string, *cgroups.Cgroup, error) {
	cl := cgroups.Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPUs: l.CPUs}
	if r.spares != nil {
		if sp, ok := r.spares.take(cl); ok {
			return sp.id, sp.cg, nil
		}
	}
	id := newID()
	cg, err := r.cg.Create(r.cgroupName(id), cl)
	return id, cg, err
}

// createCold makes a sandbox from scratch for a validated spec: from a
// hatchling (an init started ahead, see hatchery) when one fits, else
// from a clone made now.
func (r *Runtime) createCold(ctx context.Context, spec sandbox.Spec, named func(id string)) (*Sandbox, error) {
	sb, _, err := r.createColdFirst(ctx, spec, named, nil)
	return sb, err
}

// createColdFirst is createCold that, with first set, also queues first
// to the init right behind its message where it can (the C init), and
// returns it sent; a nil preparedExec with a sandbox means first was not
// queued and is the caller's to run.
func (r *Runtime) createColdFirst(ctx context.Context, spec sandbox.Spec, named func(id string), first *sandbox.ExecRequest) (*Sandbox, *preparedExec, error) {
	cfg, err := r.initConfig(spec)
	if err != nil {
		return nil, nil, err
	}
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, nil, sandbox.ErrClosed
	}
	if h := r.takeHatchling(cfg, spec.Limits); h != nil {
		if named != nil {
			named(h.id)
			named = nil // a fresh clone below has an id of its own
		}
		sb, p, err := r.raise(ctx, h, spec, cfg, nil, first)
		var exited initExitedError
		if !errors.Is(err, errUnsent) && !errors.As(err, &exited) {
			return sb, p, err
		}
		// It died as it was taken (before it could read the plan, or with
		// no word about it): this create goes on from a clone, once.
		r.opts.Logf("%s: a spare init was gone when taken (%v); making the sandbox anew", h.id, err)
	}
	h, msg, err := r.hatch(ctx, spec.Limits, cfg, true, first != nil, named)
	if err != nil {
		return nil, nil, err
	}
	return r.raise(ctx, h, spec, cfg, msg, first)
}

// hatchling is a sandbox init started in its fresh namespaces and born in
// its cgroup, its id maps written, blocked reading the one message that
// tells it what to build (its plan or Config). Nothing of a spec is in it
// yet but its limits' cgroup and its namespaces.
type hatchling struct {
	id    string
	cg    *cgroups.Cgroup
	proc  *initProc
	conn  *wire.Conn
	cInit bool // the steward's C init, which reads a plan; else the Go init
	// unshareCgroup: it was moved into its cgroup after the clone and is
	// to unshare its cgroup namespace itself (cfg.UnshareCgroup).
	unshareCgroup bool
}

// discard kills h's init and removes its cgroup.
func (h *hatchling) discard(logf func(string, ...any)) {
	_ = h.proc.kill()
	h.conn.Close()
	_ = h.proc.wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.cg.Destroy(ctx); err != nil {
		logf("%s: removing cgroup: %v", h.id, err)
	}
}

// hatch starts an init for cfg's namespaces in a new cgroup with limits
// l. With prepare, it also makes the message for cfg while the init is
// cloned and executed (about 0.6 of a cold create's 5 ms, taken off its
// path; docs/performance.md) and returns it; cfg.UnshareCgroup is set
// when the init must unshare its cgroup namespace itself. Nothing is left
// behind on error. named, if set, hears the id once its cgroup is made.
func (r *Runtime) hatch(ctx context.Context, l sandbox.Limits, cfg *wire.Config, prepare, queued bool, named func(id string)) (_ *hatchling, _ *initMessage, retErr error) {
	id, cg, err := r.sandboxCgroup(l)
	if errors.Is(err, fs.ErrPermission) {
		return nil, nil, fmt.Errorf("%w: sandbox cgroup: %v; limits need root or a delegated cgroup v2 subtree (for example: systemd-run --user -p Delegate=yes --scope ironclaw ...)", sandbox.ErrUnsupported, err)
	}
	if herr := sandbox.HostExhausted("making the sandbox cgroup", err); herr != nil {
		return nil, nil, herr
	}
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox cgroup: %w", err)
	}
	if named != nil {
		named(id)
	}
	defer func() {
		if retErr != nil {
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := cg.Destroy(dctx); err != nil {
				r.opts.Logf("%s: removing cgroup after failed create: %v", id, err)
			}
		}
	}()

	conn, childEnd, err := wire.Pair()
	if err != nil {
		return nil, nil, hostErr("the control socket", err)
	}
	conn.NonblockFDs = true
	defer childEnd.Close()

	flags, err := cloneFlags(&cfg.Seal)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	// No UidMappings: the daemon writes the maps once the init has
	// executed, so the clone need not copy the daemon (see idmap.go).
	sys := &syscall.SysProcAttr{Cloneflags: initCloneFlags(flags), Pdeathsig: syscall.SIGKILL, AmbientCaps: r.ambient}
	// How the init gets into its cgroup: cloned into it (v2); born in it,
	// forked by a thread that steps inside for the fork (v1); or, where
	// that is refused, moved in after the fork, which waits for the
	// kernel (see cgroups.ForkInside). The first two make the cgroup
	// namespace in the clone, the last has the init unshare it once
	// placed.
	var inside *cgroups.Cgroup
	if fd, err := cg.OpenFD(); err == nil {
		defer syscall.Close(fd)
		sys.UseCgroupFD = true
		sys.CgroupFD = fd
		sys.Cloneflags |= syscall.CLONE_NEWCGROUP
	} else if !errors.Is(err, cgroups.ErrNotSupported) {
		conn.Close()
		return nil, nil, fmt.Errorf("sandbox cgroup: %w", err)
	} else if !r.noted(&r.noForkInside) {
		inside = cg
		sys.Cloneflags |= syscall.CLONE_NEWCGROUP
	} else {
		cfg.UnshareCgroup = true
	}
	// cgroup v1: pid 1's tasks reserve is made now, and the init's main
	// thread moves itself into the workload's share (see reservePids).
	var workloadTasks *os.File
	if err := cg.ReservePids(sandbox.InitPidsReserve); err == nil {
		if prepare {
			if workloadTasks, err = r.openWorkloadTasks(cg); err != nil {
				conn.Close()
				return nil, nil, fmt.Errorf("sandbox cgroup: %w", err)
			}
			// The message owns it once made (see below): it is sent
			// after this returns.
			defer func() {
				if retErr != nil {
					workloadTasks.Close()
				}
			}()
		}
	} else if !errors.Is(err, cgroups.ErrNotSupported) {
		conn.Close()
		return nil, nil, fmt.Errorf("sandbox cgroup: reserving PIDs for pid 1: %w", err)
	}

	devNull, err := os.Open(os.DevNull)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	defer devNull.Close()
	exe, closeExe, argv := r.opts.Exe, func() {}, initArgv
	// The C init builds and seals every sandbox it can (see
	// Options.GoInit); the Go init the rest.
	cInit := r.plans != nil && setup.Supports(cfg) == nil
	if cInit {
		exe, argv = "/proc/self/fd/"+strconv.Itoa(int(r.steward.Fd())), stewardInitArgv
	} else if r.init != nil {
		if exe, closeExe, err = r.init.open(); err != nil {
			conn.Close()
			return nil, nil, err
		}
	}
	// The init's standard error is its control socket too: what it
	// writes there (a refusal, a Go runtime's last words) arrives as text
	// packets, which the Conn hands to the sandbox's log (wire.Conn's
	// Stderr), and the sandbox costs no second descriptor.
	attr := &syscall.ProcAttr{
		Dir:   "/",
		Env:   initEnv,
		Files: []uintptr{devNull.Fd(), devNull.Fd(), childEnd.Fd(), childEnd.Fd()},
		Sys:   sys,
	}
	// What the init is sent (its trees and its plan or Config) does not
	// depend on the process, so it is made while the spawner thread
	// clones and executes the init.
	var msg *initMessage
	defer func() {
		if retErr != nil {
			msg.close()
		}
	}()
	wait, err := r.spawn.begin(ctx, exe, argv, attr, inside)
	var proc *initProc
	settle := func() error { return nil }
	if err == nil {
		if prepare {
			msg = r.prepareInit(cInit, cfg, workloadTasks, queued)
		}
		var s func() error
		if proc, s, err = wait(); err == nil {
			settle = s
		}
	}
	if inside != nil && errors.Is(err, cgroups.ErrNotSupported) {
		r.noteOnce(&r.noForkInside, fmt.Sprintf("sandbox inits are moved into their cgroups after the fork, which waits for the kernel: %v", err))
		inside = nil
		sys.Cloneflags &^= syscall.CLONE_NEWCGROUP
		cfg.UnshareCgroup = true
		if prepare {
			msg.close() // its plan does not unshare the cgroup namespace
			msg = r.prepareInit(cInit, cfg, workloadTasks, queued)
		}
		proc, err = r.spawn.start(ctx, exe, argv, attr, nil)
	}
	if !cInit && r.init != nil && errors.Is(err, fs.ErrPermission) {
		// The magic link was refused (EACCES) in a benchmark process
		// that had driven the runc, runsc and Docker backends before; the
		// cause is not known. The path itself, walked as the sandbox's
		// host uid, may still do.
		proc, err = r.spawn.start(ctx, r.init.path, initArgv, attr, inside)
	}
	closeExe() // executed by now, or never
	if err != nil {
		conn.Close()
		if herr := sandbox.HostExhausted("starting the sandbox init", err); herr != nil {
			return nil, nil, herr
		}
		return nil, nil, fmt.Errorf("%w: starting the sandbox init: %v", sandbox.ErrUnsupported, err)
	}
	childEnd.Close()
	h := &hatchling{id: id, cg: cg, proc: proc, conn: conn, cInit: cInit, unshareCgroup: cfg.UnshareCgroup}
	fail := func(err error) (*hatchling, *initMessage, error) {
		_ = proc.kill()
		conn.Close()
		_ = proc.wait()
		return nil, nil, err
	}
	if err := r.idMaps.write(proc.pid); err != nil {
		return fail(hostErr("the sandbox's id maps", err))
	}
	// The spawner thread stepped back out of the cgroup meanwhile. It must
	// be out before the init is sent anything: while the sandbox's memory
	// cgroup holds a daemon thread, an OOM there could pick the daemon.
	if err := settle(); err != nil {
		return fail(fmt.Errorf("%w: starting the sandbox init: %v", sandbox.ErrUnsupported, err))
	}
	if cfg.UnshareCgroup {
		// cgroup v1 has no clone-into-cgroup: place the init now; it waits
		// for the Config before it forks anything.
		if err := cg.Add(proc.pid); err != nil {
			return fail(fmt.Errorf("sandbox cgroup: %w", err))
		}
	}
	r.protectInit(proc.pid)
	if msg != nil && workloadTasks != nil {
		msg.owned = append(msg.owned, workloadTasks)
	}
	return h, msg, nil
}

// errUnsent is raise's error when the init could not be sent its message
// (it had exited): nothing of the spec reached it.
var errUnsent = errors.New("the init took no message")

// errWorkloadRefused is awaitReady's error when the init, with a command
// queued, could not move itself into its workload's pids share
// (setup.FlagWorkloadRequired): the kernel checks the writer's
// credentials there (before 5.16), and the create is made again without
// queueing.
var errWorkloadRefused = errors.New("the init could not enter its workload's pids share")

// initExitedError is awaitReady's error when the init exited without a
// reply (a failure of the plan is a reply, not this).
type initExitedError struct{ error }

func (e initExitedError) Unwrap() error { return e.error }

// raise sends hatchling h what to build for spec (msg, or one made now
// for cfg), waits for the init to be ready and registers the sandbox. On
// error h is discarded.
//
// With first set and a C init, first is prepared and sent right behind
// the message, before the init is ready: the init reads it once sealed
// and starts it at once, instead of a round trip through us later. It
// is returned sent, for finish; its sandbox is not, until ready, in
// r.boxes. Nothing of it can start before the seal, which the init
// applies before it reads another request, and the plan then requires
// the init's own move into the workload's pids share
// (setup.FlagWorkloadRequired): the move the daemon makes otherwise, after
// ready (reservePids), would come after the command had started.
func (r *Runtime) raise(ctx context.Context, h *hatchling, spec sandbox.Spec, cfg *wire.Config, msg *initMessage, first *sandbox.ExecRequest) (_ *Sandbox, _ *preparedExec, retErr error) {
	defer func() { msg.close() }()
	b := &Sandbox{id: h.id, spec: spec, rt: r, proc: h.proc, conn: h.conn, cg: h.cg,
		pending: map[uint64]chan reply{}, done: make(chan struct{})}
	h.conn.Stderr = b.initStderr
	var p *preparedExec
	defer func() {
		if retErr != nil {
			if p != nil {
				p.drop()
			}
			b.closeListeners()
			h.discard(r.opts.Logf)
		}
	}()
	queued := first != nil && h.cInit
	if queued {
		var err error
		if p, err = b.prepareExec(*first); err != nil {
			return nil, nil, err
		}
	}
	if msg == nil {
		var workloadTasks *os.File
		if wt, err := r.openWorkloadTasks(h.cg); err == nil {
			workloadTasks = wt
			defer wt.Close()
		} else if !errors.Is(err, cgroups.ErrNotSupported) {
			return nil, nil, fmt.Errorf("sandbox cgroup: %w", err)
		}
		msg = r.prepareInit(h.cInit, cfg, workloadTasks, queued)
	}
	if err := msg.send(h.conn); err != nil {
		if msg.err == nil {
			err = fmt.Errorf("%w: %w", errUnsent, err)
		}
		return nil, nil, fmt.Errorf("sandbox init: %w", err)
	}
	msg.close()
	if p != nil {
		if err := p.send(); err != nil {
			p = nil // send released it
			return nil, nil, fmt.Errorf("sandbox init: queueing the first command: %w", err)
		}
	}
	if err := b.awaitReady(ctx); err != nil {
		return nil, nil, err
	}
	if p != nil {
		// A queued command starts once the init is sealed, just before it
		// says so: its duration (and, in finish, its wall-time limit)
		// counts from here, not from the send, before the set-up.
		p.sent = time.Now()
	}
	if err := r.reservePids(h.cg, h.proc.pid); err != nil {
		return nil, nil, err
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, nil, sandbox.ErrClosed
	}
	r.boxes[h.id] = b
	r.mu.Unlock()
	go b.readReplies()
	return b, p, nil
}

// initMessage is the one message a new init is sent: the C init's
// encoded plan or the Go init's Config, and the descriptors that go with
// it.
type initMessage struct {
	plan  []byte       // the C init's plan (package setup); nil: send cfg
	cfg   *wire.Config // the Go init's Config
	files []*os.File   // sent with it, in order
	owned []*os.File   // of files, those the message opened (closed by close)
	err   error        // from preparing it: send returns it
}

// prepareInit makes the message for an init of cfg: the trees (which
// fill cfg.Sources), then for the C init its plan and the Go agent it
// hands pid 1 to for file operations, for the Go init the steward (the
// program pid 1 becomes once idle); last, the workload tasks file.
//
// queued says a command will be sent right behind the message (raise):
// the C init's move into the workload tasks file is then required.
func (r *Runtime) prepareInit(cInit bool, cfg *wire.Config, workloadTasks *os.File, queued bool) *initMessage {
	trees := r.openTrees(cfg)
	m := &initMessage{cfg: cfg, files: trees, owned: trees}
	if !cInit {
		if r.steward != nil {
			cfg.Steward = true
			cfg.StewardAfter = r.opts.StewardAfter
			m.files = append(m.files, r.steward)
		}
		if workloadTasks != nil {
			cfg.WorkloadTasks = true
			m.files = append(m.files, workloadTasks)
		}
		return m
	}
	plan, err := r.plans.Compile(cfg, len(trees))
	if err != nil {
		m.err = err
		return m
	}
	var flags uint32
	if workloadTasks != nil {
		flags |= setup.FlagWorkloadTasks
		if queued {
			flags |= setup.FlagWorkloadRequired
		}
	}
	if m.plan, m.err = setup.Encode(plan, flags); m.err != nil {
		return m
	}
	agent, err := r.openAgent()
	if err != nil {
		m.err = err
		return m
	}
	m.owned = append(m.owned, agent)
	m.files = append(append([]*os.File(nil), trees...), agent)
	if workloadTasks != nil {
		m.files = append(m.files, workloadTasks)
	}
	return m
}

// send sends the message on conn.
func (m *initMessage) send(conn *wire.Conn) error {
	if m.err != nil {
		return m.err
	}
	if m.plan != nil {
		return conn.SendBytes(m.plan, m.files...)
	}
	return conn.Send(m.cfg, m.files...)
}

// close closes the descriptors the message opened; a nil message and a
// second close are no-ops.
func (m *initMessage) close() {
	if m == nil {
		return
	}
	for _, f := range m.owned {
		f.Close()
	}
	m.owned = nil
}

// openAgent opens the Go init (O_PATH) for the C init to hand pid 1 to:
// the Runtime's own binary (/proc/self/exe names it even once replaced on
// disk), or Options.Exe if it is still the file it was at New.
func (r *Runtime) openAgent() (*os.File, error) {
	if r.init != nil {
		return r.init.openFile()
	}
	fd, err := unix.Open(r.opts.Exe, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: opening the sandbox agent %s: %v", sandbox.ErrUnsupported, r.opts.Exe, err)
	}
	return os.NewFile(uintptr(fd), "agent"), nil
}

// awaitReady waits for the init's first reply.
func (b *Sandbox) awaitReady(ctx context.Context) error {
	type result struct {
		rep   wire.Reply
		files []*os.File
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		var rep wire.Reply
		files, err := b.conn.Recv(&rep)
		ch <- result{rep, files, err}
	}()
	t := time.NewTimer(readyTimeout)
	defer t.Stop()
	select {
	case res := <-ch:
		if res.err != nil {
			diag := b.initDiag()
			if strings.Contains(diag, "failed to create new OS thread") && strings.Contains(diag, "errno=11") {
				// The Go runtime's own words when clone fails with EAGAIN.
				return fmt.Errorf("%w (processes or threads): the sandbox init could not start a thread%s", sandbox.ErrHostExhausted, diag)
			}
			return initExitedError{fmt.Errorf("%w: the sandbox init exited during setup%s", sandbox.ErrUnsupported, diag)}
		}
		if res.rep.Op != wire.OpReady {
			wire.CloseAll(res.files)
			if res.rep.Code == setup.CodeWorkloadRefused {
				return fmt.Errorf("%w: %s", errWorkloadRefused, res.rep.Err)
			}
			if herr := sandbox.HostExhausted("sandbox setup", syscall.Errno(res.rep.Errno)); res.rep.Errno != 0 && herr != nil {
				return fmt.Errorf("%w (%s)", herr, res.rep.Err)
			}
			return fmt.Errorf("%w: sandbox setup failed: %s", sandbox.ErrUnsupported, res.rep.Err)
		}
		return b.adoptListeners(res.files)
	case <-ctx.Done():
		b.conn.Close()
		wire.CloseAll((<-ch).files)
		return ctx.Err()
	case <-t.C:
		b.conn.Close()
		wire.CloseAll((<-ch).files)
		return fmt.Errorf("sandbox init did not become ready within %v", readyTimeout)
	}
}

// initConfig turns a validated spec into the child's Config: its seal,
// and what only the native init does.
func (r *Runtime) initConfig(spec sandbox.Spec) (*wire.Config, error) {
	s, err := seal.New(spec)
	if err != nil {
		return nil, err
	}
	cfg := &wire.Config{
		Seal:            *s,
		Cgroup:          viewOf(r.cg.View()),
		CPUs:            r.cpus.Pick(spec.Limits.CPUs),
		Listen:          spec.Network.ExposedTCP,
		RequireLandlock: r.opts.RequireLandlock,
		// Every command starts above pid 1 (see protectInit).
		WorkloadOOMScoreAdj: sandbox.WorkloadOOMScoreAdj,
	}
	if err := gateConfig(spec, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// cloneFlags are the namespaces of a seal as clone flags; the cgroup
// namespace is made apart (see createCold), after the cgroup placement.
func cloneFlags(s *seal.Seal) (uintptr, error) {
	var flags uintptr
	for _, ns := range s.Namespaces {
		switch ns {
		case seal.NSUser:
			flags |= syscall.CLONE_NEWUSER
		case seal.NSPID:
			flags |= syscall.CLONE_NEWPID
		case seal.NSMount:
			flags |= syscall.CLONE_NEWNS
		case seal.NSNetwork:
			flags |= syscall.CLONE_NEWNET
		case seal.NSIPC:
			flags |= syscall.CLONE_NEWIPC
		case seal.NSUTS:
			flags |= syscall.CLONE_NEWUTS
		case seal.NSCgroup:
		default:
			return 0, fmt.Errorf("%w: the native backend cannot make a %s namespace", sandbox.ErrUnsupported, ns)
		}
	}
	if flags&syscall.CLONE_NEWUSER == 0 || !s.Has(seal.NSCgroup) {
		return 0, fmt.Errorf("%w: the native backend needs user and cgroup namespaces", sandbox.ErrUnsupported)
	}
	return flags, nil
}

// openTrees clones each host source as a detached mount tree (open_tree),
// so the child can attach what the daemon may read even where the
// sandbox's own host uid could not, and adds the runtime's shared
// alternatives (sharedAlternatives). It fills cfg.Sources to match. Rootless
// daemons and kernels before 5.2 skip this; the child then opens sources
// itself.
func (r *Runtime) openTrees(cfg *wire.Config) []*os.File {
	if r.rootless {
		return nil
	}
	var paths []string
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			paths = append(paths, p)
		}
	}
	for _, e := range cfg.Seal.Root {
		add(e.Source)
	}
	for _, m := range cfg.Seal.Mounts {
		add(m.Source)
	}
	var files []*os.File
	cfg.Sources = nil
	for _, p := range paths {
		fd, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			r.opts.Logf("open_tree %s: %v; the sandbox opens it itself", p, err)
			continue
		}
		files = append(files, os.NewFile(uintptr(fd), p))
		cfg.Sources = append(cfg.Sources, p)
	}
	if f := r.alternatives.clone(alternativesLinks(cfg.Seal.Root), r.opts.Logf); f != nil {
		files = append(files, f)
		cfg.Sources = append(cfg.Sources, wire.AlternativesSource)
	}
	return files
}

// hostErr is err from making a descriptor or process for a sandbox: the
// host ran out of something (see sandbox.HostExhausted), or err itself.
func hostErr(what string, err error) error {
	if herr := sandbox.HostExhausted(what, err); herr != nil {
		return herr
	}
	return fmt.Errorf("%s: %w", what, err)
}

// maxDiagLines and maxDiagLine bound what a sandbox keeps of its init's
// standard error for error messages; maxLoggedLines bounds the lines of
// it logged. A healthy init writes nothing there; an init made to write
// without end (by a hostile sandbox, were it to reach pid 1) must not fill
// the daemon's log: past the bound, lines are counted, and the count is
// logged when the sandbox is destroyed.
const (
	maxDiagLines   = 20
	maxDiagLine    = 1 << 10
	maxLoggedLines = 200
)

// initStderr takes what the init writes to its standard error (a refusal,
// a Go runtime's panic), which arrives on the control socket a write at a
// time (wire.Conn's Stderr): it logs it line by line (up to
// maxLoggedLines), a long line in pieces, and keeps the first lines for
// error messages. Only pid 1 holds
// the socket; no command of the sandbox can write there.
func (b *Sandbox) initStderr(text []byte) {
	b.diagMu.Lock()
	defer b.diagMu.Unlock()
	b.diagPart = append(b.diagPart, text...)
	for {
		end, next := bytes.IndexByte(b.diagPart, '\n'), 0
		switch {
		case end >= maxDiagLine || end < 0 && len(b.diagPart) >= maxDiagLine:
			end, next = maxDiagLine, maxDiagLine
		case end < 0:
			return
		default:
			next = end + 1
		}
		line := string(b.diagPart[:end])
		b.diagPart = append(b.diagPart[:0], b.diagPart[next:]...)
		if len(b.diag) < maxDiagLines {
			b.diag = append(b.diag, line)
		}
		switch {
		case b.diagLogged < maxLoggedLines:
			b.diagLogged++
			b.rt.opts.Logf("%s init: %s", b.id, line)
		case b.diagDropped == 0:
			b.diagDropped++
			b.rt.opts.Logf("%s init: more lines than the %d logged of a sandbox: the rest are counted, not logged", b.id, maxLoggedLines)
		default:
			b.diagDropped++
		}
	}
}

// logDropped logs how many lines of the init's standard error were not
// logged, if any.
func (b *Sandbox) logDropped() {
	b.diagMu.Lock()
	defer b.diagMu.Unlock()
	if b.diagDropped > 0 {
		b.rt.opts.Logf("%s init: %d line(s) of its standard error were not logged", b.id, b.diagDropped)
	}
}

// initDiag is the init's last words as kept, for the error of a create
// whose init died. The Recv that saw it die has taken every write before.
func (b *Sandbox) initDiag() string {
	b.diagMu.Lock()
	defer b.diagMu.Unlock()
	last := ""
	if len(b.diag) > 0 {
		last = b.diag[len(b.diag)-1]
	}
	if len(b.diagPart) > 0 && len(b.diag) < maxDiagLines {
		last = string(b.diagPart) // a line the init did not end
	}
	if last == "" {
		return ""
	}
	return ": " + last
}

// adoptListeners turns the sockets the init bound on the sandbox's loopback
// into listeners, one per exposed port, in the Spec's order.
func (b *Sandbox) adoptListeners(files []*os.File) error {
	defer wire.CloseAll(files)
	ports := b.spec.Network.ExposedTCP
	if len(files) != len(ports) {
		return fmt.Errorf("sandbox init returned %d listeners for %d exposed ports", len(files), len(ports))
	}
	b.listeners = map[uint16]net.Listener{}
	for i, f := range files {
		l, err := net.FileListener(f)
		if err != nil {
			b.closeListeners()
			return fmt.Errorf("exposed port %d: %w", ports[i], err)
		}
		b.listeners[ports[i]] = l
	}
	return nil
}

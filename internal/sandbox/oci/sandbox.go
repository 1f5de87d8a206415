package oci

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/container"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// readyTimeout bounds a sandbox start (runsc takes about a second).
const readyTimeout = 30 * time.Second

// Sandbox is one OCI container: the agent as its pid 1, commands and file
// operations started with the runtime's exec. It is safe for concurrent
// use.
type Sandbox struct {
	id   string
	spec sandbox.Spec
	rt   *Runtime
	b    bundle
	cg   cgroupDirs

	ctl   net.Conn   // to the agent; closing it ends the sandbox
	ctlMu sync.Mutex // serialises writes to ctl

	initPid int  // the agent's host pid (runc, crun) or the sandbox's (runsc); 0 if unknown
	split   bool // execs run in the pids cgroup's workload child (see splitPids)

	listeners map[uint16]net.Listener // exposed port -> unix listener; fixed after Create
	gateSock  string                  // the agent's socket for approved runs of gated programs; "" when none

	// oomKills counts the OOM kills the daemon asked the agent for (runsc,
	// see watchMemory); the kernel's are in the cgroup.
	oomKills atomic.Int64

	done        chan struct{}
	doneOnce    sync.Once
	destroyOnce sync.Once
	destroyErr  error

	diag diagLog
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// ID implements sandbox.Sandbox.
func (b *Sandbox) ID() string { return b.id }

// Done implements sandbox.Sandbox: closed when the agent (the container's
// pid 1) is gone, or the sandbox was destroyed.
func (b *Sandbox) Done() <-chan struct{} { return b.done }

// InitPid is the host pid of the sandbox's pid 1 (the agent) on runc and
// crun, or of its gVisor sandbox process on runsc; 0 if unknown. For tests
// and diagnostics.
func (b *Sandbox) InitPid() int { return b.initPid }

// Bundle is the sandbox's bundle directory (for tests and diagnostics).
func (b *Sandbox) Bundle() string { return b.b.dir }

// CgroupDirs are the host directories of the sandbox's cgroup (for tests).
func (b *Sandbox) CgroupDirs() []string { return b.cg.all() }

// Listener implements sandbox.Sandbox. Whatever the caller serves on it is
// reachable inside at 127.0.0.1:port: the agent listens there and splices
// each connection to this unix socket. Nothing outside the sandbox can
// reach the port, and the sandbox gets no network interface for it.
func (b *Sandbox) Listener(port uint16) (net.Listener, bool) {
	l, ok := b.listeners[port]
	return l, ok
}

func (b *Sandbox) markDone() { b.doneOnce.Do(func() { close(b.done) }) }

// Create implements sandbox.Runtime. Nothing is left behind on error.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (_ sandbox.Sandbox, retErr error) {
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, sandbox.ErrClosed
	}
	id := newID()
	b := &Sandbox{id: id, spec: spec, rt: r, b: bundle{dir: filepath.Join(r.bundles, id)},
		listeners: map[uint16]net.Listener{}, done: make(chan struct{})}
	started := false
	defer func() {
		if retErr == nil {
			return
		}
		b.closeListeners()
		dctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if started {
			b.teardown(dctx)
		} else {
			_ = os.RemoveAll(b.b.dir)
		}
	}()

	args := []string{wire.HelperPath, wire.ModeAgent}
	if r.opts.Runtime == Runsc {
		lim := spec.Limits
		args = append(args, wire.GVisorSetupArg(lim.MemoryBytes, lim.Pids, int64(math.Round(lim.CPUs*cfsPeriodUs)), cfsPeriodUs))
	}
	for _, p := range spec.Network.ExposedTCP {
		args = append(args, strconv.Itoa(int(p)))
	}
	plan, err := b.planGate()
	if err != nil {
		return nil, err
	}
	defer plan.Close()
	if err := r.layout(b.b, id, spec, args, spec.Network.ExposedTCP...); err != nil {
		return nil, err
	}
	if b.cg, err = locateCgroup(cgroupRel(id)); err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrUnsupported, err)
	}
	ctlL, err := container.ListenUnix(filepath.Join(b.b.sockDir(), wire.CtlSock))
	if err != nil {
		return nil, err
	}
	defer ctlL.Close()
	for _, p := range spec.Network.ExposedTCP {
		l, err := container.ListenUnix(filepath.Join(b.b.sockDir(), wire.PortSock(p)))
		if err != nil {
			return nil, fmt.Errorf("exposed port %d: %w", p, err)
		}
		b.listeners[p] = l
	}

	// The runtime returns once the container runs; the container's stdio
	// is /dev/null and, for stderr, a pipe whose lines go to the log.
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		errR.Close()
		errW.Close()
		return nil, err
	}
	cmd := r.command("run", "--detach", "--pid-file", b.b.pidFile(), "--bundle", b.b.dir, id)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devNull, devNull, errW
	err = cmd.Start()
	errW.Close()
	devNull.Close()
	if err != nil {
		errR.Close()
		if herr := sandbox.HostExhausted("starting "+r.opts.Runtime, err); herr != nil {
			return nil, herr
		}
		return nil, fmt.Errorf("%w: starting %s: %v", sandbox.ErrUnsupported, r.opts.Runtime, err)
	}
	started = true
	b.diag.init()
	go b.diag.read(errR, func(line string) { r.opts.Logf("%s: %s", id, line) })
	runErr := make(chan error, 1)
	go func() { runErr <- cmd.Wait() }()

	acc := container.AcceptOne(ctlL)
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	var ctl net.Conn
	for ctl == nil {
		select {
		case a := <-acc:
			if a.Err != nil {
				return nil, fmt.Errorf("sandbox %s: waiting for the agent: %w", id, a.Err)
			}
			ctl = a.Conn
		case err := <-runErr:
			runErr = nil
			if err != nil {
				if herr := sandbox.HostExhaustedText(r.opts.Runtime+" run", err.Error()+b.diag.tail()); herr != nil {
					return nil, herr
				}
				return nil, fmt.Errorf("%w: %s run: %v%s%s", sandbox.ErrUnsupported, r.opts.Runtime, err, b.diag.tail(), r.explain(errors.New(b.diag.tail())))
			}
		case <-timer.C:
			return nil, fmt.Errorf("sandbox %s: the agent did not connect within %v%s", id, readyTimeout, b.diag.tail())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// One connection only: from here on nothing can connect in the agent's
	// place (the socket file goes with the listener).
	ctlL.Close()
	b.ctl = ctl
	if err := container.SendGate(ctl, plan, b.gateSock); err != nil {
		ctl.Close()
		return nil, err
	}
	rd, err := container.AgentReady(ctl, id, readyTimeout, b.diag.tail)
	if err != nil {
		return nil, err
	}
	if runErr != nil {
		// run --detach has returned by now or does so at once.
		select {
		case err := <-runErr:
			if err != nil {
				ctl.Close()
				return nil, fmt.Errorf("%w: %s run: %v%s", sandbox.ErrUnsupported, r.opts.Runtime, err, b.diag.tail())
			}
		case <-time.After(readyTimeout):
			ctl.Close()
			return nil, fmt.Errorf("sandbox %s: %s run did not return", id, r.opts.Runtime)
		}
	}
	if err := b.protectInit(); err != nil {
		ctl.Close()
		return nil, err
	}
	go func() {
		// The agent never speaks again: EOF means pid 1 is gone.
		_, _ = rd.WriteTo(discard{})
		b.markDone()
	}()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, sandbox.ErrClosed
	}
	r.boxes[id] = b
	r.mu.Unlock()
	if r.opts.Runtime == Runsc {
		go b.watchMemory()
	}
	return b, nil
}

// protectInit runs once the agent is up, before any command: it reserves
// PIDs for pid 1 (see splitPids) and, where the host lets it
// (CAP_SYS_RESOURCE), lowers pid 1's oom_score_adj; commands raise their
// own to sandbox.WorkloadOOMScoreAdj as they start (the exec front).
func (b *Sandbox) protectInit() error {
	if data, err := os.ReadFile(b.b.pidFile()); err == nil {
		b.initPid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
	}
	if b.rt.splitPids {
		if err := b.splitPids(); err != nil {
			return fmt.Errorf("sandbox %s: reserving PIDs for pid 1: %w", b.id, err)
		}
	}
	b.rt.notesMu.Lock()
	refused := b.rt.noOOM // a host that refused once refuses every time
	b.rt.notesMu.Unlock()
	if b.rt.opts.Runtime == Runsc || b.initPid <= 0 || refused {
		// On runsc the kernel's OOM killer never picks among the
		// sandbox's processes (see watchMemory).
		return nil
	}
	if err := sandbox.LowerInitOOMScore(b.initPid); err != nil {
		b.rt.notesMu.Lock()
		if !b.rt.noOOM {
			b.rt.noOOM = true
			b.rt.opts.Logf("pid 1 of each sandbox keeps the daemon's oom_score_adj (%v); commands still start at %d, above it", err, sandbox.WorkloadOOMScoreAdj)
		}
		b.rt.notesMu.Unlock()
	}
	return nil
}

// workloadCgroup is the child of a sandbox's pids cgroup every exec runs
// in when the limit is split (runc exec --cgroup).
const workloadCgroup = "workload"

// splitPids makes the pids cgroup's child workloadCgroup with the Spec's
// pids limit; the sandbox's own cgroup has sandbox.InitPidsReserve more
// (see writeBundle), which only the agent, outside the child, can use.
func (b *Sandbox) splitPids() error {
	d := filepath.Join(b.cg.pids, workloadCgroup)
	if err := os.Mkdir(d, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d, "pids.max"), []byte(strconv.FormatInt(b.spec.Limits.Pids, 10)), 0); err != nil {
		return err
	}
	b.split = true
	return nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func (b *Sandbox) closeListeners() {
	for _, l := range b.listeners {
		l.Close()
	}
}

// killGroup asks the agent to SIGKILL a command's process group.
func (b *Sandbox) killGroup(pgid int) {
	b.tellAgent(fmt.Sprintf("%s %d", wire.MsgKill, pgid))
}

// tellAgent sends one control line to the agent.
func (b *Sandbox) tellAgent(line string) {
	b.ctlMu.Lock()
	defer b.ctlMu.Unlock()
	if b.ctl != nil {
		_ = b.ctl.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(b.ctl, line+"\n")
	}
}

// Memory watch intervals (runsc): how often the sandbox's memory is read
// while it uses less than half its limit, and above that.
const (
	memWatchIdle = 50 * time.Millisecond
	memWatchNear = 5 * time.Millisecond
	// oomSettle is how long a kill is given to bring the sandbox back
	// under its limit before the next largest process goes too.
	oomSettle = time.Second
)

// watchMemory enforces the Spec's memory limit on runsc, where the host's
// OOM killer could only end the whole sandbox (see runscHostMemOverhead):
// when the sandbox's working set (its cgroup's use, sentry included, less
// droppable page cache) exceeds the limit, the agent SIGKILLs the largest
// process inside, and the kill is counted as an OOM kill.
func (b *Sandbox) watchMemory() {
	limit := b.spec.Limits.MemoryBytes
	var settling bool
	var settleBy time.Time
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-b.done:
			return
		case <-timer.C:
		}
		interval := memWatchIdle
		if ws, err := b.cg.workingSet(); err == nil {
			switch {
			case ws <= limit:
				settling = false
			case !settling || time.Now().After(settleBy):
				b.oomKills.Add(1)
				b.tellAgent(wire.MsgOOM)
				settling, settleBy = true, time.Now().Add(oomSettle)
			}
			if ws > limit/2 {
				interval = memWatchNear
			}
		}
		timer.Reset(interval)
	}
}

// oomCount is every OOM kill in the sandbox so far: the kernel's and the
// daemon's own (runsc).
func (b *Sandbox) oomCount() int64 { return b.cg.oomKills() + b.oomKills.Load() }

// Stats implements sandbox.Sandbox from the sandbox's cgroup. On runsc the
// cgroup holds the sentry and gofer, so memory is what the whole sandbox
// costs the host, not only what its processes use.
func (b *Sandbox) Stats(ctx context.Context) (sandbox.Stats, error) {
	select {
	case <-b.done:
		return sandbox.Stats{}, fmt.Errorf("sandbox %s: %w", b.id, sandbox.ErrClosed)
	default:
	}
	st, err := b.cg.stats()
	st.OOMKills += b.oomKills.Load()
	return st, err
}

// Destroy implements sandbox.Sandbox: the agent's connection closes (pid 1
// exits, and the kernel or the sentry ends every other process with it),
// the runtime kills and deletes the container with its cgroup, and the
// bundle goes last.
func (b *Sandbox) Destroy(ctx context.Context) error {
	b.destroyOnce.Do(func() {
		b.closeListeners()
		b.ctlMu.Lock()
		if b.ctl != nil {
			b.ctl.Close()
		}
		b.ctlMu.Unlock()
		b.destroyErr = b.teardown(ctx)
		b.markDone()
		b.rt.mu.Lock()
		delete(b.rt.boxes, b.id)
		b.rt.mu.Unlock()
	})
	return b.destroyErr
}

// teardown kills and deletes the container, waits for its cgroup to go and
// removes the bundle.
func (b *Sandbox) teardown(ctx context.Context) error {
	r := b.rt
	_, _ = r.run(ctx, nil, "kill", b.id, "KILL")
	var errs []error
	if _, err := r.run(ctx, nil, "delete", "--force", b.id); err != nil && !notExist(err) {
		errs = append(errs, err)
	}
	for _, d := range b.cg.all() {
		if err := removeCgroup(ctx, d); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(b.b.dir); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("sandbox %s: %w", b.id, errors.Join(errs...))
	}
	return nil
}

func notExist(err error) bool {
	s := err.Error()
	return strings.Contains(s, "does not exist") || strings.Contains(s, "not found") || strings.Contains(s, "No such file")
}

// removeCgroup waits for the runtime to have removed a cgroup directory,
// and removes it itself if the runtime left it (an empty cgroup whose
// processes were still exiting when the runtime tried), child cgroups
// (workloadCgroup) first.
func removeCgroup(ctx context.Context, dir string) error {
	if des, err := os.ReadDir(dir); err == nil {
		for _, de := range des {
			if de.IsDir() {
				if err := removeCgroup(ctx, filepath.Join(dir, de.Name())); err != nil {
					return err
				}
			}
		}
	}
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cgroup %s: %w", dir, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// diagLog keeps the last lines the runtime and the agent wrote to stderr.
type diagLog struct {
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

func (d *diagLog) init() { d.done = make(chan struct{}) }

func (d *diagLog) read(f *os.File, logf func(string)) {
	defer close(d.done)
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		d.mu.Lock()
		d.lines = append(d.lines, line)
		if len(d.lines) > 20 {
			d.lines = d.lines[1:]
		}
		d.mu.Unlock()
		logf(line)
	}
}

// tail returns ": <last lines>" or "".
func (d *diagLog) tail() string {
	if d.done != nil {
		select { // let the reader catch the last words of an exiting runtime
		case <-d.done:
		case <-time.After(200 * time.Millisecond):
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.lines) == 0 {
		return ""
	}
	ls := d.lines
	if len(ls) > 3 {
		ls = ls[len(ls)-3:]
	}
	return ": " + strings.Join(ls, " | ")
}

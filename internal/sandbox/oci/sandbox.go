package oci

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/container"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// Sandbox is one OCI container: the agent as its pid 1, commands and file
// operations started with the runtime's exec (package container does the
// rest). It is safe for concurrent use.
type Sandbox struct {
	*container.Sandbox
	box *box
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// Bundle is the sandbox's bundle directory (for tests and diagnostics).
func (b *Sandbox) Bundle() string { return b.box.b.dir }

// CgroupDirs are the host directories of the sandbox's cgroup (for tests).
func (b *Sandbox) CgroupDirs() []string { return b.box.cg.all() }

// box is one sandbox's container: its bundle, its cgroup and the runtime
// that runs it (container.Container).
type box struct {
	rt   *Runtime
	id   string
	spec sandbox.Spec
	seal *seal.Seal
	b    bundle
	cg   cgroupDirs

	initPid int  // the agent's host pid (runc, crun) or the sandbox's (runsc); 0 if unknown
	split   bool // execs run in the pids cgroup's workload child (see splitPids)

	started  bool               // run --detach was started
	detached <-chan error       // run --detach's result; nil once read
	sb       *container.Sandbox // set by Started
	// oomKills counts the OOM kills the daemon asked the agent for (runsc,
	// see watchMemory); the kernel's are in the cgroup.
	oomKills atomic.Int64

	diag diagLog
}

// Prepare implements container.Backend: the sandbox's bundle, and where
// its cgroup will be.
func (r *Runtime) Prepare(ctx context.Context, c container.Config) (_ container.Container, retErr error) {
	x := &box{rt: r, id: c.ID, spec: c.Spec, seal: c.Seal, b: bundle{dir: filepath.Join(r.bundles, c.ID), gate: c.Gate}}
	defer func() {
		if retErr != nil {
			_ = os.RemoveAll(x.b.dir)
		}
	}()
	args := []string{wire.HelperPath, wire.ModeAgent}
	if r.opts.Runtime == Runsc {
		lim := c.Spec.Limits
		args = append(args, wire.GVisorSetupArg(lim.MemoryBytes, lim.Pids, int64(math.Round(lim.CPUs*cfsPeriodUs)), cfsPeriodUs))
	}
	if err := r.layout(x.b, c.ID, c.Spec, c.Seal, append(args, c.AgentArgs...)); err != nil {
		return nil, err
	}
	var err error
	if x.cg, err = locateCgroup(cgroupRel(c.ID)); err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrUnsupported, err)
	}
	return x, nil
}

func (x *box) SockDir() string { return x.b.sockDir() }
func (x *box) InitPid() int    { return x.initPid }
func (x *box) Env() []string   { return seal.BaseEnv }
func (x *box) Diag() string    { return x.diag.tail() }

// Start runs the container detached; its stdio is /dev/null and, for
// stderr, a pipe whose lines go to the log.
func (x *box) Start(ctx context.Context) (<-chan error, error) {
	r := x.rt
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
	cmd := r.command("run", "--detach", "--pid-file", x.b.pidFile(), "--bundle", x.b.dir, x.id)
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
	x.started = true
	x.diag.init()
	go x.diag.read(errR, func(line string) { r.Logf("%s: %s", x.id, line) })
	detached := make(chan error, 1)
	x.detached = detached
	failed := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		if err != nil {
			if herr := sandbox.HostExhaustedText(r.opts.Runtime+" run", err.Error()+x.diag.tail()); herr != nil {
				err = herr
			} else {
				err = fmt.Errorf("%w: %s run: %v%s%s", sandbox.ErrUnsupported, r.opts.Runtime, err, x.diag.tail(), r.explain(errors.New(x.diag.tail())))
			}
			failed <- err
		}
		detached <- err
	}()
	return failed, nil
}

// Started runs once the agent is up, before any command: it waits for run
// --detach to return, reserves PIDs for pid 1 (see splitPids) and, where
// the host lets it, lowers pid 1's oom_score_adj; on runsc it starts the
// memory watch.
func (x *box) Started(ctx context.Context, sb *container.Sandbox) error {
	x.sb = sb
	select { // run --detach has returned by now or does so at once
	case err := <-x.detached:
		if err != nil {
			return err
		}
	case <-time.After(container.ReadyTimeout):
		return fmt.Errorf("sandbox %s: %s run did not return", x.id, x.rt.opts.Runtime)
	}
	if data, err := os.ReadFile(x.b.pidFile()); err == nil {
		x.initPid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
	}
	if x.rt.splitPids {
		if err := x.splitPids(); err != nil {
			return fmt.Errorf("sandbox %s: reserving PIDs for pid 1: %w", x.id, err)
		}
	}
	if x.rt.opts.Runtime == Runsc {
		// The kernel's OOM killer never picks among the sandbox's
		// processes: the daemon does (watchMemory).
		go x.watchMemory()
		return nil
	}
	x.rt.LowerInitOOM(x.initPid, "the daemon's")
	return nil
}

// workloadCgroup is the child of a sandbox's pids cgroup every exec runs
// in when the limit is split (runc exec --cgroup).
const workloadCgroup = "workload"

// splitPids makes the pids cgroup's child workloadCgroup with the Spec's
// pids limit; the sandbox's own cgroup has sandbox.InitPidsReserve more
// (see writeBundle), which only the agent, outside the child, can use.
func (x *box) splitPids() error {
	d := filepath.Join(x.cg.pids, workloadCgroup)
	if err := os.Mkdir(d, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d, "pids.max"), []byte(strconv.FormatInt(x.spec.Limits.Pids, 10)), 0); err != nil {
		return err
	}
	x.split = true
	return nil
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
func (x *box) watchMemory() {
	limit := x.spec.Limits.MemoryBytes
	var settling bool
	var settleBy time.Time
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-x.sb.Done():
			return
		case <-timer.C:
		}
		interval := memWatchIdle
		if ws, err := x.cg.workingSet(); err == nil {
			switch {
			case ws <= limit:
				settling = false
			case !settling || time.Now().After(settleBy):
				x.oomKills.Add(1)
				x.sb.TellAgent(wire.MsgOOM)
				settling, settleBy = true, time.Now().Add(oomSettle)
			}
			if ws > limit/2 {
				interval = memWatchNear
			}
		}
		timer.Reset(interval)
	}
}

// OOMKills is every OOM kill in the sandbox so far: the kernel's and the
// daemon's own (runsc).
func (x *box) OOMKills() int64 { return x.cg.oomKills() + x.oomKills.Load() }

// Stats reads the sandbox's cgroup. On runsc the cgroup holds the sentry
// and gofer, so memory is what the whole sandbox costs the host, not only
// what its processes use.
func (x *box) Stats(ctx context.Context) (sandbox.Stats, error) {
	st, err := x.cg.stats()
	st.OOMKills += x.oomKills.Load()
	return st, err
}

// Teardown kills and deletes the container, waits for its cgroup to go and
// removes the bundle.
func (x *box) Teardown(ctx context.Context) error {
	r := x.rt
	var errs []error
	if x.started {
		_, _ = r.run(ctx, nil, "kill", x.id, "KILL")
		// A paused container takes no signal until resumed (cgroup v1's
		// freezer), and delete refuses it: resume so the kill lands.
		if x.pausedOnce() {
			_, _ = r.run(ctx, nil, "resume", x.id)
		}
		if _, err := r.run(ctx, nil, "delete", "--force", x.id); err != nil && !notExist(err) {
			errs = append(errs, err)
		}
		for _, d := range x.cg.all() {
			if err := removeCgroup(ctx, d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := os.RemoveAll(x.b.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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

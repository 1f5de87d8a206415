package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/container"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	ctr "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// readyTimeout bounds a sandbox start.
const readyTimeout = 30 * time.Second

// Sandbox is one Docker container: the helper's agent as its pid 1,
// commands and file operations started through the exec API. It is safe
// for concurrent use.
type Sandbox struct {
	id   string
	cid  string // the container's ID
	spec sandbox.Spec
	rt   *Runtime
	st   state
	oom  string // host file counting the container's OOM kills; "" if unknown
	pid  int    // host pid of the container's pid 1 (the agent); 0 if unknown

	ctl   net.Conn   // to the agent; closing it ends the sandbox
	ctlMu sync.Mutex // serialises writes to ctl

	listeners map[uint16]net.Listener // exposed port -> unix listener; fixed after Create
	gateSock  string                  // the agent's socket for approved runs of gated programs; "" when none

	done        chan struct{}
	doneOnce    sync.Once
	destroyOnce sync.Once
	destroyErr  error
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// ID implements sandbox.Sandbox.
func (b *Sandbox) ID() string { return b.id }

// ContainerID is the Docker container's ID (for tests and diagnostics).
func (b *Sandbox) ContainerID() string { return b.cid }

// InitPid is the host pid of the sandbox's pid 1, the agent (for tests and
// diagnostics); 0 if unknown.
func (b *Sandbox) InitPid() int { return b.pid }

// StateDir is the sandbox's host state directory (for tests).
func (b *Sandbox) StateDir() string { return b.st.dir }

// Done implements sandbox.Sandbox: closed when the agent (the container's
// pid 1) is gone, or the sandbox was destroyed.
func (b *Sandbox) Done() <-chan struct{} { return b.done }

// Listener implements sandbox.Sandbox. Whatever the caller serves on it is
// reachable inside at 127.0.0.1:port: the agent listens there and splices
// each connection to this unix socket. The container has no network
// interface but lo, and the port exists nowhere on the host.
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
	b := &Sandbox{id: id, spec: spec, rt: r, st: state{dir: filepath.Join(r.bundles, id)},
		listeners: map[uint16]net.Listener{}, done: make(chan struct{})}
	defer func() {
		if retErr == nil {
			return
		}
		b.closeListeners()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		if b.cid != "" {
			if err := r.removeContainer(dctx, b.cid); err != nil {
				r.opts.Logf("%s: removing the container after a failed create: %v", id, err)
			}
		}
		_ = os.RemoveAll(b.st.dir)
	}()

	args := []string{wire.HelperPath, wire.ModeAgent}
	for _, p := range spec.Network.ExposedTCP {
		args = append(args, strconv.Itoa(int(p)))
	}
	plan, err := b.planGate()
	if err != nil {
		return nil, err
	}
	defer plan.Close()
	cid, err := r.createContainer(ctx, id, b.st, spec, args)
	if err != nil {
		return nil, err
	}
	b.cid = cid
	ctlL, err := container.ListenUnix(filepath.Join(b.st.sockDir(), wire.CtlSock))
	if err != nil {
		return nil, err
	}
	defer ctlL.Close()
	for _, p := range spec.Network.ExposedTCP {
		l, err := container.ListenUnix(filepath.Join(b.st.sockDir(), wire.PortSock(p)))
		if err != nil {
			return nil, fmt.Errorf("exposed port %d: %w", p, err)
		}
		b.listeners[p] = l
	}
	wctx, wcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer wcancel()
	wait := r.cli.ContainerWait(wctx, cid, client.ContainerWaitOptions{Condition: ctr.WaitConditionNextExit})
	if _, err := r.cli.ContainerStart(ctx, cid, client.ContainerStartOptions{}); err != nil {
		if herr := sandbox.HostExhaustedText("starting the container", err.Error()); herr != nil {
			return nil, herr
		}
		return nil, fmt.Errorf("%w: starting the container: %v", sandbox.ErrUnsupported, err)
	}

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
		case res := <-wait.Result:
			return nil, fmt.Errorf("%w: the sandbox's agent exited %d during start%s", sandbox.ErrUnsupported, res.StatusCode, r.logTail(cid))
		case err := <-wait.Error:
			return nil, fmt.Errorf("sandbox %s: waiting for the container: %w", id, err)
		case <-timer.C:
			return nil, fmt.Errorf("sandbox %s: the agent did not connect within %v%s", id, readyTimeout, r.logTail(cid))
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
	rd, err := container.AgentReady(ctl, id, readyTimeout, func() string { return r.logTail(cid) })
	if err != nil {
		return nil, err
	}
	b.oom, b.pid = r.oomFile(ctx, cid)
	r.notesMu.Lock()
	refused := r.noOOM // a host that refused once refuses every time
	r.notesMu.Unlock()
	if b.pid > 0 && !refused {
		// pid 1 is the OOM killer's last choice where the host lets us
		// lower it (CAP_SYS_RESOURCE); commands raise their own to
		// sandbox.WorkloadOOMScoreAdj as they start (the exec front).
		// Not HostConfig.OomScoreAdj: a dockerd without that capability
		// would refuse to start the container.
		if err := sandbox.LowerInitOOMScore(b.pid); err != nil {
			r.notesMu.Lock()
			if !r.noOOM {
				r.noOOM = true
				r.opts.Logf("pid 1 of each sandbox keeps dockerd's oom_score_adj (%v); commands still start at %d, above it", err, sandbox.WorkloadOOMScoreAdj)
			}
			r.notesMu.Unlock()
		}
	}
	go func() {
		// The agent never speaks again: EOF means pid 1 is gone.
		_, _ = io.Copy(io.Discard, rd)
		b.markDone()
	}()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		ctl.Close()
		return nil, sandbox.ErrClosed
	}
	r.boxes[id] = b
	r.mu.Unlock()
	return b, nil
}

// logTail returns ": <the last lines pid 1 wrote>" or "".
func (r *Runtime) logTail(cid string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	o, e := r.logs(ctx, cid)
	s := strings.TrimSpace(e + "\n" + o)
	if s == "" {
		return ""
	}
	ls := strings.Split(s, "\n")
	if len(ls) > 3 {
		ls = ls[len(ls)-3:]
	}
	return ": " + strings.Join(ls, " | ")
}

func (b *Sandbox) closeListeners() {
	for _, l := range b.listeners {
		l.Close()
	}
}

// killGroup asks the agent to SIGKILL a command's process group.
func (b *Sandbox) killGroup(pgid int) {
	b.ctlMu.Lock()
	defer b.ctlMu.Unlock()
	if b.ctl != nil {
		_ = b.ctl.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = fmt.Fprintf(b.ctl, "%s %d\n", wire.MsgKill, pgid)
	}
}

func (b *Sandbox) closedErr() error { return container.ClosedErr(b.id, b.done) }

// Stats implements sandbox.Sandbox from the container stats API (one
// sample, no waiting); OOM kills come from the container's memory cgroup,
// which dockerd does not report.
func (b *Sandbox) Stats(ctx context.Context) (sandbox.Stats, error) {
	if err := b.closedErr(); err != nil {
		return sandbox.Stats{}, err
	}
	res, err := b.rt.cli.ContainerStats(ctx, b.cid, client.ContainerStatsOptions{})
	if err != nil {
		return sandbox.Stats{}, fmt.Errorf("sandbox %s: stats: %w", b.id, err)
	}
	defer res.Body.Close()
	var s ctr.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		return sandbox.Stats{}, fmt.Errorf("sandbox %s: stats: %w", b.id, err)
	}
	st := sandbox.Stats{
		MemoryBytes:     int64(s.MemoryStats.Usage),
		MemoryPeakBytes: int64(s.MemoryStats.MaxUsage),
		CPUUsage:        time.Duration(s.CPUStats.CPUUsage.TotalUsage),
		Pids:            int64(s.PidsStats.Current),
		OOMKills:        b.oomKills(),
	}
	if st.MemoryPeakBytes < st.MemoryBytes {
		st.MemoryPeakBytes = st.MemoryBytes // cgroup v2 has no peak in the stats API
	}
	return st, nil
}

// oomFile finds the host file that counts the container's OOM kills: its
// memory cgroup's memory.oom_control (v1) or memory.events (v2), located
// through its pid 1's /proc/<pid>/cgroup, and that pid. The file is ""
// when not readable (a daemon in another cgroup namespace); OOMKilled is
// then never set.
func (r *Runtime) oomFile(ctx context.Context, cid string) (string, int) {
	in, err := r.cli.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
	if err != nil || in.Container.State == nil || in.Container.State.Pid <= 0 {
		return "", 0
	}
	pid := in.Container.State.Pid
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", pid
	}
	var v1, v2 string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.SplitN(line, ":", 3)
		switch {
		case len(f) != 3:
		case f[0] == "0" && f[1] == "":
			v2 = filepath.Join("/sys/fs/cgroup", f[2], "memory.events")
		case strings.Contains(","+f[1]+",", ",memory,"):
			v1 = filepath.Join("/sys/fs/cgroup/memory", f[2], "memory.oom_control")
		}
	}
	for _, p := range []string{v1, v2} {
		if _, err := os.Stat(p); p != "" && err == nil {
			return p, pid
		}
	}
	return "", pid
}

// oomKills reads the container's OOM kill count.
func (b *Sandbox) oomKills() int64 {
	if b.oom == "" {
		return 0
	}
	data, err := os.ReadFile(b.oom)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// Destroy implements sandbox.Sandbox: the agent's connection closes (pid 1
// exits, and every other process of the container with it), dockerd
// removes the container with its cgroup, tmpfs mounts and anonymous
// volumes, and the state directory goes last.
func (b *Sandbox) Destroy(ctx context.Context) error {
	b.destroyOnce.Do(func() {
		b.closeListeners()
		b.ctlMu.Lock()
		if b.ctl != nil {
			b.ctl.Close()
		}
		b.ctlMu.Unlock()
		var errs []error
		if err := b.rt.removeContainer(ctx, b.cid); err != nil {
			errs = append(errs, err)
		}
		if err := os.RemoveAll(b.st.dir); err != nil {
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			b.destroyErr = fmt.Errorf("sandbox %s: %w", b.id, errors.Join(errs...))
		}
		b.markDone()
		b.rt.mu.Lock()
		delete(b.rt.boxes, b.id)
		b.rt.mu.Unlock()
	})
	return b.destroyErr
}

package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/container"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// Sandbox is one Docker container: the helper's agent as its pid 1,
// commands and file operations started through the exec API (package
// container does the rest). It is safe for concurrent use.
type Sandbox struct {
	*container.Sandbox
	box *box
}

var _ sandbox.Sandbox = (*Sandbox)(nil)

// ContainerID is the Docker container's ID (for tests and diagnostics).
func (b *Sandbox) ContainerID() string { return b.box.cid }

// StateDir is the sandbox's host state directory (for tests).
func (b *Sandbox) StateDir() string { return b.box.st.dir }

// box is one sandbox's container (container.Container).
type box struct {
	rt   *Runtime
	id   string
	cid  string // the container's ID
	spec sandbox.Spec
	seal *seal.Seal
	st   state
	oom  string // host file counting the container's OOM kills; "" if unknown
	pid  int    // host pid of the container's pid 1 (the agent); 0 if unknown
}

// Prepare implements container.Backend: the sandbox's state directory and
// its container, created, not started.
func (r *Runtime) Prepare(ctx context.Context, c container.Config) (_ container.Container, retErr error) {
	x := &box{rt: r, id: c.ID, spec: c.Spec, seal: c.Seal, st: state{dir: filepath.Join(r.bundles, c.ID), gate: c.Gate}}
	defer func() {
		if retErr != nil {
			_ = x.Teardown(context.WithoutCancel(ctx))
		}
	}()
	cid, err := r.createContainer(ctx, c.ID, x.st, c.Spec, c.Seal, r.Owner(), append([]string{wire.HelperPath, wire.ModeAgent}, c.AgentArgs...))
	if err != nil {
		return nil, err
	}
	x.cid = cid
	return x, nil
}

func (x *box) SockDir() string { return x.st.sockDir() }
func (x *box) InitPid() int    { return x.pid }

// Env is the container's environment (seal.BaseEnv), with the HOSTNAME
// dockerd adds to it.
func (x *box) Env() []string {
	return seal.MergeEnv(seal.BaseEnv, []string{"HOSTNAME=" + x.spec.Hostname})
}

// Diag is ": <the last lines pid 1 wrote>" or "".
func (x *box) Diag() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	o, e := x.rt.logs(ctx, x.cid)
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

// Start starts the container; failed reports its pid 1 exiting while ctx
// lasts.
func (x *box) Start(ctx context.Context) (<-chan error, error) {
	wait, err := x.rt.cli.ContainerWait(ctx, x.cid, "next-exit")
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: waiting for the container: %w", x.id, err)
	}
	if err := x.rt.cli.ContainerStart(ctx, x.cid); err != nil {
		if herr := sandbox.HostExhaustedText("starting the container", err.Error()); herr != nil {
			return nil, herr
		}
		return nil, fmt.Errorf("%w: starting the container: %v", sandbox.ErrUnsupported, err)
	}
	failed := make(chan error, 1)
	go func() {
		res := <-wait
		if res.Err != nil {
			failed <- fmt.Errorf("sandbox %s: waiting for the container: %w", x.id, res.Err)
			return
		}
		failed <- fmt.Errorf("%w: the sandbox's agent exited %d during start%s", sandbox.ErrUnsupported, res.StatusCode, x.Diag())
	}()
	return failed, nil
}

// Started finds pid 1's host pid and the file counting the container's
// OOM kills, and lowers pid 1's oom_score_adj where the host lets the
// daemon (not HostConfig.OomScoreAdj: a dockerd without CAP_SYS_RESOURCE
// would refuse to start the container).
func (x *box) Started(ctx context.Context, sb *container.Sandbox) error {
	x.oom, x.pid = x.rt.oomFile(ctx, x.cid)
	x.rt.LowerInitOOM(x.pid, "dockerd's")
	return nil
}

// Stats reads the container stats API (one sample, no waiting); OOM kills
// come from the container's memory cgroup, which dockerd does not report.
func (x *box) Stats(ctx context.Context) (sandbox.Stats, error) {
	s, err := x.rt.cli.ContainerStats(ctx, x.cid)
	if err != nil {
		return sandbox.Stats{}, fmt.Errorf("sandbox %s: stats: %w", x.id, err)
	}
	st := sandbox.Stats{
		MemoryBytes:     int64(s.MemoryStats.Usage),
		MemoryPeakBytes: int64(s.MemoryStats.MaxUsage),
		CPUUsage:        time.Duration(s.CPUStats.CPUUsage.TotalUsage),
		Pids:            int64(s.PidsStats.Current),
		OOMKills:        x.OOMKills(),
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
	in, err := r.cli.ContainerInspect(ctx, cid)
	if err != nil || in.State == nil || in.State.Pid <= 0 {
		return "", 0
	}
	pid := in.State.Pid
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

// OOMKills reads the container's OOM kill count.
func (x *box) OOMKills() int64 {
	if x.oom == "" {
		return 0
	}
	data, err := os.ReadFile(x.oom)
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

// Teardown has dockerd remove the container with its cgroup, tmpfs mounts
// and anonymous volumes; the state directory goes last.
func (x *box) Teardown(ctx context.Context) error {
	var errs []error
	if x.cid != "" {
		if err := x.rt.removeContainer(ctx, x.cid); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(x.st.dir); err != nil {
		errs = append(errs, err)
	}
	return joinErrs(errs)
}

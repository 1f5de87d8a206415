package container

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// ReadyTimeout bounds a sandbox start (runsc takes about a second, dockerd
// a little less), and each step of the agent's handshake.
const ReadyTimeout = 30 * time.Second

// Options configure a Runtime.
type Options struct {
	// Name is the backend's name (sandbox.Runtime.Name). Required.
	Name string
	// IDPrefix starts every sandbox id ("oci-", "dkr-"). Required.
	IDPrefix string
	// Backend makes the containers. Required.
	Backend Backend
	// NProcLimit: the pids limit is each command's RLIMIT_NPROC, set by
	// the exec front (gVisor, whose host pids cgroup also holds the
	// sentry), and an approved gated run copies its program readable
	// (gVisor refuses to exec an unreadable file).
	NProcLimit bool
	// Logf receives diagnostics; nil discards them.
	Logf func(format string, args ...any)
}

// Runtime is the skeleton of a container backend's sandbox.Runtime; the
// backend embeds it. It is safe for concurrent use; Close destroys every
// sandbox it still holds.
type Runtime struct {
	opts  Options
	owner string // "<pid>.<starttime>" of this process (sandbox.ProcessOwner)

	notesMu sync.Mutex
	noOOM   bool // logged that pid 1's oom_score_adj cannot be lowered

	mu     sync.Mutex
	boxes  map[string]*Sandbox
	closed bool
}

// NewRuntime returns the skeleton for a backend.
func NewRuntime(opts Options) (*Runtime, error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	owner, err := sandbox.ProcessOwner(os.Getpid())
	if err != nil {
		return nil, err
	}
	return &Runtime{opts: opts, owner: owner, boxes: map[string]*Sandbox{}}, nil
}

// Name implements sandbox.Runtime.
func (r *Runtime) Name() string { return r.opts.Name }

// Owner is this process's owner record, which the backend writes beside
// (or onto) everything it leaves on the host.
func (r *Runtime) Owner() string { return r.owner }

// Logf logs a diagnostic.
func (r *Runtime) Logf(format string, args ...any) { r.opts.Logf(format, args...) }

// Create makes a sandbox for spec: its container, with the agent as pid 1
// ready on its control connection. Nothing is left behind on error.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (_ *Sandbox, retErr error) {
	spec = spec.WithDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if r.isClosed() {
		return nil, sandbox.ErrClosed
	}
	sl, err := seal.New(spec)
	if err != nil {
		return nil, err
	}
	plan, err := PlanGate(spec, sl)
	if err != nil {
		return nil, err
	}
	defer plan.Close()
	id := r.opts.IDPrefix + RandHex(8)
	b := &Sandbox{id: id, spec: spec, seal: sl, rt: r, listeners: map[uint16]net.Listener{}, done: make(chan struct{})}
	if plan != nil {
		b.gateSock = GateSock()
	}
	var args []string
	for _, p := range spec.Network.ExposedTCP {
		args = append(args, strconv.Itoa(int(p)))
	}
	c, err := r.opts.Backend.Prepare(ctx, Config{ID: id, Spec: spec, Seal: sl, Gate: plan, AgentArgs: args})
	if err != nil {
		return nil, err
	}
	b.c = c
	defer func() {
		if retErr == nil {
			return
		}
		b.closeListeners()
		b.closeCtl()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		if err := c.Teardown(dctx); err != nil {
			r.Logf("%s: removing the container after a failed create: %v", id, err)
		}
		b.markDone()
	}()

	ctlL, err := ListenUnix(filepath.Join(c.SockDir(), wire.CtlSock))
	if err != nil {
		return nil, err
	}
	defer ctlL.Close()
	for _, p := range spec.Network.ExposedTCP {
		l, err := ListenUnix(filepath.Join(c.SockDir(), wire.PortSock(p)))
		if err != nil {
			return nil, fmt.Errorf("exposed port %d: %w", p, err)
		}
		b.listeners[p] = l
	}
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	defer scancel()
	failed, err := c.Start(sctx)
	if err != nil {
		return nil, err
	}

	acc := AcceptOne(ctlL)
	timer := time.NewTimer(ReadyTimeout)
	defer timer.Stop()
	var ctl net.Conn
	for ctl == nil {
		select {
		case a := <-acc:
			if a.Err != nil {
				return nil, fmt.Errorf("sandbox %s: waiting for the agent: %w", id, a.Err)
			}
			ctl = a.Conn
		case err := <-failed:
			return nil, err
		case <-timer.C:
			return nil, fmt.Errorf("sandbox %s: the agent did not connect within %v%s", id, ReadyTimeout, c.Diag())
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// One connection only: from here on nothing can connect in the agent's
	// place (the socket file goes with the listener).
	ctlL.Close()
	b.ctlMu.Lock()
	b.ctl = ctl
	b.ctlMu.Unlock()
	if err := SendGate(ctl, plan, b.gateSock); err != nil {
		return nil, err
	}
	rd, err := AgentReady(ctl, id, ReadyTimeout, c.Diag)
	if err != nil {
		return nil, err
	}
	if err := c.Started(ctx, b); err != nil {
		return nil, err
	}
	go func() {
		// The agent never speaks again: EOF means pid 1 is gone.
		_, _ = rd.WriteTo(discard{})
		b.markDone()
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, sandbox.ErrClosed
	}
	r.boxes[id] = b
	return b, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func (r *Runtime) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Close destroys every sandbox still held; later Creates fail.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	boxes := slices.Collect(maps.Values(r.boxes))
	r.mu.Unlock()
	return sandbox.DestroyAll(ctx, boxes)
}

// LowerInitOOM lowers pid 1's oom_score_adj (sandbox.LowerInitOOMScore),
// where the host lets the daemon (CAP_SYS_RESOURCE); commands raise their
// own to sandbox.WorkloadOOMScoreAdj as they start (the exec front), so
// the OOM killer takes the workload first either way. A refusal is logged
// once, naming whose score pid 1 keeps, and not tried again.
func (r *Runtime) LowerInitOOM(pid int, keeps string) {
	r.notesMu.Lock()
	refused := r.noOOM // a host that refused once refuses every time
	r.notesMu.Unlock()
	if pid <= 0 || refused {
		return
	}
	if err := sandbox.LowerInitOOMScore(pid); err != nil {
		r.notesMu.Lock()
		defer r.notesMu.Unlock()
		if !r.noOOM {
			r.noOOM = true
			r.Logf("pid 1 of each sandbox keeps %s oom_score_adj (%v); commands still start at %d, above it", keeps, err, sandbox.WorkloadOOMScoreAdj)
		}
	}
}

// OwnerFile is the name of the owner record in a sandbox's state
// directory.
const OwnerFile = "owner"

// WriteOwner records this runtime as the owner of a sandbox's state
// directory dir.
func (r *Runtime) WriteOwner(dir string) error { return WriteOwnerFile(dir, r.owner) }

// WriteOwnerFile records owner (sandbox.ProcessOwner) as the owner of the
// state directory dir.
func WriteOwnerFile(dir, owner string) error {
	return os.WriteFile(filepath.Join(dir, OwnerFile), []byte(owner), 0o600)
}

// CollectDirs removes the sandbox state directories under parent whose
// owner (WriteOwner) is gone, calling first, for each, remove with its
// name (the sandbox id), to remove what else it left (its container, its
// cgroups). A live owner's are never touched; a directory without an
// owner record younger than a minute is being made and is left too.
func (r *Runtime) CollectDirs(parent string, remove func(id string)) {
	des, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, de := range des {
		dir := filepath.Join(parent, de.Name())
		if owner, err := os.ReadFile(filepath.Join(dir, OwnerFile)); err == nil {
			if sandbox.OwnerAlive(string(owner)) {
				continue
			}
		} else if info, serr := de.Info(); serr == nil && time.Since(info.ModTime()) < time.Minute {
			continue // being written right now
		}
		if remove != nil {
			remove(de.Name())
		}
		if err := os.RemoveAll(dir); err != nil {
			r.Logf("removing leftover state %s: %v", dir, err)
			continue
		}
		r.Logf("collected leftover sandbox %s", de.Name())
	}
}

// ProbeSpec is the spec of a backend's probe container (a short run of
// the helper's probe mode, wire.ParseProbe): small, fully sealed.
func ProbeSpec() sandbox.Spec {
	return sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 64 << 20, Pids: 16, WorkspaceBytes: 1 << 20, TmpBytes: 1 << 20}}.WithDefaults()
}

// ResolveExe is the ironclaw binary to bind into sandboxes as the helper:
// exe, or this executable when exe is "".
func ResolveExe(exe string) (string, error) {
	if exe != "" {
		return exe, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding the ironclaw binary: %w", err)
	}
	return exe, nil
}

// StateDir is dir, or def when dir is ""; it must be absolute (an error
// wrapping sandbox.ErrInvalidSpec).
func StateDir(dir, def string) (string, error) {
	if dir == "" {
		dir = def
	}
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("%w: state directory %q must be absolute", sandbox.ErrInvalidSpec, dir)
	}
	return filepath.Clean(dir), nil
}

package container

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// Sandbox is one container sandbox: the agent as its pid 1, commands and
// file operations started through its Container. The backends embed it.
// It is safe for concurrent use.
type Sandbox struct {
	id   string
	spec sandbox.Spec
	seal *seal.Seal
	rt   *Runtime
	c    Container

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

// Spec is the sandbox's spec, with its defaults.
func (b *Sandbox) Spec() sandbox.Spec { return b.spec }

// Seal is the sandbox's seal.
func (b *Sandbox) Seal() *seal.Seal { return b.seal }

// Container is the backend's part of the sandbox.
func (b *Sandbox) Container() Container { return b.c }

// Done implements sandbox.Sandbox: closed when the agent (the container's
// pid 1) is gone, or the sandbox was destroyed.
func (b *Sandbox) Done() <-chan struct{} { return b.done }

// InitPid is the host pid of the sandbox's pid 1 (for tests and
// diagnostics); 0 if unknown.
func (b *Sandbox) InitPid() int { return b.c.InitPid() }

// Listener implements sandbox.Sandbox. Whatever the caller serves on it is
// reachable inside at 127.0.0.1:port: the agent listens there and splices
// each connection to this unix socket. Nothing outside the sandbox can
// reach the port, and the sandbox gets no network interface for it.
func (b *Sandbox) Listener(port uint16) (net.Listener, bool) {
	l, ok := b.listeners[port]
	return l, ok
}

func (b *Sandbox) markDone() { b.doneOnce.Do(func() { close(b.done) }) }

func (b *Sandbox) closeListeners() {
	for _, l := range b.listeners {
		l.Close()
	}
}

func (b *Sandbox) closeCtl() {
	b.ctlMu.Lock()
	defer b.ctlMu.Unlock()
	if b.ctl != nil {
		b.ctl.Close()
	}
}

// TellAgent sends one control line to the agent (see package wire).
func (b *Sandbox) TellAgent(line string) {
	b.ctlMu.Lock()
	defer b.ctlMu.Unlock()
	if b.ctl != nil {
		_ = b.ctl.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(b.ctl, line+"\n")
	}
}

// killGroup asks the agent to SIGKILL a command's process group.
func (b *Sandbox) killGroup(pgid int) { b.TellAgent(fmt.Sprintf("%s %d", wire.MsgKill, pgid)) }

func (b *Sandbox) closedErr() error { return sandbox.ClosedErr(b.id, b.done) }

// nproc is the RLIMIT_NPROC the exec front gives a command: the Spec's
// pids limit where it is enforced that way (Options.NProcLimit), else 0.
func (b *Sandbox) nproc() int64 {
	if b.rt.opts.NProcLimit {
		return b.spec.Limits.Pids
	}
	return 0
}

// Exec implements sandbox.Sandbox. The command starts through the helper's
// exec front (see package wire), which gives it a session of its own and
// reports its pid or why it could not start; on timeout or cancellation the
// agent kills its process group.
func (b *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	params, err := CheckExec(req, b.spec, b.rt.Name())
	if err != nil {
		return res, err
	}
	if err := b.closedErr(); err != nil {
		return res, err
	}
	nonce := RandHex(8)
	env := seal.MergeEnv(b.c.Env(), b.spec.Env, req.Env)
	argv, disarm, err := b.execArgv(nonce, params, req, env)
	if err != nil {
		return res, err
	}
	defer disarm()

	oomBefore := b.c.OOMKills()
	out := sandbox.NewOutputCap(params.OutputBytes)
	front := NewFront(nonce, out.Writer(req.Stderr, &res.StderrBytes))
	stdout := out.Writer(req.Stdout, &res.StdoutBytes)
	if req.Started != nil {
		// Started comes before any output: stdout travels apart from the
		// header on stderr and waits for it.
		front.OnStarted(req.Started)
		stdout = front.Hold(stdout)
	}
	p, err := b.c.Run(ctx, Proc{Argv: argv, Env: env, Command: true, Stdin: req.Stdin, Stdout: stdout, Stderr: front})
	if err != nil {
		if cerr := b.closedErr(); cerr != nil {
			return res, cerr
		}
		return res, err
	}
	start := time.Now()
	ctxErr, err := front.Wait(ctx, Watch{
		ID:        b.id,
		Timeout:   params.Timeout,
		Exited:    p.Exited(),
		Closed:    b.done,
		KillGroup: b.killGroup,
		Abort:     p.Abort,
	}, &res)
	if err != nil {
		return res, err
	}
	res.Duration = time.Since(start)
	exit := p.Wait()
	front.Finish()
	res.Truncated = out.Truncated()
	res.ExitCode = exit.Code

	h, runtimeOut := front.Result()
	switch {
	case h != nil && !h.Started:
		// The front could not start the command (before or at execve).
		return wire.StartError(h.Code, h.Text)
	case h == nil:
		if err := b.closedErr(); err != nil {
			return res, err
		}
		if ctxErr != nil {
			return res, ctxErr
		}
		if exit.Err != nil {
			return res, exit.Err
		}
		return res, fmt.Errorf("sandbox %s: %s exec failed (exit %d): %s", b.id, b.rt.Name(), res.ExitCode, strings.TrimSpace(runtimeOut))
	}
	if exit.Err != nil {
		return res, exit.Err
	}
	if b.c.OOMKills() > oomBefore {
		res.OOMKilled = true
	}
	// Runtimes report a killed process the shell's way (128+N); the
	// signal itself is only known when we sent it, or the OOM killer did.
	MarkKilled(&res, ctxErr != nil)
	return res, ctxErr
}

// execArgv is the helper invocation for req: the exec front, or, for an
// approved exec of a gated program (req.Gate), the gate front once the
// agent is armed with the run (env is what the command sees). disarm is
// called when the exec has ended.
func (b *Sandbox) execArgv(nonce string, params sandbox.ExecParams, req sandbox.ExecRequest, env []string) (argv []string, disarm func(), err error) {
	if req.Gate == "" || b.gateSock == "" {
		return ExecArgv(nonce, b.nproc(), params.Cwd, req.Argv), func() {}, nil
	}
	arm, dis, err := ArmLine(nonce, wire.Armed{Key: req.Gate, Argv: req.Argv, Cwd: params.Cwd, Env: env,
		NProc: uint64(b.nproc()), Readable: b.rt.opts.NProcLimit})
	if err != nil {
		return nil, nil, err
	}
	b.TellAgent(arm)
	return GateExecArgv(nonce, b.gateSock), func() { b.TellAgent(dis) }, nil
}

// fileOp runs one of the helper's file modes inside the sandbox (never a
// runtime's or dockerd's own copy, which would run as root), with the
// same identity and confinement as a command.
func (b *Sandbox) fileOp(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if err := b.closedErr(); err != nil {
		return err
	}
	stderr := &LimitedBuffer{Max: 64 << 10}
	if stdout == nil {
		stdout = io.Discard
	}
	p, err := b.c.Run(ctx, Proc{Argv: append([]string{wire.HelperPath}, args...), Stdin: stdin, Stdout: stdout, Stderr: stderr})
	if err != nil {
		if cerr := b.closedErr(); cerr != nil {
			return cerr
		}
		return err
	}
	stop := context.AfterFunc(ctx, p.Abort)
	<-p.Exited()
	stop()
	exit := p.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	switch {
	case exit.Err != nil:
		return exit.Err
	case exit.Code == 0 && exit.IO == nil:
		return nil
	case exit.Code == 0:
		return fmt.Errorf("sandbox %s: %s: %w", b.id, args[0], exit.IO)
	case exit.Code == wire.FileFailed:
		if err := wire.ParseFileError(stderr.Bytes()); err != nil {
			return err
		}
	}
	if err := b.closedErr(); err != nil {
		return err
	}
	return fmt.Errorf("sandbox %s: %s: exit %d: %s", b.id, args[0], exit.Code, strings.TrimSpace(stderr.String()))
}

// WriteFile implements sandbox.Sandbox.
func (b *Sandbox) WriteFile(ctx context.Context, p string, src io.Reader, mode fs.FileMode) error {
	return WriteFile(ctx, b.fileOp, p, src, mode)
}

// ReadFile implements sandbox.Sandbox.
func (b *Sandbox) ReadFile(ctx context.Context, p string, dst io.Writer) error {
	return ReadFile(ctx, b.fileOp, p, dst)
}

// ListDir implements sandbox.Sandbox.
func (b *Sandbox) ListDir(ctx context.Context, p string) ([]sandbox.FileInfo, error) {
	return ListDir(ctx, b.fileOp, p)
}

// Stats implements sandbox.Sandbox.
func (b *Sandbox) Stats(ctx context.Context) (sandbox.Stats, error) {
	if err := b.closedErr(); err != nil {
		return sandbox.Stats{}, err
	}
	return b.c.Stats(ctx)
}

// Destroy implements sandbox.Sandbox: the agent's connection closes (pid 1
// exits, and every other process of the sandbox with it), the backend
// removes the container with its cgroup and host state. It is idempotent.
func (b *Sandbox) Destroy(ctx context.Context) error {
	b.destroyOnce.Do(func() {
		b.closeListeners()
		b.closeCtl()
		if err := b.c.Teardown(ctx); err != nil {
			b.destroyErr = fmt.Errorf("sandbox %s: %w", b.id, err)
		}
		b.markDone()
		b.rt.mu.Lock()
		delete(b.rt.boxes, b.id)
		b.rt.mu.Unlock()
	})
	return b.destroyErr
}

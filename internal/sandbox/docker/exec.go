package docker

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/container"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
)

// inspectGrace bounds the wait for dockerd to record an exec's exit code
// after its stream ended.
const inspectGrace = 5 * time.Second

// attached is one running exec with its multiplexed stream.
type attached struct {
	id   string
	conn client.HijackedResponse
}

// attach creates and starts an exec of cmd as the sandbox user and
// attaches to its stdout and stderr (and stdin when withStdin). Every exec
// runs with the container's seal: dockerd starts it from the container's
// own process spec (capabilities, no_new_privs, seccomp, rlimits), with
// the user given here.
func (b *Sandbox) attach(ctx context.Context, cmd, env []string, withStdin bool) (*attached, error) {
	ctx = context.WithoutCancel(ctx) // the caller's cancellation is handled by killing, not by dropping the request
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	ex, err := b.rt.cli.ExecCreate(ctx, b.cid, client.ExecCreateOptions{
		User:         user,
		AttachStdin:  withStdin,
		AttachStdout: true,
		AttachStderr: true,
		Env:          env,
		WorkingDir:   "/",
		Cmd:          cmd,
	})
	if err != nil {
		if cerr := b.closedErr(); cerr != nil {
			return nil, cerr
		}
		return nil, fmt.Errorf("sandbox %s: creating the exec: %w", b.id, err)
	}
	res, err := b.rt.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		if cerr := b.closedErr(); cerr != nil {
			return nil, cerr
		}
		return nil, fmt.Errorf("sandbox %s: starting the exec: %w", b.id, err)
	}
	return &attached{id: ex.ID, conn: res.HijackedResponse}, nil
}

// feed copies r to the exec's stdin and then closes it (a half-close
// dockerd passes on as end of file).
func (a *attached) feed(r io.Reader) {
	_, _ = io.Copy(a.conn.Conn, r)
	_ = a.conn.CloseWrite()
}

// exitCode waits for dockerd to record the exec's exit and returns it.
func (b *Sandbox) exitCode(id string) (int, error) {
	deadline := time.Now().Add(inspectGrace)
	for delay := 2 * time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), inspectGrace)
		in, err := b.rt.cli.ExecInspect(ctx, id, client.ExecInspectOptions{})
		cancel()
		if err != nil {
			return -1, fmt.Errorf("sandbox %s: inspecting the exec: %w", b.id, err)
		}
		if !in.Running {
			return in.ExitCode, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("sandbox %s: the exec's stream ended but dockerd still reports it running", b.id)
		}
		time.Sleep(delay)
	}
}

// Exec implements sandbox.Sandbox. The command starts through the helper's
// exec front (see wire.Marker), which gives it a session of its own and
// reports its pid or why it could not start; on timeout or cancellation the
// agent kills its process group.
func (b *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	params, err := container.CheckExec(req, b.spec, b.rt.name)
	if err != nil {
		return res, err
	}
	if err := b.closedErr(); err != nil {
		return res, err
	}

	nonce := container.RandHex(8)
	oomBefore := b.oomKills()
	// The container's environment (container.BaseEnv) is under these;
	// dockerd replaces or appends by key.
	env := container.MergeEnv(b.spec.Env, req.Env)
	// nproc: the command's RLIMIT_NPROC. Under runsc that is how the pids
	// limit is enforced (see config.go); elsewhere the container's pids
	// cgroup is, and the front sets none.
	var nproc int64
	if b.rt.runsc {
		nproc = b.spec.Limits.Pids
	}
	argv, disarm, err := b.execArgv(nonce, nproc, params, req)
	if err != nil {
		return res, err
	}
	defer disarm()
	a, err := b.attach(ctx, argv, env, req.Stdin != nil)
	if err != nil {
		return res, err
	}
	start := time.Now()
	defer a.conn.Close()
	if req.Stdin != nil {
		go a.feed(req.Stdin)
	}

	out := container.NewCapped(params.OutputBytes)
	front := container.NewFront(nonce, out.Writer(req.Stderr, &res.StderrBytes))
	streamDone := make(chan struct{})
	go func() {
		defer close(streamDone)
		_, _ = stdcopy.StdCopy(out.Writer(req.Stdout, &res.StdoutBytes), front, a.conn.Reader)
		front.Finish()
	}()

	ctxErr, err := front.Wait(ctx, container.Watch{
		ID:        b.id,
		Timeout:   params.Timeout,
		Exited:    streamDone,
		Closed:    b.done,
		KillGroup: b.killGroup,
		Abort:     func() { a.conn.Close() },
	}, &res)
	if err != nil {
		return res, err
	}
	res.Duration = time.Since(start)
	res.Truncated = out.Truncated()
	code, ierr := b.exitCode(a.id)
	res.ExitCode = code

	h, runtimeOut := front.Result()
	switch {
	case h != nil && !h.Started:
		// The front could not start the command (before or at execve).
		return startFailure(*h)
	case h == nil:
		if err := b.closedErr(); err != nil {
			return res, err
		}
		if ctxErr != nil {
			return res, ctxErr
		}
		if ierr != nil {
			return res, ierr
		}
		return res, fmt.Errorf("sandbox %s: docker exec failed (exit %d): %s", b.id, res.ExitCode, strings.TrimSpace(runtimeOut))
	}
	if ierr != nil {
		return res, ierr
	}
	if b.oomKills() > oomBefore {
		res.OOMKilled = true
	}
	// dockerd reports a killed process the shell's way (128+N); the signal
	// itself is only known when we sent it, or the OOM killer did.
	container.MarkKilled(&res, ctxErr != nil)
	return res, ctxErr
}

// startFailure is container.StartFailure.
func startFailure(h wire.Header) (sandbox.ExecResult, error) { return container.StartFailure(h) }

// fileOp runs one of the helper's file modes inside the sandbox through
// the exec API, with the same identity and confinement as a command (never
// `docker cp`, which dockerd performs as root).
func (b *Sandbox) fileOp(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if err := b.closedErr(); err != nil {
		return err
	}
	a, err := b.attach(ctx, append([]string{wire.HelperPath}, args...), nil, stdin != nil)
	if err != nil {
		return err
	}
	defer a.conn.Close()
	stop := context.AfterFunc(ctx, func() { a.conn.Close() })
	defer stop()
	if stdin != nil {
		go a.feed(stdin)
	}
	stderr := &container.LimitedBuffer{Max: 64 << 10}
	if stdout == nil {
		stdout = io.Discard
	}
	_, cerr := stdcopy.StdCopy(stdout, stderr, a.conn.Reader)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	code, err := b.exitCode(a.id)
	if err != nil {
		return err
	}
	switch {
	case code == 0 && cerr == nil:
		return nil
	case code == 0:
		return fmt.Errorf("sandbox %s: %s: %w", b.id, args[0], cerr)
	case code == wire.FileFailed:
		if err := container.FileOpError(stderr.Bytes()); err != nil {
			return err
		}
	}
	if err := b.closedErr(); err != nil {
		return err
	}
	return fmt.Errorf("sandbox %s: %s: exit %d: %s", b.id, args[0], code, strings.TrimSpace(stderr.String()))
}

// WriteFile implements sandbox.Sandbox.
func (b *Sandbox) WriteFile(ctx context.Context, p string, src io.Reader, mode fs.FileMode) error {
	return container.WriteFile(ctx, b.fileOp, p, src, mode)
}

// ReadFile implements sandbox.Sandbox.
func (b *Sandbox) ReadFile(ctx context.Context, p string, dst io.Writer) error {
	return container.ReadFile(ctx, b.fileOp, p, dst)
}

// ListDir implements sandbox.Sandbox.
func (b *Sandbox) ListDir(ctx context.Context, p string) ([]sandbox.FileInfo, error) {
	return container.ListDir(ctx, b.fileOp, p)
}

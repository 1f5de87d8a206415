package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/container"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// drainGrace bounds how long output is read after the command exited: a
// process it left behind may hold the pipes open.
const drainGrace = 200 * time.Millisecond

// execArgs are the runtime's arguments to run process file p in the
// container. All three runtimes take a full process.json, so every exec
// carries the same seal as the agent (user, capabilities, no_new_privs,
// rlimits) instead of inheriting defaults.
func (b *Sandbox) execArgs(p string) []string {
	if b.split {
		return []string{"exec", "--cgroup", "pids:" + workloadCgroup, "--process", p, b.id}
	}
	return []string{"exec", "--process", p, b.id}
}

// newProcessFile writes a process.json into the bundle's exec directory
// and returns its path; the caller removes it.
func (b *Sandbox) newProcessFile(args, env []string) (string, error) {
	p := filepath.Join(b.b.execDir(), container.RandHex(8)+".json")
	if err := writeProcess(p, sealedProcess(args, env, "/", b.spec.Limits)); err != nil {
		return "", err
	}
	return p, nil
}

// nproc is the RLIMIT_NPROC the exec front gives a command: on runsc the
// Spec's pids limit is enforced inside the sentry this way (see
// runscHostPidsOverhead); on runc and crun the pids cgroup does it (0).
//
// The command gets it, soft and hard, from its first instruction through
// the helper's limit trampoline (wire.ModeLimit), which the front forks
// and which execve's the command. Neither the agent nor the front may
// have it: they are Go programs, fatally hurt by a refused thread, and
// runsc (2022-12) gives every exec'd process the very rlimit set of the
// container's process, ignoring process.json's, so a limit on the agent
// or a setrlimit in a front would bind them all.
func (b *Sandbox) nproc() int64 {
	if b.rt.opts.Runtime == Runsc {
		return b.spec.Limits.Pids
	}
	return 0
}

func (b *Sandbox) closedErr() error { return container.ClosedErr(b.id, b.done) }

// Exec implements sandbox.Sandbox. The command starts through the helper's
// exec front (see wire.Marker), which gives it a session of its own and
// reports its pid or why it could not start; on timeout or cancellation the
// agent kills its process group.
func (b *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	var res sandbox.ExecResult
	params, err := container.CheckExec(req, b.spec, b.rt.opts.Runtime)
	if err != nil {
		return res, err
	}
	if err := b.closedErr(); err != nil {
		return res, err
	}

	nonce := container.RandHex(8)
	argv, disarm, err := b.execArgv(nonce, params, req)
	if err != nil {
		return res, err
	}
	defer disarm()
	pfile, err := b.newProcessFile(argv, container.MergeEnv(container.BaseEnv, b.spec.Env, req.Env))
	if err != nil {
		return res, err
	}
	defer os.Remove(pfile)

	outR, outW, err := os.Pipe()
	if err != nil {
		return res, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		return res, err
	}
	var stdinR, stdinW *os.File
	if req.Stdin != nil {
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			closeAll(outR, outW, errR, errW)
			return res, err
		}
	}
	oomBefore := b.oomCount()
	cmd := b.rt.command(b.execArgs(pfile)...)
	cmd.Stdout, cmd.Stderr = outW, errW
	if stdinR != nil {
		cmd.Stdin = stdinR
	}
	err = cmd.Start()
	closeAll(outW, errW, stdinR)
	if err != nil {
		closeAll(outR, errR, stdinW)
		return res, fmt.Errorf("starting %s exec: %w", b.rt.opts.Runtime, err)
	}
	start := time.Now()
	defer closeAll(outR, errR)
	if stdinW != nil {
		go func() {
			_, _ = io.Copy(stdinW, req.Stdin)
			stdinW.Close()
		}()
		defer stdinW.Close()
	}

	out := container.NewCapped(params.OutputBytes)
	front := container.NewFront(nonce, out.Writer(req.Stderr, &res.StderrBytes))
	var copiers sync.WaitGroup
	copiers.Add(2)
	go func() {
		defer copiers.Done()
		w := out.Writer(req.Stdout, &res.StdoutBytes)
		if _, err := io.Copy(w, outR); errors.Is(err, os.ErrDeadlineExceeded) {
			drainNow(outR, w)
		}
	}()
	go func() {
		defer copiers.Done()
		if _, err := io.Copy(front, errR); errors.Is(err, os.ErrDeadlineExceeded) {
			drainNow(errR, front)
		}
		front.Finish()
	}()
	var werr error
	exited := make(chan struct{})
	go func() {
		werr = cmd.Wait()
		close(exited)
	}()

	ctxErr, err := front.Wait(ctx, container.Watch{
		ID:        b.id,
		Timeout:   params.Timeout,
		Exited:    exited,
		Closed:    b.done,
		KillGroup: b.killGroup,
		Abort:     func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) },
	}, &res)
	if err != nil {
		return res, err
	}
	res.Duration = time.Since(start)
	drainBy := time.Now().Add(drainGrace)
	_ = outR.SetReadDeadline(drainBy)
	_ = errR.SetReadDeadline(drainBy)
	copiers.Wait()
	res.Truncated = out.Truncated()
	res.ExitCode = exitCode(cmd.ProcessState, werr)

	h, runtimeOut := front.Result()
	switch {
	case h != nil && !h.Started:
		// The front could not start the command (before or at execve).
		return container.StartFailure(*h)
	case h == nil:
		if err := b.closedErr(); err != nil {
			return res, err
		}
		if ctxErr != nil {
			return res, ctxErr
		}
		return res, fmt.Errorf("sandbox %s: %s exec failed (exit %d): %s", b.id, b.rt.opts.Runtime, res.ExitCode, strings.TrimSpace(runtimeOut))
	}
	if b.oomCount() > oomBefore {
		res.OOMKilled = true
	}
	// OCI runtimes report a killed process the shell's way (128+N); the
	// signal itself is only known when we sent it, or the OOM killer did.
	container.MarkKilled(&res, ctxErr != nil)
	return res, ctxErr
}

// exitCode maps the runtime exec's own status to the command's.
func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		return 126
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// drainNow reads what a pipe holds right now, without waiting (at most
// 1 MiB: only a process that keeps writing could hold more).
func drainNow(f *os.File, w io.Writer) {
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		return
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	buf := make([]byte, 64<<10)
	for total := 0; total < 1<<20; {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.Read(int(fd), buf)
			return true // one attempt: never wait
		}); err != nil || rerr != nil || n <= 0 {
			return
		}
		_, _ = w.Write(buf[:n])
		total += n
	}
}

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// fileOp runs the helper's file mode inside the sandbox, with the same
// identity and confinement as a command.
func (b *Sandbox) fileOp(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if err := b.closedErr(); err != nil {
		return err
	}
	pfile, err := b.newProcessFile(append([]string{wire.HelperPath}, args...), agentEnv)
	if err != nil {
		return err
	}
	defer os.Remove(pfile)
	cmd := b.rt.command(b.execArgs(pfile)...)
	var stdinW *os.File
	if stdin != nil {
		var stdinR *os.File
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			return err
		}
		cmd.Stdin = stdinR
		defer stdinR.Close()
	}
	stderr := &container.LimitedBuffer{Max: 64 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		closeAll(stdinW)
		return fmt.Errorf("starting %s exec: %w", b.rt.opts.Runtime, err)
	}
	copyErr := make(chan error, 1)
	if stdinW != nil {
		go func() {
			_, err := io.Copy(stdinW, stdin)
			stdinW.Close()
			copyErr <- err
		}()
	} else {
		copyErr <- nil
	}
	stop := context.AfterFunc(ctx, func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		// On runsc the helper inside holds our pipes, not the runtime
		// process we just killed: it ends only when its stdin does (an
		// upload cut short, which changes nothing).
		if stdinW != nil {
			stdinW.Close()
		}
	})
	werr := cmd.Wait()
	stop()
	if stdinW != nil {
		stdinW.Close()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if werr == nil {
		if err := <-copyErr; err != nil {
			return fmt.Errorf("writing %s: %w", args[1], err)
		}
		return nil
	}
	var ee *exec.ExitError
	if errors.As(werr, &ee) && ee.ExitCode() == wire.FileFailed {
		if err := container.FileOpError(stderr.Bytes()); err != nil {
			return err
		}
	}
	if err := b.closedErr(); err != nil {
		return err
	}
	return fmt.Errorf("sandbox %s: %s: %v: %s", b.id, args[0], werr, strings.TrimSpace(stderr.String()))
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

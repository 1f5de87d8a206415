package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/container"
)

// drainGrace bounds how long a command's output is read after its exec
// ended: a process it left behind may hold the pipes open.
const drainGrace = 200 * time.Millisecond

// execArgs are the runtime's arguments to run process file p in the
// container. All three runtimes take a full process.json, so every exec
// carries the same seal as the agent (user, capabilities, no_new_privs,
// rlimits) instead of inheriting defaults.
func (x *box) execArgs(p string) []string {
	if x.split {
		return []string{"exec", "--cgroup", "pids:" + workloadCgroup, "--process", p, x.id}
	}
	return []string{"exec", "--process", p, x.id}
}

// Run implements container.Container: the runtime's exec of a
// process.json in the bundle's exec directory, with pipes of our own for
// the process's stdio.
func (x *box) Run(ctx context.Context, p container.Proc) (container.Process, error) {
	env := p.Env
	if env == nil {
		env = agentEnv // a file operation: the helper's own
	}
	pfile := filepath.Join(x.b.execDir(), container.RandHex(8)+".json")
	if err := writeProcess(pfile, sealedProcess(p.Argv, env, "/", x.seal)); err != nil {
		return nil, err
	}
	q := &proc{pfile: pfile, command: p.Command, exited: make(chan struct{}), copied: make(chan error, 1)}
	outR, outW, err := os.Pipe()
	if err != nil {
		q.cleanup()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(outR, outW)
		q.cleanup()
		return nil, err
	}
	var stdinR *os.File
	if p.Stdin != nil {
		if stdinR, q.stdinW, err = os.Pipe(); err != nil {
			closeAll(outR, outW, errR, errW)
			q.cleanup()
			return nil, err
		}
	}
	q.cmd = x.rt.command(x.execArgs(pfile)...)
	q.cmd.Stdout, q.cmd.Stderr = outW, errW
	if stdinR != nil {
		q.cmd.Stdin = stdinR
	}
	err = q.cmd.Start()
	closeAll(outW, errW, stdinR)
	if err != nil {
		closeAll(outR, errR, q.stdinW)
		q.cleanup()
		return nil, fmt.Errorf("starting %s exec: %w", x.rt.opts.Runtime, err)
	}
	q.outR, q.errR = outR, errR
	if q.stdinW != nil {
		go func() {
			_, err := io.Copy(q.stdinW, p.Stdin)
			q.stdinW.Close()
			q.copied <- err
		}()
	} else {
		q.copied <- nil
	}
	q.copiers.Add(2)
	go q.copyOut(p.Stdout, outR)
	go q.copyOut(p.Stderr, errR)
	go func() {
		q.werr = q.cmd.Wait()
		close(q.exited)
	}()
	return q, nil
}

// proc is one runtime exec (container.Process).
type proc struct {
	pfile   string
	command bool
	cmd     *exec.Cmd
	stdinW  *os.File
	outR    *os.File
	errR    *os.File
	copiers sync.WaitGroup
	copied  chan error // the stdin copy's result
	exited  chan struct{}
	werr    error // cmd.Wait's; set before exited closes
}

func (q *proc) Exited() <-chan struct{} { return q.exited }

// Abort kills the runtime's exec and everything it started on the host.
// On runsc the helper inside holds our pipes, not the runtime process:
// it ends when its stdin does (an upload cut short, which changes
// nothing).
func (q *proc) Abort() {
	_ = syscall.Kill(-q.cmd.Process.Pid, syscall.SIGKILL)
	if q.stdinW != nil {
		q.stdinW.Close()
	}
}

// Wait lets the output drain (a command's for drainGrace at most) and
// reports the exec's status; for a file operation that exited 0 it also
// waits for its input to have been copied.
func (q *proc) Wait() container.Exit {
	<-q.exited
	if q.command {
		by := time.Now().Add(drainGrace)
		_ = q.outR.SetReadDeadline(by)
		_ = q.errR.SetReadDeadline(by)
	}
	q.copiers.Wait()
	closeAll(q.outR, q.errR)
	q.cleanup()
	exit := container.Exit{Code: exitCode(q.cmd.ProcessState, q.werr)}
	if !q.command && exit.Code == 0 {
		if err := <-q.copied; err != nil {
			exit.IO = fmt.Errorf("writing: %w", err)
		}
	}
	return exit
}

func (q *proc) cleanup() { _ = os.Remove(q.pfile) }

// copyOut copies one output pipe until EOF or the drain deadline, then
// takes what the pipe holds right then.
func (q *proc) copyOut(w io.Writer, r *os.File) {
	defer q.copiers.Done()
	if _, err := io.Copy(w, r); errors.Is(err, os.ErrDeadlineExceeded) {
		sandbox.DrainPipe(r, w)
	}
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

func closeAll(fs ...*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

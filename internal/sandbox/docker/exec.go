package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox/container"
	"github.com/ironclaw/ironclaw/internal/sandbox/docker/engine"
)

// inspectGrace bounds the wait for dockerd to record an exec's exit code
// after its stream ended.
const inspectGrace = 5 * time.Second

// Run implements container.Container: an exec of the helper as the
// sandbox user, attached to its stdout and stderr (and stdin when there is
// one). Every exec runs with the container's seal: dockerd starts it from
// the container's own process spec (capabilities, no_new_privs, seccomp,
// rlimits), with the user given here.
func (x *box) Run(ctx context.Context, p container.Proc) (container.Process, error) {
	ctx = context.WithoutCancel(ctx) // the caller's cancellation is handled by Abort, not by dropping the request
	ctx, cancel := context.WithTimeout(ctx, container.ReadyTimeout)
	defer cancel()
	execID, err := x.rt.cli.ExecCreate(ctx, x.cid, engine.ExecConfig{
		User:         user(x.seal),
		AttachStdin:  p.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
		Env:          p.Env,
		WorkingDir:   "/",
		Cmd:          p.Argv,
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: creating the exec: %w", x.id, err)
	}
	conn, err := x.rt.cli.ExecAttach(ctx, execID, false)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: starting the exec: %w", x.id, err)
	}
	a := &attached{x: x, id: execID, conn: conn, done: make(chan struct{})}
	if p.Stdin != nil {
		go a.feed(p.Stdin)
	}
	go func() {
		defer close(a.done)
		_, a.ioErr = a.conn.Output(p.Stdout, p.Stderr)
	}()
	return a, nil
}

// attached is one running exec with its multiplexed stream
// (container.Process).
type attached struct {
	x     *box
	id    string
	conn  *engine.Hijacked
	done  chan struct{} // the stream ended
	ioErr error         // set before done closes
}

// feed copies r to the exec's stdin and then closes it (a half-close
// dockerd passes on as end of file).
func (a *attached) feed(r io.Reader) {
	_, _ = io.Copy(a.conn, r)
	_ = a.conn.CloseWrite()
}

func (a *attached) Exited() <-chan struct{} { return a.done }
func (a *attached) Abort()                  { a.conn.Close() }

// Wait waits for dockerd to record the exec's exit and returns it.
func (a *attached) Wait() container.Exit {
	<-a.done
	a.conn.Close()
	exit := container.Exit{IO: a.ioErr}
	deadline := time.Now().Add(inspectGrace)
	for delay := 2 * time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), inspectGrace)
		in, err := a.x.rt.cli.ExecInspect(ctx, a.id)
		cancel()
		if err != nil {
			exit.Code, exit.Err = -1, fmt.Errorf("sandbox %s: inspecting the exec: %w", a.x.id, err)
			return exit
		}
		if !in.Running {
			exit.Code = in.ExitCode
			return exit
		}
		if time.Now().After(deadline) {
			exit.Code, exit.Err = -1, fmt.Errorf("sandbox %s: the exec's stream ended but dockerd still reports it running", a.x.id)
			return exit
		}
		time.Sleep(delay)
	}
}

func joinErrs(errs []error) error { return errors.Join(errs...) }

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/ironclaw/ironclaw/internal/client"
)

// exec -t: the command runs as a background process on a terminal inside
// the sandbox (spawn with pty), and this terminal is attached to it over
// the daemon's WebSocket (GET .../processes/{pid}/tty). With -i the local
// terminal is put in raw mode and what is typed goes to the command
// (Ctrl-C included: it reaches the command, not ironclaw); its size
// follows this terminal's (SIGWINCH). ironclaw exits with the command's
// code and restores the terminal on the way out.

// errNoTerminal is -t without a terminal on stdin.
var errNoTerminal = errors.New("-t needs a terminal: stdin is not one (drop -t to run without a terminal, or run this from a terminal)")

// ttyExec is one exec -t.
type ttyExec struct {
	id          string
	req         client.SpawnRequest
	interactive bool
}

// fdOf returns the descriptor of r if it is a terminal.
func fdOf(r any) (int, bool) {
	f, ok := r.(*os.File)
	if !ok || f == nil {
		return 0, false
	}
	fd := int(f.Fd())
	return fd, term.IsTerminal(fd)
}

func (x ttyExec) run(ctx context.Context, e *env) error {
	inFD, ok := fdOf(e.stdin)
	if !ok {
		return errNoTerminal
	}
	sizeFD := inFD
	if fd, ok := fdOf(e.stdout); ok {
		sizeFD = fd
	}
	size := func() (int, int) {
		w, h, err := term.GetSize(sizeFD)
		if err != nil || w < 1 || h < 1 {
			return 24, 80
		}
		return min(h, 1000), min(w, 1000)
	}
	x.req.PTY, x.req.Stdin = true, false
	x.req.Rows, x.req.Cols = size()
	cl := newClient()
	p, err := spawnApproved(ctx, e, cl, x.id, x.req)
	if err != nil {
		return err
	}
	if p.Exit != nil && p.Error != "" {
		fmt.Fprintf(e.stderr, "ironclaw: %s\n", safe(p.Error))
		return exitCode(*p.Exit)
	}
	t, err := cl.AttachTerminal(ctx, x.id, p.PID, 0)
	if err != nil {
		x.kill(cl, p.PID)
		return err
	}
	defer t.Close()

	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-winch:
				_ = t.Resize(size())
			case <-stop:
				return
			}
		}
	}()
	if x.interactive {
		old, err := term.MakeRaw(inFD)
		if err != nil {
			x.kill(cl, p.PID)
			return fmt.Errorf("putting the terminal in raw mode: %w", err)
		}
		defer func() { _ = term.Restore(inFD, old) }()
		go func() { _, _ = io.Copy(t, e.stdin) }()
	}
	code, err := t.Copy(e.stdout, func(n int64) {
		fmt.Fprintf(e.stderr, "\r\nironclaw: %d bytes of output were no longer held\r\n", n)
	})
	if err != nil {
		// Interrupted, or the session broke: the command does not
		// outlive this exec.
		x.kill(cl, p.PID)
		return err
	}
	if code < 0 {
		return exitCode(ExitIronClaw) // its end is unknown
	}
	return exitCode(code)
}

// kill ends the process of an exec -t that will not be waited for.
func (x ttyExec) kill(cl *client.Client, pid int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = cl.KillProcess(ctx, x.id, pid)
}

// spawnApproved spawns req, waiting for an operator's approval when the
// policy marks the command.
func spawnApproved(ctx context.Context, e *env, cl *client.Client, id string, req client.SpawnRequest) (client.Process, error) {
	p, err := cl.Spawn(ctx, id, req)
	var need *client.ApprovalRequiredError
	if !errors.As(err, &need) {
		return p, err
	}
	aid := need.Approval.ID
	fmt.Fprintf(e.stderr, "ironclaw: this command needs approval: waiting for request %s (ironclaw approvals approve %s)\n", aid, aid)
	a := need.Approval
	for a.State == "pending" {
		if a, err = cl.GetApproval(ctx, aid, approvalPoll); err != nil {
			return p, err
		}
	}
	if a.State != "approved" {
		return p, fmt.Errorf("request %s was %s", aid, a.State)
	}
	req.Approval = aid
	return cl.Spawn(ctx, id, req)
}
